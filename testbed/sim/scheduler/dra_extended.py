"""Extended resources backed by DRA (KEP-5004, `DRAExtendedResource`), as kube-scheduler's
DynamicResources plugin serves them: a pod asking a classic extended resource (`nvidia.com/mig-1g.10gb:
1`) with no ResourceClaim gets devices of the DeviceClass that names that resource.

Checked against kubernetes `pkg/scheduler/framework/plugins/dynamicresources/extendeddynamicresources.go`
(`hasDeviceClassMappedExtendedResource`, `findExtendedResourceClaim`, `preFilterExtendedResources`,
`filterExtendedResources`, `createResourceRequestAndMappings`, `createRequestsAndMappings`,
`createExtendedResourceClaimInAPI`, `patchPodExtendedResourceClaimStatus`,
`unreserveExtendedResourceClaim`), `pkg/scheduler/util/utils.go` (`IsDRAExtendedResourceName`),
`pkg/apis/core/v1/helper/helpers.go` (`IsExtendedResourceName`), the DeviceClass
`spec.extendedResourceName` documentation (k8s.io/api resource/v1 types.go: a later class wins a
duplicate name, then the name sorted first) and the resolver's implicit name
`deviceclass.resource.kubernetes.io/<class>` (`dynamicresources/extended/cache.go`):

- a resource is DRA-backed when some DeviceClass maps it (explicitly or implicitly); the pod's
  requests are summed as `resourcehelper.PodRequests` does (containers summed, each init container
  a floor);
- PreFilter finds the pod's special claim of an earlier cycle (annotation
  `resource.kubernetes.io/extended-resource-claim: "true"`, the pod its controller) or makes an
  in-memory one named `<extended-resources>` (generateName `<pod>-extended-resources-`);
- Filter, per node: each DRA-backed resource the node's allocatable has none of (a device plugin's
  resource stays with NodeResourcesFit) becomes requests of the node's copy of that claim, one per
  container (`container-<index>-request-<index of the resource among the container's sorted
  request names>`, ExactCount of its quantity, the class), sorted by name, with the mappings
  container → request; a resource neither allocatable nor DRA-backed: `cannot fit resource`;
- PreBind creates the claim (name and uid cleared), then allocates and reserves it like any claim,
  then writes `status.extendedResourceClaimStatus {requestMappings, resourceClaimName}` on the pod.

Kept in this module (functions on plain JSON) so the DynamicResources plugin calls it at its own
extension points; NodeResourcesFit's rule (skip a DRA-backed resource the node has none of)
is `backed_by_dra`. Not simulated: sidecar init containers sharing requests (each init container's
request is its own, the largest kept as upstream does), PostFilter's deletion of a stale claim.
"""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]

ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"
IN_MEMORY = "<extended-resources>"


def is_dra_extended_resource_name(name: str) -> bool:
    """IsDRAExtendedResourceName: an extended resource name (qualified, not in a kubernetes.io
    domain, not `requests.`), or a class's implicit name."""
    if name.startswith(IMPLICIT_PREFIX):
        return True
    native = "/" not in name or "kubernetes.io/" in name
    return not native and not name.startswith("requests.")


def _created(c: JSON) -> str:
    return str((c.get("metadata") or {}).get("creationTimestamp") or "")


def class_for(resource: str, classes: dict[str, JSON]) -> str | None:
    """The DeviceClass serving `resource`: its explicit `spec.extendedResourceName` (a later class
    wins a duplicate, then the name sorted first), or the implicit name of a class."""
    named = [
        c
        for c in classes.values()
        if isinstance(c.get("spec"), dict) and c["spec"].get("extendedResourceName") == resource
    ]
    if named:
        latest = max(_created(c) for c in named)
        return min(str(c["metadata"]["name"]) for c in named if _created(c) == latest)
    if resource.startswith(IMPLICIT_PREFIX) and resource[len(IMPLICIT_PREFIX) :] in classes:
        return resource[len(IMPLICIT_PREFIX) :]
    return None


def backed_by_dra(resource: str, classes: dict[str, JSON]) -> bool:
    return is_dra_extended_resource_name(resource) and class_for(resource, classes) is not None


def _count(value: Any) -> int:
    """An extended resource quantity as an integer (the API server admits only whole numbers)."""
    text = str(value)
    return int(text) if text.isdigit() else 0


def _requests(container: JSON) -> dict[str, int]:
    res = container.get("resources") if isinstance(container.get("resources"), dict) else {}
    reqs = dict(res.get("limits") or {}) | dict(res.get("requests") or {})  # limits default requests
    return {str(k): _count(v) for k, v in reqs.items() if is_dra_extended_resource_name(str(k))}


def pod_requests(pod: JSON) -> dict[str, int]:
    """The pod's extended resource requests (PodRequests: containers summed, init containers a floor)."""
    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    for c in spec.get("containers") or []:
        for k, v in _requests(c).items():
            total[k] = total.get(k, 0) + v
    for c in spec.get("initContainers") or []:
        for k, v in _requests(c).items():
            total[k] = max(total.get(k, 0), v)
    return {k: v for k, v in total.items() if v}


def wants_dra(pod: JSON, classes: dict[str, JSON]) -> bool:
    """hasDeviceClassMappedExtendedResource."""
    return any(class_for(k, classes) is not None for k in pod_requests(pod))


def find_claim(pod: JSON, claims: list[JSON]) -> JSON | None:
    """findExtendedResourceClaim: the claim annotated as the pod's extended-resource claim and
    controlled by the pod."""
    meta = pod.get("metadata") or {}
    for c in claims:
        cm = c.get("metadata") or {}
        if (cm.get("annotations") or {}).get(ANNOTATION) != "true":
            continue
        for ref in cm.get("ownerReferences") or []:
            if (
                ref.get("name") == meta.get("name")
                and ref.get("controller")
                and ref.get("uid") == meta.get("uid")
            ):
                return c
    return None


def in_memory_claim(pod: JSON, uid: str) -> JSON:
    """The special claim before it is written: no requests yet, a temporary uid."""
    meta = pod["metadata"]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "namespace": meta.get("namespace", ""),
            "name": IN_MEMORY,
            "uid": uid,
            "generateName": f"{meta['name']}-extended-resources-",
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta["name"],
                    "uid": meta.get("uid"),
                    "controller": True,
                }
            ],
            "annotations": {ANNOTATION: "true"},
        },
        "spec": {"devices": {}},
    }


class CannotFit(Exception):
    """The pod asks a resource the node neither has nor can get through DRA."""


def node_needs(pod: JSON, node: JSON, classes: dict[str, JSON]) -> dict[str, int]:
    """filterExtendedResources: the DRA-backed resources the node must provide through DRA (its
    allocatable has none of them), with the pod's quantities."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    out = {}
    for name, quantity in pod_requests(pod).items():
        have = _count(allocatable.get(name, "0"))
        if class_for(name, classes) is not None and have == 0:
            out[name] = quantity
        elif name not in allocatable:
            raise CannotFit(name)
    return out


def requests_and_mappings(
    pod: JSON, needs: dict[str, int], classes: dict[str, JSON]
) -> tuple[list[JSON], list[JSON]]:
    """createRequestsAndMappings: one ExactCount request per container and resource, its name from
    the container's index among init containers + containers and the resource's index among the
    container's sorted request names; init containers (run one at a time) share their largest."""
    spec = pod.get("spec") or {}
    inits = list(spec.get("initContainers") or [])
    containers = inits + list(spec.get("containers") or [])
    requests: list[JSON] = []
    mappings: list[JSON] = []
    for resource in sorted(needs):
        cls = class_for(resource, classes)
        if cls is None:
            continue
        short: list[tuple[JSON, JSON]] = []
        for i, c in enumerate(containers):
            res = c.get("resources") if isinstance(c.get("resources"), dict) else {}
            names = sorted(set(res.get("requests") or {}) | set(res.get("limits") or {}))
            count = _requests(c).get(resource, 0)
            if not count:
                continue
            name = f"container-{i}-request-{names.index(resource)}"
            request = {
                "name": name,
                "exactly": {"deviceClassName": cls, "allocationMode": "ExactCount", "count": count},
            }
            mapping = {"containerName": c.get("name"), "resourceName": resource, "requestName": name}
            if i < len(inits):
                short.append((request, mapping))
            else:
                requests.append(request)
                mappings.append(mapping)
        if short:
            largest = max(short, key=lambda rm: rm[0]["exactly"]["count"])[0]
            requests.append(largest)
            mappings.extend({**m, "requestName": largest["name"]} for _, m in short)
    requests.sort(key=lambda r: r["name"])
    return requests, mappings
