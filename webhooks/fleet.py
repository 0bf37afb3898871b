"""The scheduler's view of the fleet: published GPUs, what active pods hold, and reservations.

One lock guards everything here, and the placement index is kept in step on every change;
`plan_and_reserve` plans and reserves under that lock, so two filters can never be handed
overlapping placements.

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
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from mig.annotations import MigAllocation, PlacementModel
from mig.idleplan import around_idle, last_user_key, onto_idle
from mig.offers import Offer, offer
from mig.placement import GpuState, PlacementIndex, Plan, PodRequest, Refusal
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
from mig.types import Placement
from webhooks.demand import DemandFeed
from webhooks.metrics import DeviceSample, GpuSample, Snapshot

CHOSEN = "chosen for another pod whose bind is in progress"
NOT_SERVING = "its device plugin is not serving"


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
        self._pending: dict[str, str] = {}  # uid -> the filter's last refusal reason
        self._pending_since: dict[str, float] = {}  # uid -> when the filter first refused it (clock)
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
        # the idle list changes no occupancy (idle is free); it is read for `_idle_match`
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
                self._unpend(uid)
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
            self._unpend(uid)
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
            for uid in [u for u in self._pending if u not in uids]:
                self._unpend(uid)  # refused, then deleted while the watch was down
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
    def plan_and_reserve(
        self,
        request: PodRequest,
        nodes: Collection[str] | None,
        uid: str,
        namespace: str,
        name: str,
        blocked: Collection[str] = (),
        annotate: Annotate | None = None,
        spread: Callable[[str], bool] | None = None,
    ) -> Refusal | tuple[Plan, PodUsage]:
        """Plan the pod over `nodes` (None: every node) but none of `blocked`, and reserve the plan,
        atomically: the next plan already counts it, so two pods are never handed overlapping
        placements. `annotate(plan, usage)` gives the annotations its bind carries. A re-filter
        never counts the pod's previous reservation or record, and a refused one leaves the pod
        none. `blocked` (nodes a bind would fail on now) stays blocked in the index until the next
        plan, so passing about the same set every time moves only the nodes that changed; every
        other reader of the index (defrag, diagnoses) plans over blocked nodes too. `spread(node)`
        true: a single-device pod whose GPU there has creates in flight moves to the engine's next
        GPU of that node with fewer (`_spread`)."""
        self.sweep()
        with self.lock:
            self._forget_pod(uid)
            self.demand.arrived(uid, request)
            self.index.block(blocked)
            outcome = self.index.plan(request, nodes=nodes, skip_blocked=True)
            if isinstance(outcome, Refusal):
                return outcome
            if len(outcome.devices) == 1:
                idle = self._idle_match(request, outcome, namespace)
                if idle is not None:
                    outcome = idle
                else:
                    if spread is not None and spread(outcome.node):
                        outcome = self._spread(request, outcome)
                    outcome = self._around_idle(request, outcome)
            self.demand.placed(uid)
            usage = usage_from_plan(uid, namespace, name, outcome)
            self._reserve(Reservation(usage, annotate(outcome, usage) if annotate else {}, self._deadline()))
            return outcome, usage

    def _idle_match(self, request: PodRequest, plan: Plan, namespace: str) -> Plan | None:
        """The plan moved onto an idle instance its node's plugin keeps (`dynmig.io/node-idle-
        instances`) and would hand to this pod (`mig.idleplan.onto_idle`); None when there is none."""
        kept = self._published.get(plan.node)
        occ = self._occupancy.get(plan.node)
        if kept is None or occ is None:
            return None
        return onto_idle(request, plan, occ.gpus, kept.idle, namespace, self._last_user)

    def _around_idle(self, request: PodRequest, plan: Plan) -> Plan:
        """The plan moved, on its GPU, off an idle instance it would overlap and not be handed
        (`mig.idleplan.around_idle`)."""
        kept = self._published.get(plan.node)
        occ = self._occupancy.get(plan.node)
        if kept is None or occ is None:
            return plan
        return around_idle(request, plan, occ.gpus, kept.idle)

    def _spread(self, request: PodRequest, plan: Plan) -> Plan:
        """The engine's plan moved, on its own node, off a GPU with creates in flight.

        A node creates its GPU instances one at a time per GPU, GPUs in parallel, and kubelet admits
        the node's pods one at a time, oldest first: a burst packed onto one GPU waits for that
        GPU's creates in series before kubelet reaches the next pod. So while the chosen GPU has
        reservations not yet realized (no instance on the record: bound but not admitted, or not yet
        bound), the pod takes the engine's best GPU of the same node among those with fewer, with
        the same profile, never a GPU nothing holds yet (that would cost packing: a whole GPU broken
        for a create's seconds); anything else (another profile, no such GPU) keeps the engine's plan. The
        node, the profile and the placement rule stay the engine's: the GPUs a burst touches fill
        first afterwards (fuller GPUs rank first). Only nodes whose pods are bound without HAMi's
        node lock get here: a locked node has one pod in flight at a time."""
        inflight = self._creates_in_flight(plan.node)
        untouched = self._empty_gpus(plan.node)
        device = plan.devices[0]
        busy = inflight.get(device.gpu_uuid, 0)
        while busy:
            # never onto a GPU nothing holds: breaking a whole GPU to save a create's seconds costs
            # the next whole-GPU pod its place (a 1g then a 3g share one GPU, as packing wants)
            avoid = tuple(u for u, n in inflight.items() if n >= busy) + untouched
            asked = replace(request, nouse_uuids=request.nouse_uuids + avoid)
            other = self.index.plan_on(asked, plan.node)
            if other is None or other.devices[0].profile != device.profile:
                break
            plan, device = other, other.devices[0]
            busy = inflight.get(device.gpu_uuid, 0)
        return plan

    def _empty_gpus(self, node: str) -> tuple[str, ...]:
        """The node's GPUs with no placement held (no instance, no reservation, no leftover)."""
        occ = self._occupancy.get(node)
        if occ is None:
            return ()
        return tuple(g.uuid for g in occ.gpus if not g.occupied_mask and not occ.holders.get(g.uuid))

    def _creates_in_flight(self, node: str) -> dict[str, int]:
        """Per GPU of the node, the reservations counted there whose instance is not on a record yet."""
        occ = self._occupancy.get(node)
        if occ is None:
            return {}
        return {
            uuid: sum(1 for _u, a in holders if not a.runtime_ready) for uuid, holders in occ.holders.items()
        }

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
        self._unpend(uid)
        self._refresh(node)

    def reservation(self, uid: str) -> Reservation | None:
        """The pod's reservation from its last filter, unless it lapsed (then its slices are free too)."""
        self.sweep()
        with self.lock:
            return self._reserved.get(uid)

    def chosen_for_others(self, uid: str) -> dict[str, str]:
        """Nodes chosen for another pod whose bind has not happened yet, each with the reason."""
        if not self.hold_chosen:
            return {}
        self.sweep()
        with self.lock:
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

    def fits(self, request: PodRequest, nodes: Collection[str]) -> bool:
        """The pod could be placed on one of `nodes` now, were none of them blocked (nothing reserved)."""
        with self.lock:
            return not isinstance(self.index.plan(request, nodes=nodes), Refusal)

    def set_pending(self, uid: str, reason: str) -> None:
        """The filter refused this pod (`reason`: the headline): it waits for a node."""
        with self.lock:
            self._pending[uid] = reason
            self._pending_since.setdefault(uid, self.clock())

    def refused(self, uid: str) -> bool:
        """The filter refused this pod and has not placed it since (it is still waiting)."""
        return uid in self._pending

    def in_flight(self, uid: str) -> PodUsage | None:
        """What the pod's reservation uses (None: it has none). The same as `reservation(uid).usage`;
        webhooks/defrag.py still reads it by this name."""
        reservation = self._reserved.get(uid)
        return reservation.usage if reservation else None

    def held(self, uid: str) -> PodUsage | None:
        return self._held.get(uid)

    # ---- views -----------------------------------------------------------------------------
    def not_serving(self, node: str, resource: str) -> str:
        """Why `node`'s device plugin cannot serve a pod now, "" when it can (or nothing says).

        kubelet counts a resource's devices in status.allocatable only while its device plugin is
        connected: the moment the plugin's socket goes it moves them all to unhealthy (allocatable
        0, published at its next node status sync) and drops the resource 5 minutes later
        (pkg/kubelet/cm/devicemanager/manager.go: PluginDisconnected, markResourceUnhealthy,
        GetCapacity). kube-scheduler does not check `resource` itself (the chart marks it
        ignoredByScheduler), and a pod bound there fails admission ("requested number of devices
        unavailable"), lost to its user if it is a bare pod or a Job's. A node that never showed
        the resource (a status nobody wrote) is not judged."""
        with self.lock:
            allocatable = self._allocatable.get(node)
            if allocatable is None:
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

    def snapshot(self) -> Snapshot:
        with self.lock:
            instances: list[tuple[str, ...]] = []
            owners: list[tuple[str, ...]] = []
            gpus: list[GpuSample] = []
            devices: list[DeviceSample] = []
            for occ in self._occupancy.values():
                for g in occ.gpus:
                    holders = occ.holders.get(g.uuid, ())
                    realized = [(u, a) for u, a in holders if a.runtime_ready]
                    instances.extend(_instance_labels(occ.node, g, a) for _u, a in realized)
                    owners.extend(_owner_labels(occ.node, u, a) for u, a in realized)
                    gpus.append(_gpu_sample(g, holders))
                    devices.extend(_device_samples(occ.node, g, holders))
            pending = tuple(sorted(Counter(self._pending.values()).items()))
            return Snapshot(
                tuple(instances),
                tuple(gpus),
                pending,
                self.synced,
                tuple(devices),
                self._waited(),
                tuple(owners),
            )

    # ---- internals ---------------------------------------------------------------------------
    def _unpend(self, uid: str) -> None:
        self._pending.pop(uid, None)
        self._pending_since.pop(uid, None)

    def _waited(self) -> tuple[tuple[str, float], ...]:
        """(reason, seconds) of the longest-waiting refused pod of each reason: since the filter
        first refused it, under whatever reason it has now."""
        now, oldest = self.clock(), dict[str, float]()
        for uid, reason in self._pending.items():
            oldest[reason] = max(oldest.get(reason, 0.0), now - self._pending_since.get(uid, now))
        return tuple(sorted(oldest.items()))

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


def _owner_labels(node: str, u: PodUsage, a: MigAllocation) -> tuple[str, ...]:
    """dynmig_mig_instance_info's label values (webhooks.metrics.OWNER_LABELS) for a realized
    reservation: the instance and the pod it serves."""
    return (
        node,
        a.gpuUUID,
        str(a.gpuInstanceID),
        str(a.computeInstanceID),
        a.profile,
        a.migUUID or "",
        u.namespace,
        u.name,
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
