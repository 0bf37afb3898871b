"""kubelet's DRA manager: the registered DRA drivers' plugins, and for a pod with ResourceClaims
the NodePrepareResources / NodeUnprepareResources calls around its containers, with the claim
info cache that makes a claim shared by pods prepared once and unprepared with its last pod.

Checked against kubernetes/kubernetes:
- `pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go`: `validateSupportedServices` (an empty list
  is refused; the first of the plugin's services that kubelet supports, `v1.DRAPlugin` or
  `v1beta1.DRAPlugin`, is chosen: the plugin's order, not kubelet's; none → refused), `add` (an
  endpoint already registered for the driver is refused), `get` (the newest plugin of a driver),
  `GetPlugin` ("DRA driver X is not registered"), `remove`;
- `pkg/kubelet/cm/dra/plugin/dra_plugin.go`: calls time out after 45 s (defaultClientCallTimeout);
- `pkg/kubelet/cm/dra/manager.go` `prepareResources`: per pod claim its name
  (`resourceclaim.Name`: `resourceClaimName`, else the pod's `status.resourceClaimStatuses` entry
  for a template claim, which must be owned by the pod), GET the claim, the pod must be in
  `status.reservedFor`, the claim allocated; all that checked before the cache changes; then the
  pod is referenced in the claim's cache entry (checkpointed) and claims not yet prepared are
  batched per driver into one NodePrepareResources with (namespace, uid, name); a gRPC error, a
  per-claim error, an unknown or a skipped claim fail the call; the devices' CDI IDs are kept;
  `GetResources`/`cdiDevicesAsList` give a container the CDI devices of the claims (and requests)
  it names in `resources.claims`; `unprepareResources`: a claim other pods still reference only
  loses this pod, the rest are batched per driver into NodeUnprepareResources and dropped from the
  cache once it succeeded; `PodMightNeedToUnprepareResources`;
- `pkg/kubelet/cm/dra/claiminfo.go` `newClaimInfoFromClaim`: the drivers are those of the
  allocation's results;
- `staging/src/k8s.io/dynamic-resource-allocation/resourceclaim/resourceclaim.go`: `Name`,
  `IsForPod`, `IsReservedForPod`; error texts as there.
The checkpoint is a JSON file (kubelet's `dra_manager_state`) when a path is given.
"""

from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import grpc
from kubernetes import client

from plugin.api import dra_v1_pb2, dra_v1_pb2_grpc, dra_v1beta1_pb2, dra_v1beta1_pb2_grpc

V1, V1BETA1 = "v1.DRAPlugin", "v1beta1.DRAPlugin"
SERVICES = (V1, V1BETA1)  # servicesSupportedByKubelet, most recent first
_WIRE = {V1: (dra_v1_pb2, dra_v1_pb2_grpc), V1BETA1: (dra_v1beta1_pb2, dra_v1beta1_pb2_grpc)}
CALL_TIMEOUT_S = 45.0


class DraError(Exception):
    """Preparing or unpreparing failed; the message is kubelet's."""


@dataclass(frozen=True)
class DraCall:
    """One NodePrepareResources / NodeUnprepareResources call as kubelet made it."""

    method: str
    driver: str
    service: str
    claims: tuple[tuple[str, str, str], ...]  # (namespace, uid, name)
    error: str | None


@dataclass
class PreparedDevice:
    driver: str
    pool: str
    device: str
    requests: list[str]
    cdi_ids: list[str]


@dataclass
class ClaimInfo:
    namespace: str
    name: str
    uid: str
    drivers: list[str]
    pods: list[str] = field(default_factory=list)
    prepared: bool = False
    devices: list[PreparedDevice] = field(default_factory=list)

    def cdi_ids(self, request: str) -> list[str]:
        base = request.split("/", 1)[0]
        return [
            cdi
            for d in self.devices
            if not request or not d.requests or request in d.requests or base in d.requests
            for cdi in d.cdi_ids
        ]


@dataclass
class _Plugin:
    driver: str
    endpoint: str
    service: str
    channel: grpc.Channel
    stub: Any


class DraManager:
    def __init__(
        self, api_client: Any, *, state_file: str | Path | None = None, timeout: float = CALL_TIMEOUT_S
    ):
        self.custom = client.CustomObjectsApi(api_client)
        self.timeout = timeout
        self.state_file = Path(state_file) if state_file else None
        self.calls: list[DraCall] = []
        self._plugins: dict[str, list[_Plugin]] = {}
        self._cache: dict[tuple[str, str], ClaimInfo] = self._load()
        self._lock = threading.RLock()

    # ---- the plugin handler (kubelet's plugin manager calls these) ------------------------------

    def validate_plugin(self, name: str, endpoint: str, versions: list[str]) -> str | None:
        _, error = _choose(versions)
        if error:
            return (
                f"invalid supported gRPC versions of DRA driver plugin {name} at endpoint {endpoint}: {error}"
            )
        return None

    def register_plugin(self, name: str, endpoint: str, versions: list[str]) -> str | None:
        if (problem := self.validate_plugin(name, endpoint, versions)) is not None:
            return problem
        service, _ = _choose(versions)
        with self._lock:
            if any(p.endpoint == endpoint for p in self._plugins.get(name, [])):
                return f"endpoint {endpoint} already registered for DRA driver plugin {name}"
            channel = grpc.insecure_channel(
                f"unix:{endpoint}", options=[("grpc.default_authority", "localhost")]
            )
            stub = _WIRE[service][1].DRAPluginStub(channel)
            self._plugins.setdefault(name, []).append(_Plugin(name, endpoint, service, channel, stub))
        return None

    def deregister_plugin(self, name: str, endpoint: str) -> None:
        with self._lock:
            plugins = self._plugins.get(name, [])
            gone = [p for p in plugins if p.endpoint == endpoint]
            self._plugins[name] = [p for p in plugins if p.endpoint != endpoint]
            if not self._plugins[name]:
                del self._plugins[name]
        for p in gone:
            p.channel.close()

    def drivers(self) -> dict[str, str]:
        """Registered driver -> the service kubelet speaks to its newest plugin."""
        with self._lock:
            return {name: plugins[-1].service for name, plugins in self._plugins.items()}

    def close(self) -> None:
        with self._lock:
            plugins = [p for ps in self._plugins.values() for p in ps]
            self._plugins.clear()
        for p in plugins:
            p.channel.close()

    def _plugin(self, driver: str) -> _Plugin:
        if not driver:
            raise DraError("DRA driver name is empty")
        with self._lock:
            plugins = self._plugins.get(driver)
            if not plugins:
                raise DraError(f"DRA driver {driver} is not registered")
            return plugins[-1]

    # ---- the cache --------------------------------------------------------------------------------

    def claims(self) -> list[ClaimInfo]:
        with self._lock:
            return [ClaimInfo(**json.loads(json.dumps(asdict(c)))) for c in self._cache.values()]

    def might_need_unprepare(self, pod_uid: str) -> bool:
        with self._lock:
            return any(pod_uid in c.pods for c in self._cache.values())

    def _load(self) -> dict[tuple[str, str], ClaimInfo]:
        if self.state_file is None or not self.state_file.exists():
            return {}
        out = {}
        for entry in json.loads(self.state_file.read_text()):
            entry["devices"] = [PreparedDevice(**d) for d in entry.get("devices", [])]
            info = ClaimInfo(**entry)
            out[(info.namespace, info.name)] = info
        return out

    def _checkpoint(self) -> None:
        if self.state_file is None:
            return
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps([asdict(c) for c in self._cache.values()]))
        tmp.replace(self.state_file)

    # ---- preparing ----------------------------------------------------------------------------------

    def prepare(self, pod: dict[str, Any]) -> None:
        """PrepareResources for `pod`; raises DraError with kubelet's message (the pod waits)."""
        try:
            self._prepare(pod)
        except DraError as error:
            raise DraError(f"prepare dynamic resources: {error}") from None

    def _prepare(self, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        uid, namespace = str(meta.get("uid") or ""), str(meta.get("namespace") or "")
        found: list[ClaimInfo] = []
        for name, must_own in claim_names(pod):  # validation first: the cache changes only after
            found.append(self._check_claim(pod, self._get_claim(namespace, name), name, must_own))
        batches: dict[str, list[ClaimInfo]] = {}
        with self._lock:
            for fresh in found:
                info = self._cache.get((namespace, fresh.name))
                if info is None:
                    info = self._cache[(namespace, fresh.name)] = fresh
                elif info.uid != fresh.uid:
                    raise DraError(
                        f"old ResourceClaim with same name {fresh.name} and different UID {info.uid} still "
                        "exists (previous pod force-deleted?!)"
                    )
                if uid not in info.pods:
                    info.pods.append(uid)
                self._checkpoint()
                if not info.prepared:
                    for driver in info.drivers:
                        batches.setdefault(driver, []).append(info)
        for driver, infos in batches.items():
            self._prepare_batch(driver, infos)
        with self._lock:
            for infos in batches.values():
                for info in infos:
                    info.prepared = True
            self._checkpoint()

    def _get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        try:
            return self.custom.get_namespaced_custom_object(
                "resource.k8s.io", "v1", namespace, "resourceclaims", name, _request_timeout=10
            )
        except client.ApiException as error:
            raise DraError(f"fetch ResourceClaim {name}: {_api_message(error)}") from None
        except Exception as error:  # noqa: BLE001 - the API unreachable: the pod waits
            raise DraError(f"fetch ResourceClaim {name}: {error}") from None

    def _check_claim(self, pod: dict[str, Any], claim: Any, name: str, must_own: bool) -> ClaimInfo:
        meta = pod.get("metadata") or {}
        claim = claim if isinstance(claim, dict) else {}
        cmeta = claim.get("metadata") if isinstance(claim.get("metadata"), dict) else {}
        status = claim.get("status") if isinstance(claim.get("status"), dict) else {}
        uid = str(meta.get("uid") or "")
        if must_own and not any(
            isinstance(o, dict) and o.get("uid") == uid and o.get("controller") is True
            for o in cmeta.get("ownerReferences") or []
        ):
            raise DraError(
                f"ResourceClaim {name} was not created for pod {meta.get('namespace')}/{meta.get('name')} "
                "(pod is not owner)"
            )
        reserved = status.get("reservedFor") if isinstance(status.get("reservedFor"), list) else []
        if not any(isinstance(r, dict) and r.get("uid") == uid for r in reserved):
            raise DraError(
                f"pod {meta.get('name')} ({uid}) is not allowed to use ResourceClaim {name} ({cmeta.get('uid')})"
            )
        allocation = status.get("allocation")
        if not isinstance(allocation, dict):
            raise DraError(f"ResourceClaim {name}: not allocated")
        results = (
            (allocation.get("devices") or {}).get("results")
            if isinstance(allocation.get("devices"), dict)
            else []
        )
        drivers: list[str] = []
        for i, result in enumerate(results if isinstance(results, list) else []):
            driver = result.get("driver") if isinstance(result, dict) else None
            if not isinstance(driver, str) or not driver:
                raise DraError(
                    f"ResourceClaim {name}: status.allocation.devices.results[{i}].driver is not a name"
                )
            if driver not in drivers:
                drivers.append(driver)
        for driver in drivers:
            self._plugin(driver)  # the driver must be there before anything changes
        return ClaimInfo(str(meta.get("namespace") or ""), name, str(cmeta.get("uid") or ""), drivers)

    def _prepare_batch(self, driver: str, infos: list[ClaimInfo]) -> None:
        plugin = self._plugin(driver)
        wire = _WIRE[plugin.service][0]
        claims = [wire.Claim(namespace=i.namespace, uid=i.uid, name=i.name) for i in infos]
        response = self._call(
            plugin, "NodePrepareResources", wire.NodePrepareResourcesRequest(claims=claims), infos
        )
        by_uid = {i.uid: i for i in infos}
        for claim_uid, result in response.claims.items():
            info = by_uid.get(claim_uid)
            if info is None:
                raise DraError(f"NodePrepareResources returned result for unknown claim UID {claim_uid}")
            if result.error:
                raise DraError(f"NodePrepareResources failed for ResourceClaim {info.name}: {result.error}")
            with self._lock:
                info.devices = [d for d in info.devices if d.driver != driver] + [
                    PreparedDevice(
                        driver, d.pool_name, d.device_name, list(d.request_names), list(d.cdi_device_ids)
                    )
                    for d in result.devices
                ]
        if len(infos) != len(response.claims):
            raise DraError(f"NodePrepareResources skipped {len(infos) - len(response.claims)} ResourceClaims")

    def _call(self, plugin: _Plugin, method: str, request: Any, infos: list[ClaimInfo]) -> Any:
        claims = tuple((i.namespace, i.uid, i.name) for i in infos)
        try:
            response = getattr(plugin.stub, method)(request, timeout=self.timeout)
        except grpc.RpcError as error:
            text = f"rpc error: code = {_code(error)} desc = {_details(error)}"
            self.calls.append(DraCall(method, plugin.driver, plugin.service, claims, text))
            raise DraError(f"{method}: {text}") from None
        self.calls.append(DraCall(method, plugin.driver, plugin.service, claims, None))
        return response

    def cdi_devices(self, pod: dict[str, Any], container: str) -> list[str]:
        """The CDI device IDs kubelet hands `container` of `pod` (GetResources): those of the claims,
        and requests of them, the container names in `resources.claims`."""
        spec = pod.get("spec") or {}
        wanted: dict[str, list[str]] = {}
        for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
            if isinstance(c, dict) and c.get("name") == container:
                for ref in (c.get("resources") or {}).get("claims") or []:
                    if isinstance(ref, dict) and isinstance(ref.get("name"), str):
                        wanted.setdefault(ref["name"], []).append(str(ref.get("request") or ""))
        namespace = str((pod.get("metadata") or {}).get("namespace") or "")
        out: list[str] = []
        extended, mappings = _extended_claim(pod)
        with self._lock:
            for pod_claim, name in _named_claims(pod):
                info = self._cache.get((namespace, name)) if pod_claim in wanted else None
                for request in wanted.get(pod_claim, []) if info else []:
                    out += [d for d in info.cdi_ids(request) if d not in out]
            info = self._cache.get((namespace, extended)) if extended else None
            for m in mappings if info is not None else []:
                if m.get("containerName") == container and m.get("resourceName") in _requested(
                    pod, container
                ):
                    out += [d for d in info.cdi_ids(str(m.get("requestName") or "")) if d not in out]
        return out

    # ---- unpreparing ------------------------------------------------------------------------------

    def unprepare(self, pod: dict[str, Any]) -> None:
        """UnprepareResources for `pod`, idempotent; raises DraError (kubelet retries)."""
        try:
            self._unprepare(pod)
        except DraError as error:
            raise DraError(f"unprepare dynamic resources: {error}") from None

    def _unprepare(self, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        uid, namespace = str(meta.get("uid") or ""), str(meta.get("namespace") or "")
        with self._lock:
            names = [c.name for c in self._cache.values() if uid in c.pods and c.namespace == namespace]
        if not names:
            names = [name for _, name in _named_claims(pod)]
        batches: dict[str, list[ClaimInfo]] = {}
        with self._lock:
            for name in names:
                info = self._cache.get((namespace, name))
                if info is None:
                    continue
                if len(info.pods) > 1:
                    if uid in info.pods:
                        info.pods.remove(uid)
                    continue
                for driver in info.drivers:
                    batches.setdefault(driver, []).append(info)
        for driver, infos in batches.items():
            plugin = self._plugin(driver)
            wire = _WIRE[plugin.service][0]
            claims = [wire.Claim(namespace=i.namespace, uid=i.uid, name=i.name) for i in infos]
            request = wire.NodeUnprepareResourcesRequest(claims=claims)
            response = self._call(plugin, "NodeUnprepareResources", request, infos)
            by_uid = {i.uid: i for i in infos}
            for claim_uid, result in response.claims.items():
                if claim_uid not in by_uid:
                    raise DraError(
                        f"NodeUnprepareResources returned result for unknown claim UID {claim_uid}"
                    )
                if result.error:
                    raise DraError(
                        f"NodeUnprepareResources failed for ResourceClaim {by_uid[claim_uid].name}: {result.error}"
                    )
            if len(infos) != len(response.claims):
                raise DraError(
                    f"NodeUnprepareResources skipped {len(infos) - len(response.claims)} ResourceClaims"
                )
        with self._lock:
            for infos in batches.values():
                for info in infos:
                    self._cache.pop((info.namespace, info.name), None)
            self._checkpoint()


def _choose(versions: list[str]) -> tuple[str, str | None]:
    if not versions:
        return "", "empty list of supported gRPC services (aka supported versions)"
    for service in versions:
        if service in SERVICES:
            return service, None
    return "", (
        f"none of services supported by the plugin ({_go_list(versions)}) are supported by the kubelet "
        f"({_go_list(list(SERVICES))})"
    )


def _requested(pod: dict[str, Any], container: str) -> set[str]:
    """The resource names the container requests a non-zero quantity of."""
    spec = pod.get("spec") or {}
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        if isinstance(c, dict) and c.get("name") == container:
            res = c.get("resources") if isinstance(c.get("resources"), dict) else {}
            reqs = dict(res.get("limits") or {}) | dict(res.get("requests") or {})
            return {str(k) for k, v in reqs.items() if str(v) not in ("0", "")}
    return set()


def _go_list(items: list[str]) -> str:
    return "[" + " ".join(json.dumps(i) for i in items) + "]"


def has_claims(pod: dict[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("resourceClaims")) or bool(_extended_claim(pod)[0])


def _extended_claim(pod: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """The claim kube-scheduler made for the pod's extended resources backed by DRA, and its request
    mappings (`status.extendedResourceClaimStatus`, KEP-5004; manager.go reads it beside the pod's
    own claims): ("", []) when there is none."""
    status = (pod.get("status") or {}).get("extendedResourceClaimStatus")
    if not isinstance(status, dict) or not isinstance(status.get("resourceClaimName"), str):
        return "", []
    mappings = status.get("requestMappings") if isinstance(status.get("requestMappings"), list) else []
    return status["resourceClaimName"], [m for m in mappings if isinstance(m, dict)]


def claim_names(pod: dict[str, Any]) -> list[tuple[str, bool]]:
    """(claim name, must the pod own it) per pod claim that has a claim (resourceclaim.Name)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    who = f'pod "{meta.get("namespace")}/{meta.get("name")}"'
    pod_claims = spec.get("resourceClaims") or []
    if not isinstance(pod_claims, list):
        raise DraError(f"{who}: spec.resourceClaims is not a list")
    statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
    out = []
    for i, pod_claim in enumerate(pod_claims):
        if not isinstance(pod_claim, dict):
            raise DraError(f"{who}: spec.resourceClaims[{i}] is not an object")
        if isinstance(pod_claim.get("resourceClaimName"), str):
            out.append((pod_claim["resourceClaimName"], False))
        elif isinstance(pod_claim.get("resourceClaimTemplateName"), str):
            status = next(
                (s for s in statuses if isinstance(s, dict) and s.get("name") == pod_claim.get("name")), None
            )
            if status is None:
                raise DraError(f"{who}: ResourceClaim not created yet")
            if isinstance(status.get("resourceClaimName"), str):
                out.append((status["resourceClaimName"], True))
        else:
            raise DraError(f'{who}, spec.resourceClaim "{pod_claim.get("name")}": unsupported API')
    extended, _ = _extended_claim(pod)
    if extended:
        out.append((extended, True))
    return out


def _named_claims(pod: dict[str, Any]) -> list[tuple[str, str]]:
    """(pod claim name, claim name) for the pod claims whose claim name is known; never raises."""
    spec, statuses = pod.get("spec") or {}, (pod.get("status") or {}).get("resourceClaimStatuses") or []
    out = []
    for pod_claim in spec.get("resourceClaims") or [] if isinstance(spec.get("resourceClaims"), list) else []:
        if not isinstance(pod_claim, dict):
            continue
        name = pod_claim.get("resourceClaimName")
        if not isinstance(name, str):
            name = next(
                (
                    s.get("resourceClaimName")
                    for s in statuses
                    if isinstance(s, dict) and s.get("name") == pod_claim.get("name")
                ),
                None,
            )
        if isinstance(name, str):
            out.append((str(pod_claim.get("name")), name))
    extended, _ = _extended_claim(pod)
    if extended:
        out.append(("", extended))
    return out


def _api_message(error: client.ApiException) -> str:
    try:
        return str(json.loads(error.body).get("message") or error.reason)
    except (TypeError, ValueError, AttributeError):
        return f"{error.status} {error.reason}"


def _code(error: grpc.RpcError) -> str:
    code = error.code() if hasattr(error, "code") else None
    return "".join(p.capitalize() for p in code.name.split("_")) if code is not None else "Unknown"


def _details(error: grpc.RpcError) -> str:
    return str(error.details()) if hasattr(error, "details") else str(error)
