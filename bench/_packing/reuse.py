"""The packing grid with idle reuse on: dynmig's engine, the extender's moves onto and around idle
instances, and the device plugin's idle instances, so its refused GPU-work is measured against
dynmig's with reuse off on the same traces (`placement.py --grid --reuse`, docs/packing.md "Idle
reuse and refused work").

What each side does, by the product's own functions:
- The plugin (plugin/idle.py, `IdlePolicy`): an ended pod's instance is kept idle on its GPU while
  the GPU keeps fewer than `per_gpu` idle instances (the plugin's `--idle-per-gpu` default, 2), and
  destroyed when the TTL is over (`IdlePolicy.expired`; `--idle-ttl 5m` as docs/startup.md turns
  reuse on, trace time read as minutes). An arrival's Allocate gets the idle instance at its exact
  key when `IdlePolicy.serves` allows (same namespace as its last user), and destroys every other
  idle instance its placements overlap ("idle-evicted").
- The scheduler: the engine plans with idle placements free (mig/reconstruct.py counts them so),
  so an idle instance that is in the way of a pod never refuses it. Then, for a single-device pod,
  `mig.placement.adjust.onto_idle` (with the namespace of each placement's last holder, as webhooks/fleet.py
  remembers it), else `mig.placement.adjust.around_idle`, on the node's GPUs as the scheduler counts them and
  its idle list as the plugin publishes it (`plugin.idle.idle_list`). The burst spread between the
  two (`mig.placement.adjust.spread`) moves a pod only off a GPU with creates in flight; the replay
  creates at once, so it never applies.
- Pods: each arrival is in one of `NAMESPACES` namespaces, drawn by a generator of its own per
  trace (the arrivals, sizes and lifetimes are the reuse-off arm's), so a namespace's pods of one size
  follow one another as a churning service's replicas do.

Not modelled: the idle list's publication lag (the extender sees the plugin's idle instances at
once), the warm pool (no warm instances), the TTL checked at every event rather than per reconcile
pass.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Protocol

from _baselines import BNode, Pick

from _packing.grid import BASE, Cell
from mig.idle import by_gpu
from mig.placement import GpuState, PlacementIndex, Plan, PodRequest
from mig.placement.adjust import around_idle, last_user_key, onto_idle
from plugin.idle import NAMESPACE, IdlePolicy, idle_list
from plugin.instances import InstanceKey, ManagedInstance
from plugin.journal import Owner

TTL_MINUTES = 5.0  # `--idle-ttl 5m`, in trace minutes
PER_GPU = IdlePolicy().per_gpu  # the plugin's default cap of idle instances per GPU
NAMESPACES = 8
SEEDS = (
    3  # the first three of the grid's tuning or held-out seeds (its only seeds when this replay was measured)
)
# the cells issue 30 names at least: the A100-40GB and H100-80GB pools and the mixed fleet, near
# capacity and overload, at the grid's base mix (`--grid --reuse --quick`)
CELLS = tuple(Cell(f, BASE, load) for f in ("A100-40GB", "H100-80GB", "mixed") for load in (0.95, 1.05))
SECONDS = 60.0  # trace minutes -> the policy's seconds


def namespaces(label: str, seed: int, count: int, spread: int = NAMESPACES) -> list[str]:
    """Each arrival's namespace (one of `spread`), from a generator apart from the trace's."""
    if not 1 <= spread <= 1000:
        raise ValueError(f"namespaces: {spread} is not from 1 to 1000")
    rng = random.Random(f"{label}/{seed}/namespaces")
    return [f"ns-{rng.randrange(spread)}" for _ in range(count)]


class Engine(Protocol):
    """What the arm needs of the grid's dynmig adapter (placement.Dynmig)."""

    index: PlacementIndex

    def arrived(self, at: float, mems: tuple) -> None: ...
    def departed(self, mems: tuple, lifetime: float) -> None: ...
    def reserved(self, gpu: object, placement: object) -> None: ...
    def released(self, gpu: object, placement: object) -> None: ...
    def request(self, mems: Sequence[int | None]) -> PodRequest: ...
    def picks(self, plan: Plan) -> list[Pick]: ...
    def node_gpus(self, node: str) -> list[GpuState]: ...


class Shelf:
    """The fleet's idle instances (the plugins' side) and each placement's last user (the
    extender's), on the replay's clock (trace minutes)."""

    def __init__(self, ttl_minutes: float = TTL_MINUTES, per_gpu: int = PER_GPU):
        self.now = 0.0
        self.policy = IdlePolicy(ttl_minutes * SECONDS, per_gpu, NAMESPACE, clock=lambda: self.now * SECONDS)
        self.kept: dict[str, dict[str, list[ManagedInstance]]] = {}  # node -> GPU -> idle instances
        self.last_users: dict[tuple[str, str, int, int], str] = {}
        self.counts: Counter[str] = Counter()

    def at(self, now: float) -> None:
        """The clock moves on: idle instances past their TTL are destroyed."""
        self.now = now
        for gpus in self.kept.values():
            for uuid, instances in gpus.items():
                alive = [m for m in instances if not self.policy.expired(m)]
                self.counts["expired"] += len(instances) - len(alive)
                gpus[uuid] = alive

    def ended(self, node: str, owner: Owner, picks: Sequence[Pick]) -> None:
        """A pod ended: the extender remembers its namespace per placement; the plugin keeps each
        instance idle while its GPU is under the cap."""
        for gpu, place, prof in picks:
            self.last_users[last_user_key(gpu.uuid, prof.name, place)] = owner.namespace
            if not self.policy.enabled:
                continue
            kept = self.kept.setdefault(node, {}).setdefault(gpu.uuid, [])
            if not self.policy.room(len(kept)):
                self.counts["not kept (cap)"] += 1
                continue
            key = InstanceKey(gpu.uuid, prof.name, place.start, place.size)
            kept.append(ManagedInstance(key, 0, 0, f"MIG-{key}", owner=owner, idle_since=self.now * SECONDS))
            self.counts["kept idle"] += 1

    def steer(self, request: PodRequest, plan: Plan, gpus: Sequence[GpuState], namespace: str) -> Plan:
        """The extender's moves after the engine's single-device plan."""
        idle = by_gpu(tuple(idle_list([m for ms in self.kept.get(plan.node, {}).values() for m in ms])))
        onto = onto_idle(request, plan, gpus, idle, namespace, self.last_users)
        if onto is not None:
            self.counts["steered onto idle" if onto != plan else "planned onto idle"] += 1
            return onto
        around = around_idle(request, plan, gpus, idle)
        if around != plan:
            self.counts["planned around idle"] += 1
        return around

    def allocate(self, plan: Plan, namespace: str) -> None:
        """The plugin's Allocate: the idle instance at a reserved key that serves the pod is handed
        over; every other idle instance a reserved placement overlaps is destroyed."""
        gpus = self.kept.get(plan.node, {})
        for d in plan.devices:
            key = InstanceKey(d.gpu_uuid, d.profile, d.placement.start, d.placement.size)
            instances = gpus.get(d.gpu_uuid, [])
            for m in [m for m in instances if m.key.placement.overlaps(d.placement)]:
                self.counts["handed over" if self.policy.serves(m, key, namespace) else "idle evicted"] += 1
                instances.remove(m)
            self.counts["placed devices"] += 1


class DynmigReuse:
    """The grid's dynmig with idle reuse on (a policy for `grid.replay`): `engine` (the dynmig
    adapter, its demand feed included) plans, the `Shelf` keeps idle instances and steers."""

    name = "dynmig+reuse"

    def __init__(
        self,
        nodes: list[BNode],
        engine: Callable[[list[BNode]], Engine],
        namespaces: Sequence[str],
        ttl_minutes: float = TTL_MINUTES,
        per_gpu: int = PER_GPU,
    ):
        self.engine = engine(nodes)
        self.namespaces = namespaces
        self.shelf = Shelf(ttl_minutes, per_gpu)
        self.node_of = {g.uuid: n.name for n in nodes for g in n.gpus}
        self.key = -1

    def _owner(self, key: int) -> Owner:
        return Owner(f"pod-{key}", self.namespaces[key], f"pod-{key}")

    def arriving(self, at: float, key: int) -> None:
        self.shelf.at(at)
        self.key = key

    def ending(self, at: float, key: int, picks: list[Pick]) -> None:
        self.shelf.at(at)
        self.shelf.ended(self.node_of[picks[0][0].uuid], self._owner(key), picks)

    def arrived(self, at: float, mems: tuple) -> None:
        self.engine.arrived(at, mems)

    def departed(self, mems: tuple, lifetime: float) -> None:
        self.engine.departed(mems, lifetime)

    def reserved(self, gpu: object, placement: object) -> None:
        self.engine.reserved(gpu, placement)

    def released(self, gpu: object, placement: object) -> None:
        self.engine.released(gpu, placement)

    def decide(self, mems: list[int | None]) -> list[Pick] | None:
        """The engine's plan (idle placements free), the extender's moves, then the plugin's Allocate
        (the replay applies every pick it is given)."""
        request = self.engine.request(mems)
        plan = self.engine.index.plan(request)
        if not plan.fits:
            return None
        namespace = self._owner(self.key).namespace
        if len(plan.devices) == 1:
            plan = self.shelf.steer(request, plan, self.engine.node_gpus(plan.node), namespace)
        self.shelf.allocate(plan, namespace)
        return self.engine.picks(plan)

    def report(self) -> dict[str, int]:
        return dict(self.shelf.counts)
