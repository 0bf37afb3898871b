"""kube-scheduler's DynamicResources plugin, simulated: pods with ResourceClaims get devices.

Checked against kubernetes `pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go`
(`PreEnqueue`, `foreachPodResourceClaim`, `PreFilter`, `validateDeviceClass`, `Filter`, `Reserve`,
`Unreserve`, `PreBind`, `bindClaim`, `statusUnschedulable`), its `dra_manager.go` and
`allocateddevices.go` (the assume cache of claims, in-flight allocations, every allocated device
counted as in use), `staging/src/k8s.io/dynamic-resource-allocation/resourceclaim/resourceclaim.go`
(sim.dra.podclaims) and `staging/.../structured/` (sim.dra.allocator, the allocator itself):

- **PreEnqueue**: a pod whose claims do not all exist (a template's claim not yet recorded in the
  pod's status: `pod "<ns>/<name>": ResourceClaim not created yet`; a named claim missing:
  `could not find ResourceClaim "<ns>/<name>"`; one being deleted; one not controlled by the pod) is
  not attempted at all. Upstream leaves such a pod Pending with no event and no condition (by
  design, kubernetes/kubernetes#130668; KEP-5501 would add one); `gated` says why, as its log does.
  The scheduling queue runs it when the pod is queued, on the newest pod (sim.scheduler.scheduler),
  and again when a claim changes or the pod does.
- **PreFilter**: the claims again (a failure is `0/N nodes are available: <why>.`); an allocated claim
  restricts the pod to its allocation's `nodeSelector`; a claim reserved by 256 others is
  `resourceclaim in use`; a claim whose allocation is in flight for another pod waits
  (`resource claim <ns>/<name> is in the process of being allocated`); every request's DeviceClass
  must exist (`request <r>: device class <c> does not exist`; none named: an error,
  `request <r>: unsupported request type`). For the unallocated claims one allocator is built
  from every ResourceSlice (in a fresh order each cycle: the informer's list comes from a map),
  the DeviceClasses and the devices allocated in any claim or in flight.
- **Filter** per node: `resourceclaim not available on the node` when an allocated claim's node
  selector rejects it; the allocator on that node, `cannot allocate all claims` when it finds no
  solution; an allocator error (a CEL runtime error, an invalid pool) aborts the attempt
  (`running "DynamicResources" filter plugin: ...`).
- **Reserve**: the chosen node's results become in-flight allocations (the next pod's cycle counts
  their devices). **PreBind** (in the binding thread, before the Binding): the claim gets the
  `resource.kubernetes.io/delete-protection` finalizer (an update), then `status.allocation` and the
  pod in `status.reservedFor` (resource pods, name, uid) through `/status`, retried on conflict with
  a fresh read up to 5 times (retry.DefaultRetry); an already allocated claim only gets the pod added.
  What was written is assumed until the informer catches up. **Unreserve** (the attempt failed after
  Reserve): in-flight allocations are dropped and the pod taken out of `reservedFor` (read and
  updated here; upstream sends a strategic merge patch deleting the entry by uid).

Extended resources backed by DRA (KEP-5004): `extendeddynamicresources.go`, in sim.scheduler.dra_extended;
the plugin calls it at PreFilter (the pod's special claim, in memory), Filter (the node's copy of it
with requests), Reserve, PreBind (created, allocated, then the pod's
`status.extendedResourceClaimStatus`) and Unreserve (a created one deleted).

Not simulated: PostFilter's deallocation of claims to make room, the queueing hints' choice of
events (gated pods get PreEnqueue again on any claim, slice or class change and on their own
updates; unschedulable ones are retried after their backoff), binding conditions, device taints.
"""

from __future__ import annotations

import copy
import json
import logging
import random
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from sim.dra import podclaims
from sim.dra.allocator import AllocationError, Allocator, DeviceID, Slice, SliceError, parse_slice
from sim.dra.podclaims import JSON, ClaimNameError
from sim.scheduler import dra_extended
from sim.scheduler.api import ApiWriter
from sim.scheduler.nodeselector import NodeSelector

log = logging.getLogger("sim.scheduler.dra")
PLUGIN = "DynamicResources"
CONFLICT_RETRIES = 5  # retry.DefaultRetry's Steps
RESOURCE = "/apis/resource.k8s.io/v1"


class DraUnschedulable(Exception):
    """Unschedulable (UnschedulableAndUnresolvable upstream): the message is the plugin's reason."""


class DraError(Exception):
    """The plugin failed: the scheduling attempt is aborted and retried after a backoff."""


def kobj(obj: JSON) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _key(obj: JSON) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace", "")), str(meta.get("name", "")))


def _rv(obj: JSON) -> int:
    text = str((obj.get("metadata") or {}).get("resourceVersion", ""))
    return int(text) if text.isdigit() else -1


def _allocated_devices(claim: JSON) -> Iterable[DeviceID]:
    alloc = podclaims.allocation(claim) or {}
    devices = alloc.get("devices") if isinstance(alloc.get("devices"), dict) else {}
    for r in devices.get("results") or []:
        if isinstance(r, dict):
            yield (str(r.get("driver", "")), str(r.get("pool", "")), str(r.get("device", "")))


@dataclass
class CycleState:
    """What PreFilter learned for one pod, used by Filter, Reserve, PreBind and Unreserve."""

    claims: list[JSON]
    selectors: list[NodeSelector | None]
    to_allocate: list[int] = field(default_factory=list)  # indexes into claims
    allocator: Allocator | None = None
    node_allocations: dict[str, list[JSON]] = field(default_factory=dict)
    allocations: dict[int, JSON] = field(default_factory=dict)  # index -> allocation (Reserve)
    pod: JSON = field(default_factory=dict)
    extended: int | None = None  # index of the pod's extended-resource claim in `claims`
    extended_uid: str = ""  # its uid in this cycle (the in-memory claim's temporary one)
    node_indexes: dict[str, list[int]] = field(default_factory=dict)  # claims allocated per node
    node_extended: dict[str, tuple[JSON, list[JSON]]] = field(default_factory=dict)  # claim, mappings


class DynamicResources:
    """The plugin and the caches it reads (claims, slices, classes), fed by the scheduler's informers.

    on_change: called (outside the plugin's lock) when a claim, slice or class changed, so that pods
    waiting in PreEnqueue are tried again.
    """

    def __init__(
        self,
        api_client: Any,
        api: ApiWriter,
        rng: random.Random,
        on_change: Callable[[], None] = lambda: None,
    ):
        self.resource = client.ResourceV1Api(api_client)
        self.api = api
        self.rng = rng
        self.on_change = on_change
        self._lock = threading.Lock()
        self._claims: dict[tuple[str, str], JSON] = {}
        self._assumed: dict[tuple[str, str], JSON] = {}  # written here, newer than the informer's
        self._pending: dict[str, JSON] = {}  # claim uid -> claim with its in-flight allocation
        self._slices: dict[str, Slice] = {}
        self._classes: dict[str, JSON] = {}

    # ---- informer callbacks --------------------------------------------------------------------
    def sync_claims(self, items: list[JSON]) -> None:
        with self._lock:
            self._claims = {_key(c): c for c in items if isinstance(c.get("metadata"), dict)}
            self._assumed = {k: c for k, c in self._assumed.items() if _rv(c) > _rv(self._claims.get(k, {}))}
        self.on_change()

    def claim_event(self, kind: str, claim: JSON) -> None:
        key = _key(claim)
        with self._lock:
            if kind == "DELETED":
                self._claims.pop(key, None)
                self._assumed.pop(key, None)
            else:
                self._claims[key] = claim
                if key in self._assumed and _rv(claim) >= _rv(self._assumed[key]):
                    del self._assumed[key]
        self.on_change()

    def sync_slices(self, items: list[JSON]) -> None:
        parsed = {}
        for obj in items:
            one = self._parse(obj)
            if one is not None:
                parsed[one.name] = one
        with self._lock:
            self._slices = parsed
        self.on_change()

    def slice_event(self, kind: str, obj: JSON) -> None:
        name = str((obj.get("metadata") or {}).get("name", ""))
        one = None if kind == "DELETED" else self._parse(obj)
        with self._lock:
            if one is None:
                self._slices.pop(name, None)
            else:
                self._slices[name] = one
        self.on_change()

    @staticmethod
    def _parse(obj: JSON) -> Slice | None:
        try:
            return parse_slice({"kind": "ResourceSlice", **obj})
        except (SliceError, KeyError, TypeError, ValueError) as exc:
            log.info("resource slice %s not usable: %s", (obj.get("metadata") or {}).get("name"), exc)
            return None

    def sync_classes(self, items: list[JSON]) -> None:
        with self._lock:
            self._classes = {
                str(c["metadata"].get("name")): c for c in items if isinstance(c.get("metadata"), dict)
            }
        self.on_change()

    def class_event(self, kind: str, obj: JSON) -> None:
        name = str((obj.get("metadata") or {}).get("name", ""))
        with self._lock:
            if kind == "DELETED":
                self._classes.pop(name, None)
            else:
                self._classes[name] = obj
        self.on_change()

    # ---- the claim cache -----------------------------------------------------------------------
    def _get(self, namespace: str, name: str) -> JSON | None:
        key = (namespace, name)
        return self._assumed.get(key) or self._claims.get(key)

    def _allocated(self) -> set[DeviceID]:
        """ListAllAllocatedDevices: devices of every allocated claim and of in-flight allocations."""
        out: set[DeviceID] = set()
        for key in self._claims.keys() | self._assumed.keys():
            claim = self._get(*key)
            if claim is not None:
                out.update(_allocated_devices(claim))
        for claim in self._pending.values():
            out.update(_allocated_devices(claim))
        return out

    def _assume(self, claim: JSON) -> None:
        key = _key(claim)
        with self._lock:
            if _rv(claim) > _rv(self._claims.get(key, {})):
                self._assumed[key] = claim

    # ---- PreEnqueue and PreFilter --------------------------------------------------------------
    def _pod_claims(self, pod: JSON) -> list[JSON]:
        """foreachPodResourceClaim: the pod's claims, each existing, not being deleted, and the pod's."""
        namespace = str((pod.get("metadata") or {}).get("namespace", ""))
        out = []
        try:
            entries = podclaims.pod_claims(pod)
            for entry in entries:
                resolved = podclaims.claim_name(pod, entry)
                if resolved.name is None:
                    continue
                claim = self._get(namespace, resolved.name)
                if claim is None:
                    raise DraUnschedulable(f'could not find ResourceClaim "{namespace}/{resolved.name}"')
                if (claim.get("metadata") or {}).get("deletionTimestamp"):
                    raise DraUnschedulable(f'resourceclaim "{resolved.name}" is being deleted')
                if resolved.check_owner and (why := podclaims.is_for_pod(pod, claim)):
                    raise DraUnschedulable(why)
                out.append(claim)
        except ClaimNameError as exc:
            raise DraUnschedulable(str(exc)) from exc
        return out

    def pre_enqueue(self, pod: JSON) -> str:
        """ "" when the pod may be attempted, else why it waits."""
        with self._lock:
            try:
                self._pod_claims(pod)
            except DraUnschedulable as exc:
                return str(exc)
        return ""

    def pre_filter(self, pod: JSON) -> CycleState | None:
        """The cycle's state, None for a pod without claims; DraUnschedulable or DraError."""
        with self._lock:
            claims = self._pod_claims(pod)
            special = self._extended_pre_filter(pod)
            if not claims and special is None:
                return None
            state = CycleState(claims=claims, selectors=[None] * len(claims), pod=pod)
            for i, claim in enumerate(claims):
                self._pre_filter_claim(pod, state, i, claim)
            if special is not None:
                self._extended_claim(state, special)
            if state.to_allocate:
                slices = list(self._slices.values())
                self.rng.shuffle(slices)
                state.allocator = Allocator(slices, dict(self._classes), self._allocated())
        return state

    def _pre_filter_claim(self, pod: JSON, state: CycleState, i: int, claim: JSON) -> None:
        alloc = podclaims.allocation(claim)
        if alloc is not None:
            if not podclaims.can_be_reserved(claim) and not podclaims.is_reserved_for_pod(pod, claim):
                raise DraUnschedulable("resourceclaim in use")
            if alloc.get("nodeSelector") is not None:
                try:
                    state.selectors[i] = NodeSelector(alloc["nodeSelector"], "status.allocation.nodeSelector")
                except ValueError as exc:
                    raise DraError(f"resource claim {kobj(claim)}: {exc}") from exc
            return
        state.to_allocate.append(i)
        uid = str(claim["metadata"].get("uid", ""))
        if uid in self._pending:
            raise DraUnschedulable(f"resource claim {kobj(claim)} is in the process of being allocated")
        spec = claim.get("spec") if isinstance(claim.get("spec"), dict) else {}
        devices = spec.get("devices") if isinstance(spec.get("devices"), dict) else {}
        for ri, request in enumerate(devices.get("requests") or []):
            if not isinstance(request, dict):
                raise DraError(f"resource claim {kobj(claim)}: spec.devices.requests[{ri}] is not an object")
            name = str(request.get("name", ""))
            subs = request.get("firstAvailable")
            if not subs:
                exactly = request.get("exactly") if isinstance(request.get("exactly"), dict) else {}
                self._validate_class(exactly.get("deviceClassName"), name)
                continue
            for sub in subs if isinstance(subs, list) else []:
                sub = sub if isinstance(sub, dict) else {}
                self._validate_class(sub.get("deviceClassName"), f"{name}/{sub.get('name', '')}")

    def _validate_class(self, class_name: Any, request: str) -> None:
        if not isinstance(class_name, str) or not class_name:
            raise DraError(f"request {request}: unsupported request type")
        if class_name not in self._classes:
            raise DraUnschedulable(f"request {request}: device class {class_name} does not exist")

    # ---- extended resources backed by DRA (sim.scheduler.dra_extended) --------------------------
    def backed_by_dra(self, resource: str) -> bool:
        """For NodeResourcesFit (noderesources/fit.go with DRAExtendedResource): a resource some
        DeviceClass maps is left to this plugin on a node whose allocatable has none of it."""
        with self._lock:
            return dra_extended.backed_by_dra(resource, self._classes)

    def _extended_pre_filter(self, pod: JSON) -> JSON | None:
        """preFilterExtendedResources: the pod's claim of an earlier cycle, or one in memory; None
        when no DeviceClass maps any extended resource the pod asks for."""
        if not dra_extended.wants_dra(pod, self._classes):
            return None
        namespace = str((pod.get("metadata") or {}).get("namespace", ""))
        mine = [self._get(*k) for k in self._claims.keys() | self._assumed.keys() if k[0] == namespace]
        found = dra_extended.find_claim(pod, [c for c in mine if c is not None])
        return found if found is not None else dra_extended.in_memory_claim(pod, str(uuid.uuid4()))

    def _extended_claim(self, state: CycleState, claim: JSON) -> None:
        state.extended = len(state.claims)
        state.extended_uid = str(claim["metadata"].get("uid", ""))
        state.claims.append(claim)
        state.selectors.append(None)
        if claim["metadata"].get("name") != dra_extended.IN_MEMORY:
            # written in an earlier cycle whose binding failed: upstream's Filter refuses every node
            # ("cannot schedule extended resource claim") and PostFilter deletes it; here it is
            # deleted at once and the pod tried again
            threading.Thread(target=self._delete_claim, args=(claim,), daemon=True).start()
            raise DraUnschedulable("cannot schedule extended resource claim")
        state.to_allocate.append(state.extended)

    def _extended_filter(self, state: CycleState, node: JSON, name: str) -> list[int] | str:
        """filterExtendedResources: the claims to allocate on this node (the node's copy of the
        extended-resource claim, with its requests, in place of the in-memory one), or why not."""
        if state.extended is None:
            return state.to_allocate
        try:
            needs = dra_extended.node_needs(state.pod, node, self._classes)
        except dra_extended.CannotFit:
            return "cannot fit resource"
        indexes = [i for i in state.to_allocate if i != state.extended]
        if needs:
            node_claim = copy.deepcopy(state.claims[state.extended])
            requests, mappings = dra_extended.requests_and_mappings(state.pod, needs, self._classes)
            node_claim["spec"] = {"devices": {"requests": requests}}
            state.node_extended[name] = (node_claim, mappings)
            indexes.append(state.extended)
        return indexes

    def _extended_pre_bind(self, state: CycleState, i: int, pod: JSON, node: str) -> None:
        """createExtendedResourceClaimInAPI, bindClaim, patchPodExtendedResourceClaimStatus."""
        if node not in state.node_extended:
            return  # this node serves the pod's extended resources through its device plugins
        claim, mappings = state.node_extended[node]
        meta = claim["metadata"]
        body = {**claim, "metadata": {k: v for k, v in meta.items() if k not in ("name", "uid")}}
        body.pop("status", None)
        try:
            created = json.loads(
                self.api.send("POST", f"{RESOURCE}/namespaces/{meta['namespace']}/resourceclaims", body)
            )
        except client.ApiException as exc:
            raise DraError(f"create claim for extended resources {kobj(claim)}: {_message(exc)}") from exc
        state.claims[i] = created
        state.claims[i] = self._bind_claim(state, i, pod)
        status = {
            "extendedResourceClaimStatus": {
                "requestMappings": mappings,
                "resourceClaimName": created["metadata"]["name"],
            }
        }
        pm = pod["metadata"]
        try:
            self.api.send(
                "PATCH",
                f"/api/v1/namespaces/{pm['namespace']}/pods/{pm['name']}/status",
                {"status": status},
                content_type="application/strategic-merge-patch+json",
            )
        except client.ApiException as exc:
            raise DraError(
                f"update pod {pm['namespace']}/{pm['name']} ExtendedResourceClaimStatus: {_message(exc)}"
            ) from exc

    def _extended_unreserve(self, state: CycleState) -> None:
        """unreserveExtendedResourceClaim: a claim already written is deleted."""
        if state.extended is None:
            return
        claim = state.claims[state.extended]
        if claim["metadata"].get("name") != dra_extended.IN_MEMORY:
            self._delete_claim(claim)

    def _delete_claim(self, claim: JSON) -> None:
        """deleteClaim: the finalizer removed, then the claim deleted."""
        meta = claim["metadata"]
        path = f"{RESOURCE}/namespaces/{meta['namespace']}/resourceclaims/{meta['name']}"
        try:
            current = self._read(claim)
            finalizers = current["metadata"].get("finalizers") or []
            if podclaims.FINALIZER in finalizers:
                current["metadata"]["finalizers"] = [f for f in finalizers if f != podclaims.FINALIZER]
                self.api.send("PUT", path, current)
            self.api.send("DELETE", path, {})
        except (client.ApiException, DraError) as exc:
            log.info("delete extended resource claim %s: %s", kobj(claim), exc)

    # ---- Filter --------------------------------------------------------------------------------
    def filter(self, state: CycleState, node: JSON) -> str | None:
        """Why the node cannot take the pod's claims, None when it can (its results kept)."""
        name = str((node.get("metadata") or {}).get("name", ""))
        unavailable = any(s is not None and not s.matches(node) for s in state.selectors)
        results: list[JSON] | None = None
        indexes = self._extended_filter(state, node, name)
        if isinstance(indexes, str):
            return indexes
        if state.allocator is not None and indexes:
            to_allocate = [
                state.node_extended[name][0] if i == state.extended else state.claims[i] for i in indexes
            ]
            try:
                results = state.allocator.allocate(name, to_allocate, pool_order=self.rng)
            except AllocationError as exc:
                raise DraError(f'running "{PLUGIN}" filter plugin: {exc}') from exc
            except (KeyError, TypeError, ValueError) as exc:  # a claim the API should have refused
                raise DraError(f'running "{PLUGIN}" filter plugin: unreadable claim: {exc!r}') from exc
            if results is None or len(results) != len(to_allocate):
                return "cannot allocate all claims"
        if unavailable:
            return "resourceclaim not available on the node"
        state.node_indexes[name] = indexes
        if results is not None:
            state.node_allocations[name] = results
        return None

    # ---- Reserve, PreBind, Unreserve -----------------------------------------------------------
    def reserve(self, state: CycleState, node: str) -> None:
        """The node's results become in-flight allocations, counted as in use from now on."""
        indexes = state.node_indexes.get(node, state.to_allocate)
        if not indexes:
            return
        results = state.node_allocations.get(node)
        if results is None or len(results) != len(indexes):
            raise DraError("claim allocation not found for node")
        with self._lock:
            for i, allocation in zip(indexes, results, strict=True):
                state.allocations[i] = allocation
                claim = state.node_extended[node][0] if i == state.extended else state.claims[i]
                pending = copy.deepcopy(claim)
                pending.setdefault("status", {})["allocation"] = allocation
                self._pending[str(pending["metadata"].get("uid", ""))] = pending

    def pre_bind(self, state: CycleState, pod: JSON, node: str) -> None:
        """Every claim not yet reserved for the pod gets its allocation (if new) and the pod."""
        for i in range(len(state.claims)):
            try:
                if i == state.extended:
                    self._extended_pre_bind(state, i, pod, node)
                elif not podclaims.is_reserved_for_pod(pod, state.claims[i]):
                    state.claims[i] = self._bind_claim(state, i, pod)
            except DraError as exc:
                raise DraError(f'running PreBind plugin "{PLUGIN}": {exc}') from exc

    def _bind_claim(self, state: CycleState, i: int, pod: JSON) -> JSON:
        claim = copy.deepcopy(state.claims[i])
        allocation = state.allocations.get(i)
        uid = state.extended_uid if i == state.extended else str(claim["metadata"].get("uid", ""))
        try:
            for attempt in range(CONFLICT_RETRIES):
                if attempt:
                    claim = self._read(claim)
                try:
                    written = self._write_allocation(claim, allocation, pod)
                except client.ApiException as exc:
                    if exc.status == 409 and attempt + 1 < CONFLICT_RETRIES:
                        continue
                    what = (
                        "add allocation and reservation to"
                        if allocation is not None
                        else "add reservation to"
                    )
                    raise DraError(f"{what} claim {kobj(claim)}: {_message(exc)}") from exc
                self._assume(written)
                return written
            raise DraError(f"claim {kobj(claim)}: too many conflicts")  # unreachable: the loop raises
        finally:
            if allocation is not None:
                with self._lock:
                    self._pending.pop(uid, None)

    def _write_allocation(self, claim: JSON, allocation: JSON | None, pod: JSON) -> JSON:
        meta = claim["metadata"]
        if meta.get("deletionTimestamp"):
            raise DraError(f"claim {kobj(claim)} got deleted in the meantime")
        path = f"{RESOURCE}/namespaces/{meta['namespace']}/resourceclaims/{meta['name']}"
        if allocation is not None:
            if podclaims.allocation(claim) is not None:
                raise DraError(f"claim {kobj(claim)} got allocated elsewhere in the meantime")
            if not podclaims.has_finalizer(claim):
                # a normal update: the finalizer keeps the claim until its allocation is cleared
                meta.setdefault("finalizers", []).append(podclaims.FINALIZER)
                claim = json.loads(self.api.send("PUT", path, claim))
            claim.setdefault("status", {})["allocation"] = allocation
        status = claim.setdefault("status", {})
        status["reservedFor"] = [
            *podclaims.reserved_for(claim),
            {"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]},
        ]
        return dict(json.loads(self.api.send("PUT", path + "/status", claim)))

    def _read(self, claim: JSON) -> JSON:
        meta = claim["metadata"]
        try:
            resp = self.resource.read_namespaced_resource_claim(
                meta["name"], meta["namespace"], _preload_content=False, _request_timeout=10
            )
        except client.ApiException as exc:
            raise DraError(f"get updated claim {kobj(claim)} after conflict: {_message(exc)}") from exc
        return dict(json.loads(resp.data))

    def unreserve(self, state: CycleState, pod: JSON) -> None:
        """After a failed PreBind or Binding: nothing stays in flight, the pod reserves nothing."""
        with self._lock:
            for claim in state.claims:
                if self._pending.pop(str(claim["metadata"].get("uid", "")), None) is not None:
                    self._assumed.pop(_key(claim), None)
            if state.extended_uid:
                self._pending.pop(state.extended_uid, None)
        self._extended_unreserve(state)
        for claim in state.claims:
            if podclaims.allocation(claim) is not None and podclaims.is_reserved_for_pod(pod, claim):
                self._drop_reservation(claim, str(pod["metadata"].get("uid")))

    def _drop_reservation(self, claim: JSON, pod_uid: str) -> None:
        for _ in range(CONFLICT_RETRIES):
            try:
                current = self._read(claim)
                if not any(e.get("uid") == pod_uid for e in podclaims.reserved_for(current)):
                    return
                current["status"]["reservedFor"] = [
                    e for e in podclaims.reserved_for(current) if e.get("uid") != pod_uid
                ] or None
                meta = current["metadata"]
                path = f"{RESOURCE}/namespaces/{meta['namespace']}/resourceclaims/{meta['name']}/status"
                self._assume(dict(json.loads(self.api.send("PUT", path, current))))
                return
            except client.ApiException as exc:
                if exc.status != 409:
                    log.info("unreserve %s: %s", kobj(claim), _message(exc))
                    return
            except DraError as exc:
                log.info("unreserve %s: %s", kobj(claim), exc)
                return


def _message(exc: client.ApiException) -> str:
    try:
        return str(json.loads(exc.body).get("message") or exc.reason)
    except (TypeError, ValueError, AttributeError):
        return str(exc.reason)
