"""The scheduler's view of the fleet: published GPUs, what active pods hold, and reservations.

One lock guards everything here, and the placement index is kept in step on every change. The
filter's whole decision is one call, `decide`, in one section under that lock: it plans and reserves
(so two filters can never be handed overlapping placements), or refuses with every candidate node's
reason (`Refused`), and records the refused pod as waiting.

Two sources of what a pod uses, never both at once:
- *held*: what the cache shows in the pod's annotations (the durable record);
- *reserved*: what a filter decided in memory (a `Reservation`), which its bind carries onto the pod
  on the Binding. It wins over whatever the cache shows for that pod until the cache shows exactly
  this reservation (then it is dropped as confirmed), the pod ends, a failed bind releases it, or
  it expires `ttl` seconds after the filter because the pod never showed it. So a lost bind never
  leaves a phantom reservation.

A reservation is the only record of a filter's decision: bind reads it here, and it is usable by
bind exactly as long as the fleet counts its slices (one store, one deadline). Until its Binding is
created, its node is *chosen*: other pods' filters leave that node out, since their binds would only
fail on the node lock this pod's bind takes. Nothing survives a restart: a bind that finds no
reservation fails, and kube-scheduler filters the pod again.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from mig.annotations import (
    DEVICES_ALLOCATED,
    DEVICES_TO_ALLOCATE,
    MIG_ALLOCATIONS,
    VGPU_NODE,
    VGPU_TIME,
    ContainerDevice,
    MigAllocation,
    PlacementModel,
    encode_allocations,
    encode_devices,
)
from mig.offers import Offer, offer
from mig.placement import PlacementIndex, Plan, PodRequest, Refusal
from mig.placement.adjust import adjust, last_user_key
from mig.pods import active_for_scheduler
from mig.reconstruct import (
    NodeGpus,
    NodeOccupancy,
    PodUsage,
    node_cordon,
    node_gpus,
    node_idle,
    node_leftovers,
    node_register,
    pod_usage,
    reconstruct,
)
from mig.slicemap import diagnose
from mig.types import Placement
from webhooks.demand import DemandFeed
from webhooks.refusal import Refused, reason_of, refused

CHOSEN = "chosen for another pod whose bind is in progress"
NOT_SERVING = "its device plugin is not serving"
DEVICE_TYPE = "NVIDIA"  # the Type field of HAMi's device strings


def _count(value: str) -> int | None:
    """A whole-number resource quantity (device counts are plain integers); None when not one."""
    try:
        return int(value)
    except ValueError:
        return None


LAST_USERS = 100_000  # placements whose last holder's namespace is remembered


@dataclass(frozen=True)
class Reservation:
    """What a filter decided for one pod: the slices the fleet counts for it (`usage`), the HAMi
    annotations its Binding carries, and when it lapses unless the cache shows it first."""

    usage: PodUsage
    annotations: Mapping[str, str]
    deadline: float

    @property
    def node(self) -> str:
        return self.usage.node


Annotate = Callable[[Plan, PodUsage], Mapping[str, str]]


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


def reservation_annotations(plan: Plan, usage: PodUsage, containers: int, now: float) -> dict[str, str]:
    """HAMi's filter-time annotations for a plan (the bind puts them on the pod); `containers`: the
    pod's containers, init containers first (0: as many as the plan's devices name)."""
    count = containers or 1 + max((d.container_index for d in plan.devices), default=0)
    per_container: list[list[ContainerDevice]] = [[] for _ in range(count)]
    for d in plan.devices:
        per_container[d.container_index].append(ContainerDevice(d.gpu_uuid, DEVICE_TYPE, d.memory_mb, d.core))
    devices = encode_devices(per_container)
    allocations = encode_allocations(usage.allocations)
    annotations = {
        VGPU_NODE: plan.node,
        VGPU_TIME: str(int(now)),
        DEVICES_TO_ALLOCATE: devices,
        DEVICES_ALLOCATED: devices,
    }
    if allocations is not None:  # a plan always has devices; a Binding's annotations are strings
        annotations[MIG_ALLOCATIONS] = allocations
    return annotations


@dataclass(frozen=True)
class Asking:
    """The pod a decision is for; `containers`: its containers, init containers first (0: as many
    as its plan's devices name), for the annotations its bind carries."""

    uid: str
    namespace: str
    name: str
    containers: int = 0


@dataclass(frozen=True)
class Placed:
    """The pod is placed: its plan, and the reservation its bind carries out."""

    plan: Plan
    reservation: Reservation

    @property
    def usage(self) -> PodUsage:
        return self.reservation.usage


Decision = Placed | Refused


@dataclass(frozen=True)
class FleetView:
    """The fleet at one moment, for readers that must not hold its lock (metrics, defrag): each
    node's occupancy (immutable, replaced on a change), the pods with a reservation, and per refused
    pod its reason and when the filter first refused it (on `clock`, read as `now`)."""

    occupancies: tuple[NodeOccupancy, ...]
    reserved: frozenset[str]
    refused: tuple[tuple[str, float], ...]
    now: float
    synced: bool


class Fleet:
    """Nodes, pod usages and reservations, with a `PlacementIndex` kept in step.

    `ttl`: how long a reservation lives after its filter unless the cache shows it (`serve`'s
    `reservation_ttl`). `hold_chosen`: False leaves a chosen node a candidate for other pods (for
    benches and stress tests that filter without binding). `node_pricing`: serve's --node-pricing
    (`DemandFeed`)."""

    def __init__(
        self,
        ttl: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
        hold_chosen: bool = True,
        node_pricing: bool = False,
    ):
        self.lock = threading.RLock()
        self.index = PlacementIndex()
        self.ttl = ttl
        self.clock = clock
        self.hold_chosen = hold_chosen
        self._register: dict[str, tuple[Any, ...]] = {}  # node -> (registration, leftovers, cordon, idle)
        self._published: dict[str, NodeGpus] = {}
        self._held: dict[str, PodUsage] = {}
        self._on_node: dict[str, set[str]] = {}
        self._reserved: dict[str, Reservation] = {}
        self._reserved_on: dict[str, set[str]] = {}  # node -> uids with a reservation there
        self._chosen: dict[str, str] = {}  # node -> uid whose unbound reservation chose it (the latest)
        self._deadlines: list[tuple[float, str]] = []
        self._occupancy: dict[str, NodeOccupancy] = {}
        self._refused: dict[str, str] = {}  # uid -> the filter's last refusal reason
        self._refused_since: dict[str, float] = {}  # uid -> when the filter first refused it (clock)
        self._versions: dict[str, int] = {}  # last resourceVersion applied per pod: never go backwards
        # (GPU, profile, start, size) -> namespace of the last pod that held it (bounded): whom the
        # node's plugin hands an idle instance there (its same-namespace rule, plugin/idle.py)
        self._last_user: dict[tuple[str, str, int, int], str] = {}
        self.demand = DemandFeed(
            self.index, clock, node_pricing
        )  # what the filter sees prices what a placement risks
        self.synced = False
        # node -> its status.allocatable, and the resources it ever counted above 0 (`not_serving`)
        self._allocatable: dict[str, dict[str, str]] = {}
        self._counted: dict[str, set[str]] = {}

    # ---- feed from the cache ---------------------------------------------------------------
    def set_node(self, node: Mapping[str, Any]) -> None:
        name = (node.get("metadata") or {}).get("name") or ""
        # the idle list changes no occupancy (idle is free); it is read for `mig.placement.adjust`
        published = (node_register(node), node_leftovers(node), node_cordon(node), node_idle(node))
        allocatable = (node.get("status") or {}).get("allocatable")
        with self.lock:
            if isinstance(allocatable, Mapping):
                self._allocatable[name] = {str(k): str(v) for k, v in allocatable.items()}
                counted = self._counted.setdefault(name, set())
                counted.update(k for k, v in self._allocatable[name].items() if _count(v))
            if name in self._register and self._register[name] == published:
                return  # heartbeats and label changes do not touch what the node publishes
            self._register[name] = published
            self._published[name] = node_gpus(name, *published)
            self._refresh(name)

    def delete_node(self, name: str) -> None:
        with self.lock:
            self._register.pop(name, None)
            self._published.pop(name, None)
            self._allocatable.pop(name, None)
            self._counted.pop(name, None)
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
                self._unrefuse(uid)
            if not active_for_scheduler(pod):
                self.demand.ended(uid)
            dirty: list[str] = []
            reservation = self._reserved.get(uid)
            old = self._held.get(uid)
            # the cache shows exactly the pod's reservation (the bind's Binding carried it): it moves
            # from reserved to held, and what the node's GPUs hold does not change
            handover = reservation is not None and old is None and usage == reservation.usage
            if reservation is not None and (not active_for_scheduler(pod) or _same(usage, reservation.usage)):
                dirty = self._drop_reservation(uid)
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
            self._unrefuse(uid)
            self._versions.pop(uid, None)
            self.demand.ended(uid)
            nodes = self._drop_reservation(uid)
            old = self._unhold(uid)
            self._refresh(*nodes, *([old.node] if old else []))

    def replace_pods(self, pods: Sequence[Mapping[str, Any]]) -> None:
        """A relist: forget pods that are gone, then apply every listed one."""
        uids = {(p.get("metadata") or {}).get("uid") for p in pods}
        with self.lock:
            for uid in [u for u in self._versions if u not in uids]:
                del self._versions[uid]
            for uid in [u for u in self._refused if u not in uids]:
                self._unrefuse(uid)  # refused, then deleted while the watch was down
            for uid in [u for u in self._held if u not in uids]:
                self.demand.ended(uid)
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

    # ---- reservations: made by the filter, carried out by bind ------------------------------
    def decide(
        self,
        request: PodRequest,
        candidates: Collection[str] | None,
        pod: Asking,
        locked: Mapping[str, str] = MappingProxyType({}),
        *,
        resource: str = "",
        advice: str = "",
        lock_free: Callable[[str], bool] | None = None,
    ) -> Decision:
        """The filter's decision for `pod`, in one section under the lock: placed and reserved, or
        refused with every candidate node's reason.

        Planned over `candidates` (None: every node) but none left out: `locked` (a bind would fail
        on their node lock now, with the reason), nodes chosen for another pod whose bind is coming
        (unless `lock_free(node)`: its binds take no node lock), and nodes whose device plugin is not
        serving `resource` (`not_serving`; "" does not judge). The plan is reserved at once: the next
        decision already counts it, so two pods are never handed overlapping placements. A decision
        never counts the pod's previous reservation or record, and a refused one leaves the pod none.
        `advice`: defrag's line for this pod, said in a refusal unless only binds in progress keep it
        out."""
        self.sweep()
        with self.lock:
            down = {n: why for n in candidates or () if (why := self._not_serving(n, resource))}
            chosen = self._chosen_for_others(pod.uid)
            if chosen and lock_free is not None:
                chosen = {n: why for n, why in chosen.items() if not lock_free(n)}
            out = set(locked)  # one set, built once (the index takes it as it is)
            out.update(chosen)
            out.update(down)
            outcome = self._place(request, candidates, pod, out, lock_free)
            if not isinstance(outcome, Refusal):
                return outcome
            waiting = [n for n in candidates or () if n in chosen or n in locked] if chosen or locked else []
            busy = bool(waiting) and not isinstance(self.index.plan(request, nodes=waiting), Refusal)
            reason = reason_of(outcome, busy)
            self.set_refused(pod.uid, reason)
            occupancies = [
                self._occupancy.get(n) for n in candidates or ()
            ]  # immutable, replaced on a change
        # worded off the lock: the texts read nothing else of the fleet
        return refused(outcome, reason, candidates or (), (chosen, locked, down), occupancies, advice)

    def _place(
        self,
        request: PodRequest,
        candidates: Collection[str] | None,
        pod: Asking,
        out: Collection[str],
        lock_free: Callable[[str], bool] | None,
    ) -> Placed | Refusal:
        """Plan the pod over `candidates` but none of `out`, and reserve the plan (under the lock).
        `out` stays blocked in the index until the next plan, so passing about the same set every
        time moves only the nodes that changed; every other reader of the index (defrag, diagnoses)
        plans over blocked nodes too. A single-device plan moves on its node onto or around the idle
        instances its plugin keeps, or off a GPU with creates in flight when `lock_free` says the
        node's binds take no node lock (`mig.placement.adjust`)."""
        self._forget_pod(pod.uid)
        self.demand.arrived(pod.uid, request)
        self.index.block(out)
        plan = self.index.plan(request, nodes=candidates, skip_blocked=True)
        if isinstance(plan, Refusal):
            return plan
        kept, occ = self._published.get(plan.node), self._occupancy.get(plan.node)
        if len(plan.devices) == 1 and kept is not None and occ is not None:
            free = lock_free is not None and lock_free(plan.node)
            plan = adjust(
                request,
                plan,
                self.index,
                occ.gpus,
                occ.holders,
                kept.idle,
                pod.namespace,
                self._last_user,
                free,
            )
        self.demand.placed(pod.uid)
        usage = usage_from_plan(pod.uid, pod.namespace, pod.name, plan)
        annotations = reservation_annotations(plan, usage, pod.containers, time.time())
        reservation = Reservation(usage, annotations, self._deadline())
        self._reserve(reservation)
        return Placed(plan, reservation)

    def _deadline(self) -> float:
        return self.clock() + self.ttl

    def _reserve(self, reservation: Reservation) -> None:
        """Count a reservation and choose its node (under the lock, planned under it)."""
        uid, node = reservation.usage.uid, reservation.node
        self._drop_reservation(uid)
        self._reserved[uid] = reservation
        self._reserved_on.setdefault(node, set()).add(uid)
        self._chosen[node] = uid
        heapq.heappush(self._deadlines, (reservation.deadline, uid))
        self._unrefuse(uid)
        self._refresh(node)

    def reservation(self, uid: str) -> Reservation | None:
        """The pod's reservation from its last filter, unless it lapsed (then its slices are free too)."""
        self.sweep()
        with self.lock:
            return self._reserved.get(uid)

    def chosen_for_others(self, uid: str) -> dict[str, str]:
        """Nodes chosen for another pod whose bind has not happened yet, each with the reason."""
        self.sweep()
        with self.lock:
            return self._chosen_for_others(uid)

    def _chosen_for_others(self, uid: str) -> dict[str, str]:
        if not self.hold_chosen:
            return {}
        return {node: CHOSEN for node, owner in self._chosen.items() if owner != uid}

    def bound(self, reservation: Reservation) -> None:
        """Its Binding was created: the node is no longer chosen for it, and the reservation waits
        for the cache to show it (or its deadline). Nothing when it is no longer the pod's."""
        uid = reservation.usage.uid
        with self.lock:
            if self._reserved.get(uid) is reservation:
                self._unchoose(uid, reservation.node)

    def release(self, uid: str, usage: PodUsage | None = None) -> None:
        """Drop a pod's reservation (a failed bind). `usage` guards against a newer one."""
        with self.lock:
            reservation = self._reserved.get(uid)
            if reservation is not None and (usage is None or reservation.usage == usage):
                self._refresh(*self._drop_reservation(uid))

    def _forget_pod(self, uid: str) -> None:
        """Before a re-filter: the pod's previous reservation or record is not counted."""
        nodes = self._drop_reservation(uid)
        old = self._unhold(uid)
        self._refresh(*nodes, *([old.node] if old else []))

    def sweep(self) -> None:
        """Expire reservations whose pod never showed them: their slices and node are free again."""
        now = self.clock()
        with self.lock:
            while self._deadlines and self._deadlines[0][0] <= now:
                deadline, uid = heapq.heappop(self._deadlines)
                reservation = self._reserved.get(uid)
                if reservation is not None and reservation.deadline == deadline:
                    self._refresh(*self._drop_reservation(uid))

    def fits(self, request: PodRequest, nodes: Collection[str] | None = None) -> bool:
        """The pod could be placed on one of `nodes` (None: any) now, were none of them blocked
        (nothing reserved)."""
        with self.lock:
            return not isinstance(self.index.plan(request, nodes=nodes), Refusal)

    def set_refused(self, uid: str, reason: str) -> None:
        """The filter refused this pod (`reason`: the headline code): it waits for a node."""
        with self.lock:
            self._refused[uid] = reason
            self._refused_since.setdefault(uid, self.clock())

    def refused(self, uid: str) -> bool:
        """The filter refused this pod and has not placed it since (it is still waiting)."""
        return uid in self._refused

    def held(self, uid: str) -> PodUsage | None:
        return self._held.get(uid)

    def counted(self, uid: str) -> bool:
        """The fleet counts slices for this pod: the cache shows it holding some, or it has a
        reservation (lapsed ones included until the next sweep)."""
        return uid in self._held or uid in self._reserved

    # ---- views -----------------------------------------------------------------------------
    def not_serving(self, node: str, resource: str) -> str:
        """Why `node`'s device plugin cannot serve a pod now, "" when it can (`_not_serving`)."""
        with self.lock:
            return self._not_serving(node, resource)

    def _not_serving(self, node: str, resource: str) -> str:
        """Why `node`'s device plugin cannot serve a pod now, "" when it can (or nothing says).

        kubelet counts a resource's devices in status.allocatable only while its device plugin is
        connected: the moment the plugin's socket goes it moves them all to unhealthy (allocatable
        0, published at its next node status sync) and drops the resource 5 minutes later
        (pkg/kubelet/cm/devicemanager/manager.go: PluginDisconnected, markResourceUnhealthy,
        GetCapacity). kube-scheduler does not check `resource` itself (the chart marks it
        ignoredByScheduler), and a pod bound there fails admission ("requested number of devices
        unavailable"), lost to its user if it is a bare pod or a Job's. A node that never showed
        the resource (a status nobody wrote), or an empty `resource`, is not judged."""
        allocatable = self._allocatable.get(node)
        if allocatable is None or not resource:
            return ""
        value = allocatable.get(resource)
        if value is None:
            gone = resource in self._counted.get(node, ())
            return f"{NOT_SERVING}: kubelet no longer lists {resource}" if gone else ""
        return f"{NOT_SERVING}: allocatable {resource} is 0" if _count(value) == 0 else ""

    def occupancy(self, node: str) -> NodeOccupancy | None:
        with self.lock:
            return self._occupancy.get(node)

    def models(self) -> frozenset[str]:
        """The GPU types the fleet's nodes publish (admission warns about preferences none of them offer)."""
        with self.lock:
            return frozenset(g.type for published in self._published.values() for g in published.gpus)

    def offers(self) -> tuple[Offer, ...]:
        """Each GPU type as the fleet's nodes publish it: total MiB and each profile's MiB (admission
        reads `nvidia.com/mig-*` and percentage requests against these)."""
        with self.lock:
            gpus = {g.type: g for published in self._published.values() for g in published.gpus}
        return tuple(
            offer(t, g.memory_mb, ((p.name, p.memory_mb) for p in g.profiles))
            for t, g in sorted(gpus.items())
        )

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

    def view(self) -> FleetView:
        """The fleet now, for readers off the lock (metrics sample it, defrag advises over it)."""
        with self.lock:
            now, since = self.clock(), self._refused_since
            return FleetView(
                tuple(self._occupancy.values()),
                frozenset(self._reserved),
                tuple((reason, since.get(uid, now)) for uid, reason in self._refused.items()),
                now,
                self.synced,
            )

    def nodes(self) -> list[str]:
        """The nodes with GPUs the engine places on, by name."""
        with self.lock:
            return self.index.nodes()

    def diagnose(self, request: PodRequest, nodes: Collection[str] | None = None) -> tuple[str, str]:
        """(reason code, fix) for a waiting pod by the scheduler's own index now (`mig.slicemap.diagnose`;
        `nodes`: those it may run on, None: any); ("", "") when it would fit."""
        with self.lock:
            return diagnose(request, self.index, nodes)

    # ---- internals ---------------------------------------------------------------------------
    def _unrefuse(self, uid: str) -> None:
        self._refused.pop(uid, None)
        self._refused_since.pop(uid, None)

    def _drop_reservation(self, uid: str) -> list[str]:
        reservation = self._reserved.pop(uid, None)
        if reservation is None:
            return []
        node = reservation.node
        self._unchoose(uid, node)
        members = self._reserved_on.get(node)
        if members is not None:
            members.discard(uid)
            if not members:
                del self._reserved_on[node]
        return [node]

    def _unchoose(self, uid: str, node: str) -> None:
        if self._chosen.get(node) == uid:
            del self._chosen[node]

    def _unhold(self, uid: str) -> PodUsage | None:
        old = self._held.pop(uid, None)
        if old is not None:
            for a in old.allocations:
                if len(self._last_user) >= LAST_USERS:
                    del self._last_user[next(iter(self._last_user))]  # the oldest entry
                self._last_user[last_user_key(a.gpuUUID, a.profile, a.placement_value)] = old.namespace
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
            usages = [self._held[u] for u in self._on_node.get(node, ()) if u not in self._reserved]
            usages.extend(self._reserved[u].usage for u in self._reserved_on.get(node, ()))
            occ = reconstruct(published, usages)
            self._occupancy[node] = occ
            previous = {g.uuid: g for g in before.gpus} if before else {}
            for g in occ.gpus:
                old = previous.pop(g.uuid, None)  # most are the published GPU itself: no compare
                if old is not g and old != g:  # only GPUs whose occupancy or health changed move
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
