"""The scheduler's view of the fleet: published GPUs, what active pods hold, and in-flight reservations.

One lock guards everything here, and the placement index is kept in step on every change;
`plan_and_reserve` plans and reserves under that lock, so two filters can never be handed
overlapping placements.

Two sources of occupancy per pod, never both at once:
- *held*: what the cache shows in the pod's annotations (the durable record);
- *in flight*: what a filter reserved in memory before its patch lands. It wins over whatever the
  cache shows for that pod until the cache shows exactly this reservation (then it is dropped as
  confirmed), the pod ends, the filter rolls it back (failed patch or bind), or it expires because
  the pod never showed it. So a lost patch never leaves a phantom reservation.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mig.annotations import MigAllocation, PlacementModel
from mig.placement import GpuState, PlacementIndex, Plan, PodRequest, Refusal
from mig.pods import active_for_scheduler
from mig.reconstruct import (
    NodeGpus,
    NodeOccupancy,
    PodUsage,
    node_cordon,
    node_gpus,
    node_leftovers,
    node_register,
    pod_usage,
    reconstruct,
)
from mig.types import Placement
from webhooks.metrics import DeviceSample, GpuSample, Snapshot


@dataclass(frozen=True)
class InFlight:
    usage: PodUsage
    deadline: float


def usage_from_plan(uid: str, namespace: str, name: str, plan: Plan) -> PodUsage:
    allocations = tuple(
        MigAllocation(
            containerIndex=d.container_index,
            deviceIndex=d.device_index,
            gpuUUID=d.gpu_uuid,
            profile=d.profile,
            placement=PlacementModel(start=d.placement.start, size=d.placement.size),
        )
        for d in plan.devices
    )
    return PodUsage(
        uid=uid,
        namespace=namespace,
        name=name,
        node=plan.node,
        allocations=allocations,
        devices=tuple(d.gpu_uuid for d in plan.devices),
    )


class Fleet:
    """Nodes, pod usages and in-flight reservations, with a `PlacementIndex` kept in step."""

    def __init__(self, ttl: float = 120.0, clock: Callable[[], float] = time.monotonic):
        self.lock = threading.RLock()
        self.index = PlacementIndex()
        self.ttl = ttl
        self.clock = clock
        self._register: dict[str, tuple[Any, ...]] = {}  # node -> (registration, leftovers, cordon)
        self._published: dict[str, NodeGpus] = {}
        self._held: dict[str, PodUsage] = {}
        self._on_node: dict[str, set[str]] = {}
        self._in_flight: dict[str, InFlight] = {}
        self._in_flight_on: dict[str, set[str]] = {}  # node -> uids with an in-flight reservation there
        self._deadlines: list[tuple[float, str]] = []
        self._occupancy: dict[str, NodeOccupancy] = {}
        self._pending: dict[str, str] = {}
        self._versions: dict[str, int] = {}  # last resourceVersion applied per pod: never go backwards
        self.synced = False

    # ---- feed from the cache ---------------------------------------------------------------
    def set_node(self, node: Mapping[str, Any]) -> None:
        name = (node.get("metadata") or {}).get("name") or ""
        published = (node_register(node), node_leftovers(node), node_cordon(node))
        with self.lock:
            if name in self._register and self._register[name] == published:
                return  # heartbeats and label changes do not touch what the node publishes
            self._register[name] = published
            self._published[name] = node_gpus(name, *published)
            self._refresh(name)

    def delete_node(self, name: str) -> None:
        with self.lock:
            self._register.pop(name, None)
            self._published.pop(name, None)
            self._refresh(name)

    def set_pod(self, pod: Mapping[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        uid = meta.get("uid") or ""
        usage = pod_usage(pod)
        version = _version(meta)
        with self.lock:
            if version is not None:
                if version < self._versions.get(uid, -1):
                    return  # an older copy (a lagging watch after we applied a patch reply)
                self._versions[uid] = version
            if (pod.get("spec") or {}).get("nodeName") or not active_for_scheduler(pod):
                self._pending.pop(uid, None)
            dirty: list[str] = []
            flight = self._in_flight.get(uid)
            old = self._held.get(uid)
            # the cache shows exactly the reservation held in flight (the bind's Binding carried it):
            # it moves from in flight to held, and what the node's GPUs hold does not change
            handover = flight is not None and old is None and usage == flight.usage
            if flight is not None and (not active_for_scheduler(pod) or _same(usage, flight.usage)):
                dirty = self._drop_in_flight(uid)
            if old != usage:
                self._unhold(uid)
                if usage is not None:
                    self._held[uid] = usage
                    self._on_node.setdefault(usage.node, set()).add(uid)
                dirty += [n for n in (old and old.node, usage and usage.node) if n]
            if dirty and not handover:
                self._refresh(*dirty)

    def delete_pod(self, pod: Mapping[str, Any]) -> None:
        uid = (pod.get("metadata") or {}).get("uid") or ""
        with self.lock:
            self._pending.pop(uid, None)
            self._versions.pop(uid, None)
            nodes = self._drop_in_flight(uid)
            old = self._unhold(uid)
            self._refresh(*nodes, *([old.node] if old else []))

    def replace_pods(self, pods: Sequence[Mapping[str, Any]]) -> None:
        """A relist: forget pods that are gone, then apply every listed one."""
        uids = {(p.get("metadata") or {}).get("uid") for p in pods}
        with self.lock:
            for uid in [u for u in self._versions if u not in uids]:
                del self._versions[uid]
            for uid in [u for u in self._pending if u not in uids]:
                del self._pending[uid]  # refused, then deleted while the watch was down
            for uid in [u for u in self._held if u not in uids]:
                old = self._unhold(uid)
                if old:
                    self._refresh(old.node)
            for pod in pods:
                self.set_pod(pod)

    def replace_nodes(self, nodes: Sequence[Mapping[str, Any]]) -> None:
        names = {(n.get("metadata") or {}).get("name") for n in nodes}
        with self.lock:
            for name in [n for n in self._register if n not in names]:
                self.delete_node(name)
            for node in nodes:
                self.set_node(node)

    # ---- reservations by the filter ----------------------------------------------------------
    def plan_and_reserve(
        self,
        request: PodRequest,
        nodes: Collection[str] | None,
        uid: str,
        namespace: str,
        name: str,
        blocked: Collection[str] = (),
    ) -> Refusal | tuple[Plan, PodUsage]:
        """Plan the pod over `nodes` (None: every node) but none of `blocked`, and hold the plan in
        memory, atomically: the next plan already counts it, so two pods are never handed
        overlapping placements. A re-filter never counts the pod's previous reservation (held or in
        flight). `blocked` (nodes a bind would fail on now) stays blocked in the index until the next
        plan, so passing about the same set every time moves only the nodes that changed; every
        other reader of the index (defrag, diagnoses) plans over blocked nodes too."""
        self.sweep()
        with self.lock:
            self._forget_pod(uid)
            self.index.block(blocked)
            outcome = self.index.plan(request, nodes=nodes, skip_blocked=True)
            if isinstance(outcome, Refusal):
                return outcome
            usage = usage_from_plan(uid, namespace, name, outcome)
            self._reserve(usage)
            return outcome, usage

    def _reserve(self, usage: PodUsage) -> None:
        """Hold a plan in memory (under the lock, planned under it)."""
        deadline = self.clock() + self.ttl
        self._drop_in_flight(usage.uid)
        self._in_flight[usage.uid] = InFlight(usage, deadline)
        self._in_flight_on.setdefault(usage.node, set()).add(usage.uid)
        heapq.heappush(self._deadlines, (deadline, usage.uid))
        self._pending.pop(usage.uid, None)
        self._refresh(usage.node)

    def release(self, uid: str, usage: PodUsage | None = None) -> None:
        """Drop a pod's in-flight reservation (failed patch or bind). `usage` guards against a newer one."""
        with self.lock:
            flight = self._in_flight.get(uid)
            if flight is not None and (usage is None or flight.usage == usage):
                self._refresh(*self._drop_in_flight(uid))

    def _forget_pod(self, uid: str) -> None:
        """Before a re-filter: the pod's previous reservation (held or in flight) is not counted."""
        nodes = self._drop_in_flight(uid)
        old = self._unhold(uid)
        self._refresh(*nodes, *([old.node] if old else []))

    def sweep(self) -> None:
        """Expire in-flight reservations whose pod never showed them."""
        now = self.clock()
        with self.lock:
            while self._deadlines and self._deadlines[0][0] <= now:
                deadline, uid = heapq.heappop(self._deadlines)
                flight = self._in_flight.get(uid)
                if flight is not None and flight.deadline == deadline:
                    self._refresh(*self._drop_in_flight(uid))

    def set_pending(self, uid: str, reason: str) -> None:
        with self.lock:
            self._pending[uid] = reason

    def refused(self, uid: str) -> bool:
        """The filter refused this pod and has not placed it since (it is still waiting)."""
        return uid in self._pending

    def in_flight(self, uid: str) -> PodUsage | None:
        flight = self._in_flight.get(uid)
        return flight.usage if flight else None

    def held(self, uid: str) -> PodUsage | None:
        return self._held.get(uid)

    # ---- views -----------------------------------------------------------------------------
    def occupancy(self, node: str) -> NodeOccupancy | None:
        with self.lock:
            return self._occupancy.get(node)

    def node_views(self) -> list[tuple[NodeGpus, NodeOccupancy, str | None]]:
        """Per published node: what it publishes, its occupancy now, and its leftover list as text
        (the live page draws them; each object is immutable and replaced, never changed, on a change)."""
        with self.lock:
            return [(self._published[n], occ, self._register[n][1]) for n, occ in self._occupancy.items()]

    def placements(self) -> dict[str, list[tuple[str, Placement]]]:
        """GPU UUID -> (pod uid, placement) for everything counted right now (tests check overlap)."""
        out: dict[str, list[tuple[str, Placement]]] = {}
        with self.lock:
            for occ in self._occupancy.values():
                for uuid, holders in occ.holders.items():
                    out[uuid] = [(u.uid, a.placement_value) for u, a in holders]
        return out

    def snapshot(self) -> Snapshot:
        with self.lock:
            instances: list[tuple[str, ...]] = []
            gpus: list[GpuSample] = []
            devices: list[DeviceSample] = []
            for occ in self._occupancy.values():
                for g in occ.gpus:
                    holders = occ.holders.get(g.uuid, ())
                    instances.extend(_instance_labels(occ.node, g, a) for _u, a in holders if a.runtime_ready)
                    gpus.append(_gpu_sample(g, holders))
                    devices.extend(_device_samples(occ.node, g, holders))
            pending = tuple(sorted(Counter(self._pending.values()).items()))
            return Snapshot(tuple(instances), tuple(gpus), pending, self.synced, tuple(devices))

    # ---- internals ---------------------------------------------------------------------------
    def _drop_in_flight(self, uid: str) -> list[str]:
        flight = self._in_flight.pop(uid, None)
        if flight is None:
            return []
        members = self._in_flight_on.get(flight.usage.node)
        if members is not None:
            members.discard(uid)
            if not members:
                del self._in_flight_on[flight.usage.node]
        return [flight.usage.node]

    def _unhold(self, uid: str) -> PodUsage | None:
        old = self._held.pop(uid, None)
        if old is not None:
            members = self._on_node.get(old.node)
            if members is not None:
                members.discard(uid)
                if not members:
                    del self._on_node[old.node]
        return old

    def _refresh(self, *nodes: str) -> None:
        """Recompute the occupancy of these nodes and move their GPUs in the index."""
        for node in set(nodes):
            published = self._published.get(node)
            before = self._occupancy.pop(node, None)
            if published is None:
                self.index.remove_node(node)
                continue
            usages = [self._held[u] for u in self._on_node.get(node, ()) if u not in self._in_flight]
            usages.extend(self._in_flight[u].usage for u in self._in_flight_on.get(node, ()))
            occ = reconstruct(published, usages)
            self._occupancy[node] = occ
            previous = {g.uuid: g for g in before.gpus} if before else {}
            for g in occ.gpus:
                if previous.pop(g.uuid, None) != g:  # only GPUs whose occupancy or health changed move
                    self.index.upsert(g)
            for uuid in previous:
                self.index.remove(uuid)


def _version(meta: Mapping[str, Any]) -> int | None:
    """The resourceVersion as a number (etcd revisions are); None when it is not one."""
    try:
        return int(meta.get("resourceVersion") or "")
    except ValueError:
        return None


def _same(usage: PodUsage | None, planned: PodUsage) -> bool:
    """The cache shows exactly the filter's reservation (runtime fields may have been added since)."""
    if usage is None or usage.node != planned.node:
        return False
    return tuple(a.without_runtime() for a in usage.allocations) == planned.allocations


Holders = tuple[tuple[PodUsage, MigAllocation], ...]


def _instance_labels(node: str, g: GpuState, a: MigAllocation) -> tuple[str, ...]:
    """hami_node_gpu_mig_instance_info's label values for a realized reservation."""
    return (
        node,
        a.gpuUUID,
        str(g.index),
        a.migUUID or "",
        a.profile,
        str(a.gpuInstanceID),
        str(a.computeInstanceID),
        str(a.placement.start),
        str(a.placement.size),
    )


def _profile_sizes(g: GpuState, a: MigAllocation) -> tuple[int, int]:
    """(memory MiB, cores) of a reservation's profile as the GPU publishes it; (0, 0) if it no longer
    publishes that profile."""
    found = next((p for p in g.profiles if p.name == a.profile), None)
    return (found.memory_mb, found.core) if found else (0, 0)


def _gpu_sample(g: GpuState, holders: Holders = ()) -> GpuSample:
    axis = max((p.end for pr in g.profiles for p in pr.placements), default=0)
    mask = g.occupied_mask
    free = sum(1 for i in range(axis) if not mask >> i & 1)
    best = ("", 0)
    if g.healthy and not g.cordoned:
        for pr in g.profiles:
            if pr.memory_mb > best[1] and any(p.size and not p.mask & mask for p in pr.placements):
                best = (pr.name, pr.memory_mb)
    sizes = [_profile_sizes(g, a) for _u, a in holders]
    return GpuSample(
        g.node,
        g.uuid,
        g.index,
        free,
        best[0],
        best[1],
        slices=axis,
        type=g.type,
        memory_mb=g.memory_mb,
        allocated_mb=sum(m for m, _ in sizes),
        allocated_cores=sum(c for _, c in sizes),
        shared=len(holders),
    )


def _device_samples(node: str, g: GpuState, holders: Holders) -> list[DeviceSample]:
    """Per container of each pod, what its reservations on this GPU hold (summed: HAMi's series has
    one sample per container and GPU)."""
    summed: dict[tuple[str, str, int], list[int]] = {}
    for usage, a in holders:
        memory, cores = _profile_sizes(g, a)
        acc = summed.setdefault((usage.namespace, usage.name, a.containerIndex), [0, 0])
        acc[0] += memory
        acc[1] += cores
    return [
        DeviceSample(ns, node, pod, index, g.uuid, memory, cores)
        for (ns, pod, index), (memory, cores) in sorted(summed.items())
    ]
