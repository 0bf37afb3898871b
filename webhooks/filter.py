"""Extender filter: plan the whole pod with the placement engine, reserve at once, record it on the pod.

Order matters for safety: plan and reserve in memory under the fleet lock (the next filter already
sees this reservation), then write the reservation onto the pod; if that write fails the in-memory
reservation is rolled back before we answer, so nothing holds slices no pod records.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from mig.allowlist import ResourceNames
from mig.annotations import (
    DEVICES_ALLOCATED,
    DEVICES_TO_ALLOCATE,
    MIG_ALLOCATIONS,
    VGPU_NODE,
    VGPU_TIME,
    ContainerDevice,
    encode_allocations,
    encode_devices,
)
from mig.placement import ContainerRequest, Plan, PodRequest, Refusal, RequestError, container_request
from webhooks.extender import BadArgs, ExtenderArgs, ExtenderFilterResult
from webhooks.fleet import Fleet, usage_from_plan
from webhooks.kube import EventRecorder, Kube
from webhooks.metrics import Metrics
from webhooks.occupancy import PodUsage

log = logging.getLogger(__name__)
DEVICE_TYPE = "NVIDIA"  # the Type field of HAMi's device strings


def _containers(pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    spec = pod.get("spec") or {}
    return [c for key in ("initContainers", "containers") for c in (spec.get(key) or []) if isinstance(c, dict)]


def _resources(container: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    res = container.get("resources")
    value = res.get(kind) if isinstance(res, dict) else None
    return value if isinstance(value, dict) else {}


def pod_request(pod: Mapping[str, Any], names: ResourceNames) -> PodRequest | None:
    """The pod's MIG request (init containers first, HAMi order), or None when it asks for no GPU."""
    requests: list[ContainerRequest] = []
    for c in _containers(pod):
        try:
            requests.append(container_request(str(c.get("name", "?"))[:253], _resources(c, "limits"),
                                              _resources(c, "requests"), names))
        except RequestError as error:
            raise BadArgs(str(error)) from None
    if not any(r.devices for r in requests):
        return None
    meta = pod.get("metadata") or {}
    return PodRequest.from_annotations(requests, meta.get("annotations") or {},
                                       name=f"{meta.get('namespace')}/{meta.get('name')}")


def reservation_patch(plan: Plan, usage: PodUsage, containers: int, now: float) -> dict[str, Any]:
    """HAMi's filter-time annotations (merge patch) for a plan."""
    per_container: list[list[ContainerDevice]] = [[] for _ in range(containers)]
    for d in plan.devices:
        per_container[d.container_index].append(ContainerDevice(d.gpu_uuid, DEVICE_TYPE, d.memory_mb, d.core))
    devices = encode_devices(per_container)
    allocations = encode_allocations(usage.allocations)
    annotations = {VGPU_NODE: plan.node, VGPU_TIME: str(int(now)), DEVICES_TO_ALLOCATE: devices,
                   DEVICES_ALLOCATED: devices, MIG_ALLOCATIONS: allocations}
    return {"metadata": {"annotations": annotations, "labels": {VGPU_NODE: plan.node}}}


_STRIPES = 64


@dataclass
class Filter:
    fleet: Fleet
    kube: Kube | None
    resources: Callable[[], ResourceNames]
    events: EventRecorder
    metrics: Metrics
    blocked: Callable[[str, str], dict[str, str]] = lambda namespace, name: {}
    # Two filters of the same pod must not interleave: the later plan could be written first and the
    # earlier one last, leaving the pod's record and the in-memory reservation disagreeing.
    _pod_locks: tuple[threading.Lock, ...] = field(
        default_factory=lambda: tuple(threading.Lock() for _ in range(_STRIPES)))
    # With a writer pool the pod patch runs after the reply (the reservation already holds the slices
    # in memory) and bind waits for it; without one the filter writes before it answers.
    writer: ThreadPoolExecutor | None = None
    _writes: dict[str, Future] = field(default_factory=dict)
    # Nodes chosen for a pod whose bind has not happened yet: its bind will take the node lock, so
    # sending another pod there now would only fail that pod's bind on lock contention.
    _awaiting: dict[str, tuple[str, float]] = field(default_factory=dict)
    awaiting_ttl: float = 30.0

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        started = time.perf_counter()
        result, full = "error", False
        try:
            args = ExtenderArgs.parse(body)
            full = args.nodes is not None
            reply, result = self._filter(args)
        except BadArgs as error:
            reply = ExtenderFilterResult(error=str(error))
        self.metrics.filter_latency.labels(result).observe(time.perf_counter() - started)
        return reply.to_wire(full)

    def _filter(self, args: ExtenderArgs) -> tuple[ExtenderFilterResult, str]:
        pod = args.pod
        meta = pod["metadata"]
        uid, namespace, name = meta.get("uid") or "", meta.get("namespace") or "", meta.get("name") or ""
        request = pod_request(pod, self.resources())
        if request is None:  # not a GPU pod: every candidate stays
            return ExtenderFilterResult(node_names=list(args.node_names), nodes=list(args.nodes or [])), "skipped"
        with self._pod_locks[hash(uid) % _STRIPES]:
            return self._place(args, pod, uid, namespace, name, request)

    def _place(self, args: ExtenderArgs, pod: dict[str, Any], uid: str, namespace: str, name: str,
               request: PodRequest) -> tuple[ExtenderFilterResult, str]:
        containers = len(_containers(pod))
        blocked = self.blocked(namespace, name)  # binding elsewhere would fail on the node lock
        blocked.update(self._awaiting_binds(uid))
        candidates = [n for n in args.node_names if n not in blocked] if blocked else args.node_names
        self.wait_recorded(uid)  # an earlier filter's write of this pod lands before a new plan
        outcome, usage = self.reserve(request, candidates, uid, namespace, name)
        if isinstance(outcome, Refusal):
            return self._refuse(pod, uid, args, outcome, blocked), "unschedulable"
        self._awaiting[outcome.node] = (uid, time.monotonic() + self.awaiting_ttl)
        if self.writer is not None:
            # One hand-off per filter: the writer also queues the event. Every thread the filter wakes
            # can take its CPU (and the GIL) before the reply is out.
            self._writes[uid] = self.writer.submit(self._record_and_tell, pod, outcome, usage, containers)
        else:
            error = self._record_and_tell(pod, outcome, usage, containers)
            if error:
                return ExtenderFilterResult(error=error), "error"
        chosen = [n for n in (args.nodes or ()) if (n.get("metadata") or {}).get("name") == outcome.node]
        return ExtenderFilterResult(node_names=[outcome.node], nodes=chosen), "scheduled"

    def _awaiting_binds(self, uid: str) -> dict[str, str]:
        now = time.monotonic()
        out = {}
        for node, (owner, deadline) in list(self._awaiting.items()):
            if deadline < now:
                self._awaiting.pop(node, None)
            elif owner != uid:
                out[node] = "chosen for another pod whose bind is in progress"
        return out

    def bind_done(self, uid: str, node: str) -> None:
        """The pod's bind finished (either way): its node is no longer held for it."""
        if self._awaiting.get(node, ("",))[0] == uid:
            self._awaiting.pop(node, None)
        future = self._writes.get(uid)
        if future is not None and future.done():
            self._writes.pop(uid, None)

    def wait_recorded(self, uid: str, timeout: float = 30.0) -> str:
        """Wait for the pod's pending reservation write; "" when written (or none), else why not."""
        future = self._writes.get(uid)
        if future is None:
            return ""
        try:
            error = future.result(timeout)
        except FutureTimeout:
            return "the MIG reservation is still being written to the pod; retry"
        if not error and self._writes.get(uid) is future:
            del self._writes[uid]  # a failure stays until the bind has seen it (see bind_done)
        return error

    def reserve(self, request: PodRequest, candidates, uid: str, namespace: str,
                name: str) -> tuple[Plan | Refusal, PodUsage | None]:
        """Plan the pod over the candidate nodes and hold the plan in memory, atomically."""
        self.fleet.sweep()
        with self.fleet.lock:
            self.fleet.forget_pod(uid)  # a re-filter never counts the pod's previous reservation
            outcome = self.fleet.index.plan(request, nodes=candidates)
            if isinstance(outcome, Refusal):
                return outcome, None
            usage = usage_from_plan(uid, namespace, name, outcome)
            self.fleet.reserve(usage)
            return outcome, usage

    def _record_and_tell(self, pod: dict[str, Any], plan: Plan, usage: PodUsage, containers: int) -> str:
        """Record the reservation; once it is on the pod, HAMi's FilteringSucceed event."""
        error = self._record(pod, plan, usage, containers)
        if not error:
            profiles = ", ".join(f"{d.profile}@{d.gpu_uuid}[{d.placement}]" for d in plan.devices)
            self.events.record(pod, "Normal", "FilteringSucceed", f"find fit node({plan.node}): {profiles}")
        return error

    def _record(self, pod: dict[str, Any], plan: Plan, usage: PodUsage, containers: int) -> str:
        """Write the reservation onto the pod; on failure roll the in-memory one back."""
        meta = pod["metadata"]
        try:
            if self.kube is None:
                raise RuntimeError("no API client")
            patched = self.kube.patch_pod(meta.get("namespace") or "", meta.get("name") or "",
                                          reservation_patch(plan, usage, containers, time.time()))
        except Exception as error:  # noqa: BLE001 - any failure must roll the reservation back
            self.fleet.release(usage.uid, usage)
            log.warning("filter: patching %s/%s failed: %s", meta.get("namespace"), meta.get("name"), error)
            return f"could not record the MIG reservation on the pod: {error}"
        if isinstance(patched, dict):
            self.fleet.set_pod(patched)  # the API's reply confirms the record without waiting for the watch
        return ""

    def _refuse(self, pod: dict[str, Any], uid: str, args: ExtenderArgs, refusal: Refusal,
                blocked: dict[str, str]) -> ExtenderFilterResult:
        failed = {node: blocked.get(node) or self._node_text(refusal, node) for node in args.node_names}
        counts = refusal.counts()
        headline = counts.most_common(1)[0][0] if counts else ("node-locked" if blocked else "no-mig-gpus")
        self.fleet.set_pending(uid, headline)
        locked = (f"{len(blocked)} candidate nodes are locked by binds in progress (retried when they "
                  "finish)") if blocked else ""
        text = "; ".join(t for t in (locked, _event_text(refusal) if refusal.reasons else "") if t)
        self.events.record(pod, "Warning", "FilteringFailed", text)
        return ExtenderFilterResult(node_names=[] if args.nodes is None else None, nodes=[], failed=failed)

    def _node_text(self, refusal: Refusal, node: str) -> str:
        return (refusal.node_message(node) or "no MIG GPU") + _closed_text(self.fleet.occupancy(node))


def _closed_text(occupancy) -> str:
    if occupancy is None or not occupancy.closed:
        return ""
    return "".join(f"; GPU {uuid} is not schedulable: {why}" for uuid, why in sorted(occupancy.closed.items()))


def _event_text(refusal: Refusal, examples: int = 3) -> str:
    """The summary plus the first few concrete reasons, so a person sees what to change."""
    details = "; ".join(str(r) for r in refusal.reasons[:examples])
    more = len(refusal.reasons) - examples
    tail = f" (+{more} more)" if more > 0 else ""
    return f"{refusal.summary()}. {details}{tail}"
