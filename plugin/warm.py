"""A warm pool: a few idle instances of the profiles this node's pods asked for most, created before
any pod asks, so the next such pod's Allocate creates nothing.

Why: idle reuse keeps an ended pod's instance, so only a churning service benefits; a pod of a
profile whose last user has not ended yet still waits for a create (its time: docs/startup.md). The
pool keeps up to `size` instances per node (off by default), split over the profiles of this node's
own Allocates in a sliding window (`Demand`), most asked first; or, given `profiles` (the operator
sizing it for a known burst, e.g. 56 x 1g.5gb), exactly those counts from the start, whatever this
node has seen. The scheduler's demand estimate is not on the wire to nodes, so it is not read.

Rules:
- a warm instance is an idle instance (plugin/idle.py) whose owner is `WARM_OWNER`: journaled like
  every create before its first NVML call, parked idle (journaled) at once, published in
  `dynmig.io/node-idle-instances`, so the scheduler counts its slices as free for every profile and
  packing does not suffer; counted against the per-GPU idle cap;
- it is placed where the placement engine (`mig.placement.plan_pod`, the scheduler's own rules)
  would put the next pod of that profile on this node, over the node's published GPUs with every
  active reservation, every instance this plugin manages and every published leftover counted as
  occupied: only slices the scheduler sees as free, never over anything that exists;
- never created while a pod of this node is being allocated (its creates come first); at most one
  create per GPU per reconcile tick, GPUs in parallel (each GPU's calls stay in series, as NVML
  wants), the engine's next placements in its own order, so a pod bound meanwhile waits behind at
  most one warm create on its GPU and a pool of 56 fills in 7 ticks instead of 56;
- no pod ever ran on it, so it may go to a pod of any namespace (the same-namespace rule of idle
  reuse is about successive users); handed over, it is that pod's as any idle instance;
- destroyed first under placement pressure: a reservation that overlaps it without matching it
  destroys it in Allocate (as any idle instance: ours, journaled, no process), and the pool
  destroys one it no longer wants (demand moved, or the pool was turned off) under the reconcile
  lock, which Allocate's hand-over also holds, after checking it is still warm and runs nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from mig.annotations import (
    BIND_PHASE_ALLOCATING,
    DEVICE_CORDON,
    LEFTOVERS,
    NODE_REGISTER,
    AnnotationError,
)
from mig.placement import ContainerRequest, GpuState, PodRequest, Refusal, plan_pod
from mig.reconstruct import node_gpus
from mig.types import Placement
from plugin.idle import WARM_OWNER, is_warm
from plugin.instances import InstanceError, InstanceKey, InstanceManager, ManagedInstance
from plugin.kube import Kube, KubeError, PodView
from plugin.nvml import NvmlError
from plugin.reconcile import NodeReservations, Reconciler

log = logging.getLogger("dynmig.plugin.warm")

MAX_SIZE = 64  # a node of 8 GPUs holds at most 56 instances
MAX_HISTORY = 10_000  # Allocates remembered at most, whatever the window


@dataclass(frozen=True)
class WarmPolicy:
    size: int = 0  # warm instances per node at most; 0 = off
    window: float = 600.0  # seconds of this node's Allocates that say which profiles are wanted
    profiles: tuple[tuple[str, int], ...] = ()  # fixed counts per profile; () = split `size` by demand

    @property
    def bound(self) -> int:
        """Warm instances this node keeps at most."""
        return min(MAX_SIZE, sum(n for _, n in self.profiles) if self.profiles else self.size)

    @property
    def enabled(self) -> bool:
        return self.bound > 0

    def goal(self, demand: Demand) -> dict[str, int]:
        """How many of each profile the pool wants now: the fixed counts, or `size` split by demand."""
        if self.profiles:
            return {p: n for p, n in self.profiles if n > 0}
        return goal(demand.ranked(), self.size)


class Demand:
    """This node's Allocates by profile over a sliding window (bounded), for the pool's choice."""

    def __init__(self, window: float, clock: Callable[[], float] = time.monotonic):
        self.window = window
        self.clock = clock
        self._seen: deque[tuple[float, str]] = deque(maxlen=MAX_HISTORY)
        self._lock = threading.Lock()

    def record(self, profiles: Iterable[str]) -> None:
        now = self.clock()
        with self._lock:
            self._seen.extend((now, p) for p in profiles)

    def ranked(self) -> list[tuple[str, int]]:
        """(profile, Allocates in the window), most asked first, then by name."""
        since = self.clock() - self.window
        with self._lock:
            while self._seen and self._seen[0][0] < since:
                self._seen.popleft()
            counts = Counter(p for _, p in self._seen)
        return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


def goal(ranked: list[tuple[str, int]], size: int) -> dict[str, int]:
    """How many warm instances of each profile (pure): `size` split in proportion to demand by
    largest remainder, the most asked profile first on ties; a profile nobody asked gets none."""
    total = sum(n for _, n in ranked)
    if size <= 0 or total <= 0:
        return {}
    out = {p: size * n // total for p, n in ranked}
    left = size - sum(out.values())
    for p, _ in sorted(ranked, key=lambda item: -(size * item[1] % total))[:left]:  # stable: ties by rank
        out[p] += 1
    return {p: n for p, n in out.items() if n > 0}


def next_placement(
    gpus: list[GpuState], profile: str, full: Iterable[str] = ()
) -> tuple[str, Placement] | None:
    """Where the placement engine would put the next pod asking exactly `profile` (pure): (GPU UUID,
    placement), or None when no GPU outside `full` has a free placement of it."""
    memory = next((p.memory_mb for g in gpus for p in g.profiles if p.name == profile), None)
    if memory is None:
        return None
    asked = PodRequest((ContainerRequest(1, memory),), preference=(profile,), nouse_uuids=tuple(full))
    plan = plan_pod(asked, gpus)
    if isinstance(plan, Refusal) or len(plan.devices) != 1 or plan.devices[0].profile != profile:
        return None
    return plan.devices[0].gpu_uuid, plan.devices[0].placement


def first_per_gpu(
    gpus: list[GpuState], wanted: Iterable[str], room: Mapping[str, int]
) -> list[tuple[str, str, Placement]]:
    """(GPU UUID, profile, placement) to create now (pure): the engine's next placements for `wanted`
    in order, each counted occupied for the next, and of those the first on each GPU. `room` is how
    many more idle instances each GPU may keep (the per-GPU cap); a GPU without room gets none."""
    left = {g.uuid: room.get(g.uuid, 0) for g in gpus}
    chosen: dict[str, tuple[str, Placement]] = {}
    unplaceable: set[str] = set()
    for profile in wanted:
        if len(chosen) == len(gpus):
            break
        if profile in unplaceable:
            continue
        spot = next_placement(gpus, profile, [u for u, n in left.items() if n <= 0])
        if spot is None:
            unplaceable.add(profile)
            continue
        uuid, placement = spot
        chosen.setdefault(uuid, (profile, placement))
        left[uuid] -= 1
        gpus = [replace(g, occupied=(*g.occupied, placement)) if g.uuid == uuid else g for g in gpus]
    return [(uuid, profile, placement) for uuid, (profile, placement) in chosen.items()]


def node_view(
    node: str, annotations: Mapping[str, str], occupied: Mapping[str, list[Placement]]
) -> list[GpuState]:
    """The node's GPUs as its annotations publish them (leftovers occupied, cordons closed), with
    `occupied` placements added per GPU; none when the registration or leftovers cannot be read."""
    published = node_gpus(
        node, annotations.get(NODE_REGISTER), annotations.get(LEFTOVERS), annotations.get(DEVICE_CORDON)
    )
    if published.error or published.leftover_error:
        return []
    return [
        replace(g, occupied=(*published.blocked.get(g.uuid, ()), *occupied.get(g.uuid, ())))
        for g in published.gpus
    ]


def allocating(pods: list[PodView]) -> bool:
    """A pod of this node is bound and not yet admitted: its creates come before the pool's."""
    for pod in pods:
        try:
            if pod.active and pod.phase == "Pending" and pod.reservation.bind_phase == BIND_PHASE_ALLOCATING:
                return True
        except AnnotationError:
            return True  # cannot tell: do not compete
    return False


class WarmPool:
    """Tops the pool up (one create per GPU per tick) and trims it (one destroy per tick)."""

    def __init__(
        self,
        policy: WarmPolicy,
        manager: InstanceManager,
        reconciler: Reconciler,
        kube: Kube,
        demand: Demand | None = None,
    ):
        self.policy = policy
        self.manager = manager
        self.reconciler = reconciler
        self.kube = kube
        self.demand = demand or Demand(policy.window)

    @property
    def per_gpu(self) -> int:
        return self.reconciler.idle.per_gpu

    def warm(self) -> list[ManagedInstance]:
        return [m for m in self.manager.managed() if m.idle and is_warm(m)]

    def tick(self, pods: list[PodView] | None, node: NodeReservations | None) -> str:
        """One step after a reconcile pass that understood the node; returns what it did (for logs
        and tests): "trimmed", "created", or why nothing ("off", "busy", "full", "unknown", "")."""
        if node is None or pods is None:
            return "unknown"
        if self._trim():
            return "trimmed"
        if not self.policy.enabled or not self.reconciler.idle.enabled:
            return "off"
        if allocating(pods):
            return "busy"
        wanted = self._missing()
        if not wanted:
            return "full"
        return "created" if self._create(wanted, node) else ""

    def _missing(self) -> list[str]:
        have = Counter(m.key.profile for m in self.warm())
        room = self.policy.bound - sum(have.values())
        out = []
        for profile, n in self.policy.goal(self.demand).items():
            out += [profile] * max(0, n - have.get(profile, 0))
        return out[: max(0, room)]

    def _unwanted(self) -> list[ManagedInstance]:
        """Warm instances beyond what the pool wants now (all of them when it is off)."""
        wanted = self.policy.goal(self.demand) if self.reconciler.idle.enabled else {}
        kept: Counter[str] = Counter()
        out = []
        for m in sorted(self.warm(), key=lambda m: m.idle_since or 0.0, reverse=True):
            if kept[m.key.profile] < wanted.get(m.key.profile, 0):
                kept[m.key.profile] += 1
            else:
                out.append(m)
        return out

    def _trim(self) -> bool:
        """Destroy one warm instance the pool no longer wants. Under the reconcile lock, which
        Allocate holds while it hands idle instances over, so it cannot be handed over meanwhile."""
        with self.reconciler.lock:
            for instance in self._unwanted():
                current = self.manager.get(instance.key)
                if not (is_warm(current) and current is not None and current.idle):
                    continue
                try:
                    if self.manager.instance_processes(current):
                        continue  # never destroyed while anything runs on it
                    # why: created by the pool, journaled, never handed to a pod, no process on it,
                    # and no longer wanted: destroying it frees its slices, nothing is guessed
                    self.manager.release(current.key, cause="warm-unwanted")
                except (InstanceError, NvmlError) as error:
                    log.info("warm instance %s not destroyed: %s", current.key, error)
                    continue
                return True
        return False

    def _create(self, wanted: list[str], node: NodeReservations) -> int:
        """Create the first of `wanted` on each GPU that has a place (GPUs in parallel), then park
        each; returns how many were made."""
        try:
            annotations = self.kube.get_node().annotations
        except KubeError as error:
            log.debug("warm pool: cannot read the node: %s", error)
            return 0
        with self.reconciler.lock:
            managed = self.manager.managed()
            occupied: dict[str, list[Placement]] = {}
            for r in node.reservations:
                occupied.setdefault(r.allocation.gpuUUID, []).append(r.allocation.placement_value)
            for m in managed:
                occupied.setdefault(m.key.gpu_uuid, []).append(m.key.placement)
            idle = Counter(m.key.gpu_uuid for m in managed if m.idle)
            room = {g.uuid: self.per_gpu - idle[g.uuid] for g in self.manager.inventory.managed}
            gpus = node_view(self.kube.node_name, annotations, occupied)
            gpus = [g for g in gpus if self.manager.inventory.gpu(g.uuid) is not None]
            chosen = first_per_gpu(gpus, wanted, room)
        if len(chosen) <= 1:
            return sum(self._make(InstanceKey(u, p, at.start, at.size)) for u, p, at in chosen)
        with ThreadPoolExecutor(len(chosen), thread_name_prefix="dynmig-warm") as workers:
            made = workers.map(lambda c: self._make(InstanceKey(c[0], c[1], c[2].start, c[2].size)), chosen)
            return sum(made)

    def _make(self, key: InstanceKey) -> bool:
        """Create one warm instance at exactly `key` and park it idle."""
        try:
            # the manager journals the intent before its first NVML call and creates exactly here;
            # a reservation that took this key meanwhile makes it refuse (owned-by-another-pod) or
            # NVML refuse the overlap: nothing of anyone else's is touched
            instance, created = self.manager.ensure(key, WARM_OWNER)
        except InstanceError as error:
            log.info("warm pool: %s not created (%s): %s", key, error.reason, error)
            return False
        if not created or not is_warm(instance):
            return False
        self.manager.metrics.warm_creates.inc()
        if not self.manager.park(instance, self.reconciler.idle.clock()):
            log.info("warm pool: %s could not be journaled idle; the reconcile pass reclaims it", key)
            return False
        log.info("warm pool: %s ready for the next %s pod", key, key.profile)
        return True
