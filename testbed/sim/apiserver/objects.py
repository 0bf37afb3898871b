"""Per-type rules applied on create and update, as the real registry strategies do (the parts that
matter to clients: defaults, what an update may change, names)."""

from __future__ import annotations

import random
import re
import string
import time
import uuid
from typing import Any

from sim.apiserver import defaults, metadata, quantity
from sim.apiserver.errors import ApiError, invalid
from sim.apiserver.resources import ResourceType
from sim.apiserver.trees import clone

_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_LABEL_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def rfc3339(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def generate_name(prefix: str) -> str:
    return prefix + "".join(random.choices(string.ascii_lowercase + string.digits, k=5))


def check_name(rt: ResourceType, name: str) -> None:
    pattern = _LABEL_NAME_RE if rt.plural == "namespaces" else _NAME_RE
    limit = 63 if rt.plural == "namespaces" else 253
    if not name or len(name) > limit or not pattern.match(name):
        raise invalid(
            rt.kind,
            rt.group,
            name,
            "metadata.name",
            f"Invalid value: {name!r}: a lowercase RFC 1123 name must consist of lower case "
            "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric "
            "character",
        )


def prepare_create(rt: ResourceType, obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    """Stamp identity and defaults onto a new object (uid, creationTimestamp, type defaults)."""
    metadata.decode_annotations(rt.kind, rt.version, obj.get("metadata"))
    meta = obj.setdefault("metadata", {})
    metadata.check_annotations(rt.kind, rt.group, str(meta.get("name") or ""), meta)
    meta["uid"] = str(uuid.uuid4())
    meta["creationTimestamp"] = now()
    for drop in ("deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion", "selfLink"):
        meta.pop(drop, None)
    if rt.namespaced:
        meta["namespace"] = namespace
    else:
        meta.pop("namespace", None)
    obj["apiVersion"] = rt.group_version
    obj["kind"] = rt.kind
    if rt.key == ("", "pods"):
        _pod_defaults(rt, obj)
    elif rt.key in WORKLOADS:
        defaults.workload(rt.kind, obj)
        meta["generation"] = 1  # its controller answers with status.observedGeneration
    elif rt.key == ("", "namespaces"):
        meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
        obj.setdefault("spec", {"finalizers": ["kubernetes"]})
        obj["status"] = {"phase": "Active"}
    elif rt.key == ("", "nodes"):
        obj.setdefault("spec", {})
        obj.setdefault("status", {})
    elif rt.key == ("", "secrets"):
        obj.setdefault("type", "Opaque")
    elif rt.key == ("batch", "jobs"):
        _job_defaults(obj)
    elif rt.key == ("policy", "poddisruptionbudgets"):
        meta["generation"] = 1  # the disruption controller answers it with status.observedGeneration
        obj["status"] = {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}
    canonicalize_quantities(rt, obj)
    return obj


WORKLOADS = (("apps", "deployments"), ("apps", "replicasets"), ("apps", "daemonsets"))


def _job_defaults(job: dict[str, Any]) -> None:
    """The Job defaults and the selector kube-apiserver gives a new Job (batch/v1 SetDefaults_Job and
    the job strategy's generated selector: the template is labelled with the Job's uid and name)."""
    spec = job.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", 2147483647 if spec.get("backoffLimitPerIndex") is not None else 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault(
        "podReplacementPolicy", "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed"
    )
    meta = job["metadata"]
    template = spec.get("template")
    if spec.get("manualSelector") is not True and isinstance(template, dict):
        tmeta = template.setdefault("metadata", {})
        if isinstance(tmeta, dict):
            if tmeta.get("labels") and isinstance(tmeta["labels"], dict) and not meta.get("labels"):
                meta["labels"] = dict(tmeta["labels"])  # defaulting, before the selector is made
            labels = tmeta.setdefault("labels", {}) if isinstance(tmeta.get("labels", {}), dict) else {}
            for key in ("controller-uid", "batch.kubernetes.io/controller-uid"):
                labels[key] = meta["uid"]
            for key in ("job-name", "batch.kubernetes.io/job-name"):
                labels[key] = meta["name"]
        spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": meta["uid"]}}
    job["status"] = {}


def _pod_defaults(rt: ResourceType, pod: dict[str, Any]) -> None:
    spec = pod.setdefault("spec", {})
    if not spec.get("containers"):
        raise invalid(rt.kind, rt.group, pod["metadata"].get("name", ""), "spec.containers", "Required value")
    defaults.pod(pod)  # done at decoding already; again for a pod created without admission
    # A new pod's status is the server's to set: Pending, whatever the client sent.
    pod["status"] = {"phase": "Pending", "qosClass": defaults.qos_class(pod)}


_POD_MUTABLE_SPEC = (
    "activeDeadlineSeconds",
    "tolerations",
    "terminationGracePeriodSeconds",
    "schedulingGates",
)


def _pod_spec_shape(spec: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in spec.items() if k not in _POD_MUTABLE_SPEC}
    for key in ("containers", "initContainers"):
        if key in out:
            out[key] = [{k: v for k, v in c.items() if k != "image"} for c in out[key]]
    return out


def prepare_update(
    rt: ResourceType, new: dict[str, Any], old: dict[str, Any], subresource: str
) -> dict[str, Any]:
    """Carry over what an update may not change, as the type's update strategy does.

    The result shares every part this does not change with `new` and `old` (a stored object is
    never changed in place): only the object and its metadata are copied here."""
    new = dict(new)
    if isinstance(new.get("metadata"), dict):
        new["metadata"] = dict(new["metadata"])
    metadata.decode_annotations(rt.kind, rt.version, new.get("metadata"))
    meta, old_meta = new.setdefault("metadata", {}), old["metadata"]
    for key in (
        "uid",
        "creationTimestamp",
        "name",
        "namespace",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generateName",
    ):
        if key in old_meta:
            meta[key] = old_meta[key]
        else:
            meta.pop(key, None)
    new["apiVersion"], new["kind"] = rt.group_version, rt.kind
    if subresource == "status":
        # The status endpoint changes status only; spec and metadata stay as stored.
        out = {**old, "metadata": dict(old_meta)}
        out["status"] = new.get("status", {})
        out["metadata"]["resourceVersion"] = meta.get("resourceVersion", old_meta.get("resourceVersion"))
        canonicalize_quantities(rt, out)
        return out
    metadata.check_annotations(rt.kind, rt.group, old_meta["name"], meta)
    if rt.key in WORKLOADS:
        new = clone(new)  # defaulting fills in nested maps a shallow copy shares with the stored object
        defaults.workload(rt.kind, new)
        # a change of spec is a new generation (what `kubectl rollout status` waits to be observed)
        generation = int(old_meta.get("generation") or 1)
        new["metadata"]["generation"] = generation + (new.get("spec") != old.get("spec"))
    if rt.status_via_subresource and "status" in old:
        new["status"] = old["status"]
    canonicalize_quantities(rt, new)
    if rt.key == ("", "pods") and _pod_spec_shape(new.get("spec", {})) != _pod_spec_shape(
        old.get("spec", {})
    ):
        raise invalid(
            rt.kind,
            rt.group,
            old_meta["name"],
            "spec",
            "Forbidden: pod updates may not change fields other than `spec.containers[*]."
            "image`, `spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, "
            "`spec.tolerations` (only additions to existing tolerations), "
            "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was "
            "previously negative)",
        )
    if rt.key == ("", "namespaces"):
        meta["labels"] = {**meta.setdefault("labels", {}), "kubernetes.io/metadata.name": old_meta["name"]}
    return new


def same_content(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """True when two versions differ at most in resourceVersion/managedFields (a no-op write)."""

    def strip(o: dict[str, Any]) -> dict[str, Any]:
        m = {k: v for k, v in o.get("metadata", {}).items() if k not in ("resourceVersion", "managedFields")}
        return {**o, "metadata": m}

    return strip(a) == strip(b)


# ---- resource quantities ----------------------------------------------------------------------------

_POD_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


def _is_integer_resource(name: str) -> bool:
    """Extended resources (a domain-prefixed name outside kubernetes.io, e.g. nvidia.com/gpumem)
    must be whole numbers, as kube-apiserver's validation requires."""
    return "/" in name and not name.startswith(("kubernetes.io/", "requests."))


def _quantity_maps(rt: ResourceType, obj: dict[str, Any]) -> list[tuple[str, dict[str, Any], bool]]:
    """(field path, resource map, is a container's requests/limits) of every quantity map in obj."""
    out: list[tuple[str, dict[str, Any], bool]] = []

    def pod_spec(spec: Any, path: str) -> None:
        if not isinstance(spec, dict):
            return
        for key in _POD_CONTAINER_LISTS:
            for i, c in enumerate(spec.get(key) or [] if isinstance(spec.get(key), list) else []):
                res = c.get("resources") if isinstance(c, dict) else None
                if isinstance(res, dict):
                    for part in ("limits", "requests"):
                        if isinstance(res.get(part), dict):
                            out.append((f"{path}.{key}[{i}].resources.{part}", res[part], True))
        if isinstance(spec.get("overhead"), dict):
            out.append((f"{path}.overhead", spec["overhead"], False))
        res = spec.get("resources")
        if isinstance(res, dict):
            for part in ("limits", "requests"):
                if isinstance(res.get(part), dict):
                    out.append((f"{path}.resources.{part}", res[part], False))

    if rt.key == ("", "pods"):
        pod_spec(obj.get("spec"), "spec")
    elif rt.key in (*WORKLOADS, ("batch", "jobs")):
        template = (obj.get("spec") or {}).get("template") if isinstance(obj.get("spec"), dict) else None
        if isinstance(template, dict):
            pod_spec(template.get("spec"), "spec.template.spec")
    elif rt.key == ("", "nodes") and isinstance(obj.get("status"), dict):
        for part in ("capacity", "allocatable"):
            if isinstance(obj["status"].get(part), dict):
                out.append((f"status.{part}", obj["status"][part], False))
    return out


def canonicalize_quantities(rt: ResourceType, obj: dict[str, Any]) -> None:
    """Rewrite every resource quantity in canonical form (8000 -> 8k), as kube-apiserver stores it.

    A value that is not a quantity fails decoding (400 BadRequest, as kube-apiserver's Quantity
    decoder does); a negative one, or a fractional extended resource, fails validation (422)."""
    name = (obj.get("metadata") or {}).get("name", "")
    for path, values, container in _quantity_maps(rt, obj):
        for resource, raw in list(values.items()):
            where = f"{path}[{resource}]"
            try:
                text = quantity.canonical(raw)
            except quantity.QuantityError as exc:
                raise ApiError(
                    400,
                    f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
                    f"{where}: {str(raw)[:64]!r}: {exc}",
                    "BadRequest",
                ) from exc
            if container and text.startswith("-"):
                raise invalid(
                    rt.kind,
                    rt.group,
                    name,
                    where,
                    f'Invalid value: "{text}": must be greater than or equal to 0',
                )
            if container and _is_integer_resource(resource) and quantity.parse(text)[0].denominator != 1:
                raise invalid(rt.kind, rt.group, name, where, f'Invalid value: "{text}": must be an integer')
            if text != raw:  # a map left as it was stored is already canonical, and shared
                values[resource] = text
