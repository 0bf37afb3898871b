"""Defrag advice: the cheapest set of running MIG pods whose removal would let a pending pod be placed.

Pure (no I/O): the scheduler hands in the fleet as the placement engine sees it (`GpuState`s with
their occupied placements), the running pods that hold those placements, and how many more pods
each PodDisruptionBudget lets go; the advisor answers with a set, or why there is none.

Cost of a set (lower is better, first difference wins), the same for every caller:
1. the highest priority in the set (never disturb more important work than needed),
2. how many of its pods are lost: once the set is freed and the pod placed there, each removed pod's
   replacement (its controller recreates it with the same request) is placed, most important first,
   by the same placement engine on the whole fleet with the pending pod's placement held; one that
   does not fit anywhere, or that nothing recreates (no request known), is lost,
3. how many pods,
4. the sum of their priorities,
5. how long they have run in total (younger pods lose less work),
then the node name and the pods' names, so equal costs give the same answer every time. The advice
says, per removed pod, where its replacement is expected to go (a move) or that it is lost.

A set is legal when every pod in it is a candidate (the caller decides: e.g. only pods that opted in
and have a lower priority than the pending one), no PodDisruptionBudget group loses more pods than it
still allows, with the set's placements freed the placement engine itself places the pod (so the
advice is exactly what the scheduler would then do), and every pod of the set is in someone's way:
it overlaps a slice the engine then gives the pod, or one it gives another pod's replacement (a
chain: a pod moved out of the way of a pod that moves). `require_homes`: only sets that lose no pod.

Order. Replacements are placed, and the controller evicts, most important first (kube-scheduler's
queue); among equal priorities next the pod whose slices a pod placed so far took (it was moved to
make that room, so it goes right after the pod that needed it and cannot take its own room back
first), else those whose request fits nowhere now, then by name (`eviction_order`).

Search. The pod lands on one node, so a set lies on one node. A one-device pod needs one free
placement: for every placement the engine could use, the pods overlapping it are the only legal set
that frees it, so every legal set is found by looking at every placement once (linear in the fleet).
They are taken in order of their cost with no pod lost (a lower bound); a set's lost pods are
bounded from below without a fleet-wide placement (a pod is surely lost when its request fits on no
other node and not on its own node after the change; surely placed when it is the set's only pod and
fits somewhere), and placed exactly (`MAX_MOVES` sets at most) only when the bound cannot settle it;
the search stops at the first set no later one can beat. So it is exact unless more than `MAX_MOVES`
sets need the exact placement (then the advice says it is not proven cheapest). A multi-device pod is
searched per node in order of cost (uniform-cost search over sets, lost pods bounded by zero: each
set is tried only after every cheaper one); the work is capped (`max_checks` engine calls) and, once
capped with no set found, the advice falls back to a greedy set (every candidate on the node, then
each dropped while the pod still fits) and says it is not proven cheapest.

Chains, when the best set found loses a pod (or, with `require_homes`, none was found): a set that
strands a pod grows by the pods in that pod's way at one placement it could take anywhere in the
fleet, up to `MAX_CHAIN_DEPTH` steps. A uniform-cost search over the grown sets by their cost with
none lost (likelier sets first among sets of one count: new pods that fit in what the set leaves
free), each tried on the whole fleet, then a small beam from the cheapest stranding sets. Bounded:
`MAX_CHAIN_TRIALS` trials per phase, `MAX_CHAIN_STEPS` sets grown, `CHAIN_WINDOW` rooms read and
`CHAIN_BRANCH` sets kept per step; whatever a bound leaves unexplored is a cut, and an advice whose
cost a cut could beat says it is not proven cheapest. A set that strands a multi-device pod is such a
cut too: no chain gives that pod a home, so the sets one pod larger that might are not searched.
Exact on small fleets (every room read, every grown set kept) with no multi-device pod stranded.

Re-laid GPUs, when still no set found loses nobody (chains give a home only to a one-device pod, and
a multi-device pod's capped search never reaches them): every candidate on one GPU, or on two, is
removed and the set tried on the whole fleet, regions ranked by `mig.defrag_relay` (most waste
first: free slices, and instances on a model where they take a larger share than on another; a pair
only when moving an instance between its GPUs could gain room), skipped when even a perfect packing
could not hold the pod (room the region could gain plus usable free room elsewhere). Pods in no
one's way or placed nowhere keep their place and the rest is tried again; a set that works is made
smaller (first the pods the pod needed moved: those in its way, those in the way of where a needed
pod went, and so on; then its core: the pods in the pod's way and those that change GPU; then each
pod kept in place while the rest works: a smaller set spends fewer of the controller's eviction
tokens). Bounded: `MAX_RELAY_TRIALS` trials (+ `MAX_RELAY_SHRINK`); a set found so is not proven
cheapest.
"""

from __future__ import annotations

import calendar
import heapq
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from mig.allowlist import ResourceNames
from mig.annotations import EVICTABLE
from mig.defrag_relay import Instance, Waste, regions
from mig.placement import GpuState, PlacementIndex, Plan, PodRequest, RequestError
from mig.placement.occupancy import profile_set
from mig.placement.preference import candidate_order
from mig.placement.request import Memory, memory_on
from mig.pods import gpu_request, metadata_of
from mig.types import Placement

MAX_CHECKS = 400  # engine calls per advice for multi-device pods; ~1 ms each on an 8-GPU node
MAX_MOVES = 100  # sets per advice whose removed pods are placed on the whole fleet to count the lost
MAX_CHAIN_TRIALS = 24  # grown sets tried on the whole fleet per advice, per phase (`_Search.chains`, `beam`)
MAX_CHAIN_DEPTH = 3  # steps of a chain: a stranded pod given a home by moving the pods in its way
CHAIN_BRANCH = 24  # sets kept per step, cheapest first (the rest are a cut: not proven cheapest)
MAX_CHAIN_STEPS = 12  # sets grown per advice by the uniform-cost search (each reads a pod's rooms)
CHAIN_WINDOW = 16 * CHAIN_BRANCH  # rooms of a stranded pod read per step, cheapest first
BEAM_SEEDS, BEAM_WIDTH = 6, 3  # past the budget: stranding sets grown per step, and sets each grows
MAX_RELAY_TRIALS = 96  # whole-fleet trials of re-laid GPUs per advice (`_Search.relay`)
MAX_RELAY_SHRINK = 16  # more trials to make a working re-laid set smaller
RELAY_SETTLE = 3  # trials per region: pods in no one's way, or placed nowhere, keep their place


@dataclass(frozen=True)
class Holder:
    """A running MIG pod as the advisor sees it: what it holds and what removing it costs."""

    name: str  # namespace/name
    node: str
    placements: tuple[tuple[str, Placement], ...]  # (GPU UUID, placement) of every device it holds
    priority: int = 0
    started: float = 0.0  # epoch seconds it started running
    groups: tuple[str, ...] = ()  # the PodDisruptionBudgets (namespace/name) that select it
    candidate: bool = True  # may be part of the advice at all
    # What its replacement asks for (its controller recreates it with the same spec); None: nothing
    # recreates it (a bare pod) or it cannot be read, so removing it loses it.
    request: PodRequest | None = None


Cost = tuple[int, int, int, int, float, str, tuple[str, ...]]


def cost(node: str, victims: Iterable[Holder], now: float, lost: int = 0) -> Cost:
    """The cost of removing these pods from `node`, `lost` of them with nowhere to go (see the module
    docstring); lower is better. With `lost` 0 it is a lower bound of the set's cost."""
    pods = sorted(victims, key=lambda h: h.name)
    if not pods:
        return (-(1 << 62), 0, 0, 0, 0.0, node, ())
    return (
        max(h.priority for h in pods),
        lost,
        len(pods),
        sum(h.priority for h in pods),
        sum(max(0.0, now - h.started) for h in pods),
        node,
        tuple(h.name for h in pods),
    )


@dataclass(frozen=True)
class Move:
    """Where a removed pod's replacement is expected to go: the engine's plan, or None (lost)."""

    victim: Holder
    plan: Plan | None


@dataclass(frozen=True)
class Advice:
    """The cheapest legal set found (empty `victims` with `node` "" means none), and how it was found."""

    victims: tuple[Holder, ...] = ()
    node: str = ""
    plan: Plan | None = None  # where the engine places the pod once the set is gone
    exact: bool = True  # False: the search was capped, the set is not proven cheapest
    checks: int = 0  # engine calls spent
    why_none: str = ""  # when there is no set: why
    blocked_by_budget: tuple[str, ...] = field(default=())  # PDB groups that ruled out a set
    moves: tuple[Move, ...] = ()  # per victim, most important first: where it goes, or lost

    @property
    def found(self) -> bool:
        return bool(self.victims)

    @property
    def lost(self) -> tuple[Holder, ...]:
        """The victims whose replacements the engine could not place (or that nothing recreates)."""
        return tuple(m.victim for m in self.moves if m.plan is None)


def eviction_order(advice: Advice) -> tuple[Holder, ...]:
    """The order to evict the set in: the order the advisor placed the replacements in (among equal
    priorities kube-scheduler takes the replacement queued first), so a pod that needs the room
    another's move makes is placed before that other pod can take its own room back."""
    if len(advice.moves) == len(advice.victims):
        return tuple(m.victim for m in advice.moves)
    return tuple(replacement_order(advice.victims))


def within_budgets(victims: Iterable[Holder], budgets: Mapping[str, int]) -> str:
    """The first PodDisruptionBudget group the set would take below zero, or "" when none."""
    taken: dict[str, int] = {}
    for h in victims:
        for g in h.groups:
            taken[g] = taken.get(g, 0) + 1
            if taken[g] > max(0, budgets.get(g, 0)):
                return g
    return ""


def _without(gpus: Sequence[GpuState], victims: Iterable[Holder]) -> list[GpuState]:
    """The node's GPUs with the victims' placements freed (one occurrence per held placement)."""
    freed: dict[str, list[Placement]] = {}
    for h in victims:
        for uuid, p in h.placements:
            freed.setdefault(uuid, []).append(p)
    out = []
    for g in gpus:
        gone = freed.get(g.uuid)
        if not gone:
            out.append(g)
            continue
        left = list(g.occupied)
        for p in gone:
            if p in left:
                left.remove(p)
        out.append(replace(g, occupied=tuple(left)))
    return out


def _place(pod: PodRequest, gpus: Sequence[GpuState]) -> Plan | None:
    result = PlacementIndex(gpus).plan(pod)
    return result if isinstance(result, Plan) and result.devices else None


def replacement_order(
    victims: Iterable[Holder], fits_now: Callable[[PodRequest | None], bool] = lambda r: False
) -> list[Holder]:
    """The order replacements are placed in, which is the order the controller evicts them in: most
    important first (kube-scheduler's queue pops higher priority first, and among equal ones the one
    queued first), then those whose request fits nowhere now (they need the room the set frees: a pod
    evicted only to make room for another goes after it, or it might take its own room back), then name."""
    return sorted(victims, key=lambda h: (-h.priority, fits_now(h.request), h.name))


def _in_the_way(plan: Plan, victims: Iterable[Holder]) -> bool:
    """Every victim holds a slice the plan gives the pod."""
    given = [(d.gpu_uuid, d.placement.mask) for d in plan.devices]
    return all(any(u == gu and p.mask & mask for u, p in h.placements for gu, mask in given) for h in victims)


class Homes:
    """Where removed pods' replacements would go, over one fleet: the whole fleet in one engine index
    (built on first use), changed for one set and restored; and cheap bounds on how many a set loses.

    A caller advising several pods over the same fleet (the controller's pass) shares one `Homes`, so
    the fleet-wide index is built once and what fits where is looked up once per request."""

    def __init__(self, gpus: Sequence[GpuState]):
        self.gpus = gpus
        self._index: PlacementIndex | None = None
        self._fit_nodes: dict[PodRequest, tuple[str, ...]] = {}  # request -> up to two nodes it fits now
        self._own: dict[tuple[object, ...], bool] = {}  # (node shape after, pod, request) -> fits there
        self._beside: dict[tuple[object, ...], bool | None] = {}  # (pod, request, freed GPUs) -> may fit
        self._ids: dict[PodRequest, int] = {}  # equal requests share one number (cheap memo keys)
        self._by_object: dict[int, tuple[PodRequest, int]] = {}
        self._masks: dict[str, int] = {g.uuid: g.occupied_mask for g in gpus}
        self._on_node: dict[tuple[str, int], tuple[str, ...]] = {}  # (node, request) -> GPUs it fits now
        self._usable: dict[PodRequest, dict[tuple[int, int], list[Placement]]] = {}
        self._free: dict[tuple[int, int, int, int], bool] = {}  # (request, profiles, MiB, mask) -> fits
        self.placed = 0  # sets placed on the whole fleet
        self._by_uuid: dict[str, GpuState] | None = None
        self._fit_gpus: dict[PodRequest, tuple[str, ...]] = {}  # one-device request -> GPUs it fits now

    @property
    def index(self) -> PlacementIndex:
        if self._index is None:
            self._index = PlacementIndex(self.gpus)
        return self._index

    def _id(self, request: PodRequest) -> int:
        """The request's number: by identity first (holders keep their request objects), then by value."""
        found = self._by_object.get(id(request))
        if found is None or found[0] is not request:
            found = self._by_object[id(request)] = (request, self._ids.setdefault(request, len(self._ids)))
        return found[1]

    def _fits_gpu(self, request: PodRequest, g: GpuState, mask: int) -> bool:
        """A one-device request fits on `g` with these slices taken (a table lookup per GPU shape)."""
        if not g.healthy or g.cordoned:
            return False
        if _has_filters(request):  # per GPU: its UUID or type may rule it out
            usable = _usable_placements(
                request, g, request.devices()[0][2], self._usable.setdefault(request, {})
            )
            return any(not p.mask & mask for p in usable)
        key = (self._id(request), id(g.profiles), g.memory_mb, mask)
        found = self._free.get(key)
        if found is None:
            memo = self._usable.setdefault(request, {})
            usable = _usable_placements(request, g, request.devices()[0][2], memo)
            found = self._free[key] = any(not p.mask & mask for p in usable)
        return found

    def _nodes_fitting(self, request: PodRequest) -> tuple[str, ...]:
        """Up to two nodes the request fits on now: one-device requests by a table lookup per GPU,
        others by the engine (at most two calls)."""
        found = self._fit_nodes.get(request)
        if found is not None:
            return found
        out: list[str] = []
        if request.device_count == 1:
            for g in self.gpus:
                if g.node not in out and self._fits_gpu(request, g, g.occupied_mask):
                    out.append(g.node)
                    if len(out) == 2:
                        break
        else:
            plan = self.index.plan(request)
            if isinstance(plan, Plan) and plan.devices:
                out.append(plan.node)
                again = self.index.plan(request, nodes=[n for n in self.index.nodes() if n != plan.node])
                if isinstance(again, Plan) and again.devices:
                    out.append(again.node)
        self._fit_nodes[request] = found = tuple(out)
        return found

    def fits_elsewhere(self, request: PodRequest, node: str) -> bool:
        """The request fits now on some node other than `node`."""
        return any(n != node for n in self._nodes_fitting(request))

    def surely_lost(self, pod: PodRequest, gpus: Sequence[GpuState], victims: Sequence[Holder]) -> int | None:
        """How many victims are lost whatever the order (a lower bound), or None when the pod does not
        fit on the node with the set freed. A victim is surely lost when nothing recreates it, or its
        request fits on no other node now and not on its own node once the set is freed and the pod
        placed there (one-device requests: for every placement the pod could take, by table lookups;
        others: the engine on the node, its answer shared by nodes of the same shape)."""
        lost, after = 0, None
        for h in victims:
            if h.request is None:
                lost += 1
                continue
            if self.fits_elsewhere(h.request, h.node):
                continue
            if pod.device_count == 1 and h.request.device_count == 1:
                fits = self._fits_beside_any(pod, gpus, victims, h.request)
            else:
                after = after or _without(gpus, victims)
                fits = self._fits_beside(pod, after, h.request)
            if fits is None:
                return None
            lost += not fits
        return lost

    def _fits_beside_any(
        self, pod: PodRequest, gpus: Sequence[GpuState], victims: Sequence[Holder], request: PodRequest
    ) -> bool | None:
        """Whether the request may fit on the node beside the pod, for some placement the pod could
        take there (None: the pod could take none). The pod did not fit before, so it lands on a GPU
        a victim freed; the node's other GPUs take the request as they would now. Answers are shared
        by sets freeing GPUs of the same shape."""
        freed: dict[str, int] = {}
        for h in victims:
            for u, p in h.placements:
                freed[u] = freed.get(u, 0) | p.mask
        node = gpus[0].node
        fits_now = self._on_node.get((node, self._id(request)))
        if fits_now is None:
            fits_now = tuple(g.uuid for g in gpus if self._fits_gpu(request, g, self._masks.get(g.uuid, 0)))
            self._on_node[(node, self._id(request))] = fits_now
        if any(u not in freed for u in fits_now):
            return True
        touched = [(g, self._masks.get(g.uuid, 0) & ~freed[g.uuid]) for g in gpus if g.uuid in freed]
        key: tuple[object, ...] = (self._id(pod), self._id(request))
        key += tuple((id(g.profiles), g.memory_mb, g.healthy, g.cordoned, m) for g, m in touched)
        if _has_filters(pod) or _has_filters(request):
            key += tuple(g.uuid for g, _ in touched)
        found = self._beside.get(key)
        if key not in self._beside:
            ask, memo = pod.devices()[0][2], self._usable.setdefault(pod, {})
            spots = [
                (g, q) for g, m in touched for q in _usable_placements(pod, g, ask, memo) if not q.mask & m
            ]
            found = self._beside[key] = (
                None
                if not spots
                else any(
                    self._fits_gpu(request, t, m | (q.mask if t is g else 0))
                    for g, q in spots
                    for t, m in touched
                )
            )
        return found

    def _fits_beside(self, pod: PodRequest, after: Sequence[GpuState], request: PodRequest) -> bool | None:
        named = _has_uuids(pod) or _has_uuids(request)
        shape = tuple(
            (g.index, g.uuid if named else "", id(g.profiles), g.occupied_mask, g.type, g.healthy, g.cordoned)
            for g in sorted(after, key=lambda g: (g.index, g.uuid))
        )
        key = (shape, pod, request)
        if key not in self._own:
            index = PlacementIndex(after)
            plan = index.plan(pod)
            if not isinstance(plan, Plan) or not plan.devices:
                return None
            index.apply(plan)
            again = index.plan(request)
            self._own[key] = isinstance(again, Plan) and bool(again.devices)
        return self._own[key]

    def fits_in(self, request: PodRequest | None, left: Mapping[str, int]) -> bool:
        """The request fits on some GPU with the slices `left` says are taken on the GPUs it names
        (the others as they are now); a request of several devices: fits now on a node it names not."""
        if request is None:
            return False
        if request.device_count != 1:
            return any(all(u not in left for u in self._node_uuids(n)) for n in self._nodes_fitting(request))
        fitting = self._fit_gpus.get(request)
        if fitting is None:
            fitting = self._fit_gpus[request] = tuple(
                g.uuid for g in self.gpus if self._fits_gpu(request, g, g.occupied_mask)
            )
        if any(u not in left for u in fitting):
            return True
        by_uuid = self._gpu_by_uuid()
        return any(self._fits_gpu(request, by_uuid[u], m) for u, m in left.items() if u in by_uuid)

    def _gpu_by_uuid(self) -> dict[str, GpuState]:
        if self._by_uuid is None:
            self._by_uuid = {g.uuid: g for g in self.gpus}
        return self._by_uuid

    def _node_uuids(self, node: str) -> list[str]:
        return [g.uuid for g in self.gpus if g.node == node]

    def fits_now(self, request: PodRequest | None) -> bool:
        """The request fits somewhere in the fleet as it is now (before any set is freed)."""
        return request is not None and bool(self._nodes_fitting(request))

    def _in_order(self, victims: Sequence[Holder], placed: list[Plan]) -> Iterable[Holder]:
        """The victims in the order their replacements are placed (`placed` grows as they are): most
        important first; among equal priorities, next the one whose slices a pod placed so far took
        (the pending pod, or a replacement: it was moved to make that room, so it goes right after the
        pod that needed it), else `replacement_order`'s (those that fit nowhere now first, then name)."""
        left = replacement_order(victims, self.fits_now)
        while left:
            top = left[0].priority
            pick = next(
                (h for h in left if h.priority == top and any(_in_the_way(p, (h,)) for p in placed)), left[0]
            )
            left.remove(pick)
            yield pick

    def place(
        self, pod: PodRequest, node: str | Collection[str] | None, victims: Sequence[Holder]
    ) -> tuple[Plan, tuple[Move, ...]] | None:
        """Free the set, place the pod on `node` (a name, several, or None: anywhere) and each
        replacement (in `order`) anywhere, as the engine would; None when the pod does not then land
        there or some victim is in no one's way (neither the pod's nor another replacement's).
        The index is restored afterwards."""
        trial = self.trial(pod, node, victims)
        return None if trial is None or not trial.legal else (trial.plan, trial.moves)

    def trial(
        self,
        pod: PodRequest,
        node: str | Collection[str] | None,
        victims: Sequence[Holder],
        until_lost: bool = False,
    ) -> Trial | None:
        """`place`, also for a set some pod of which is in no one's way (`Trial.legal` False);
        None when the pod does not land. `until_lost`: stop at the first replacement placed nowhere
        (the moves then end with it; `legal` False)."""
        self.placed += 1
        index = self.index
        freed = [(u, p) for h in victims for u, p in h.placements]
        applied: list[Plan] = []
        try:
            for u, p in freed:
                index.release(u, p)
            plan = index.plan(pod, nodes=(node,) if isinstance(node, str) else node)
            if not isinstance(plan, Plan) or not plan.devices:
                return None
            index.apply(plan)
            applied.append(plan)
            moves = []
            for h in self._in_order(victims, applied):
                again = index.plan(h.request) if h.request is not None else None
                if isinstance(again, Plan) and again.devices:
                    index.apply(again)
                    applied.append(again)
                    moves.append(Move(h, again))
                else:
                    moves.append(Move(h, None))
                    if until_lost:
                        return Trial(plan, tuple(moves), False, {})
            legal = all(
                _in_the_way(plan, (m.victim,))
                or any(o.plan is not None and o is not m and _in_the_way(o.plan, (m.victim,)) for o in moves)
                for m in moves
            )
            touched = {u for u, _ in freed} | {d.gpu_uuid for done in applied for d in done.devices}
            return Trial(plan, tuple(moves), legal, {u: index.occupied_mask(u) for u in touched})
        finally:
            for done in applied:
                for d in done.devices:
                    index.release(d.gpu_uuid, d.placement)
            for u, p in freed:
                if not index.occupied_mask(u) & p.mask:
                    index.reserve(u, p)


def _idle(trial: Trial) -> set[str]:
    """The victims of a trial in no one's way (neither the pod's nor another replacement's)."""
    return {
        m.victim.name
        for m in trial.moves
        if not _in_the_way(trial.plan, (m.victim,))
        and not any(
            o.plan is not None and o is not m and _in_the_way(o.plan, (m.victim,)) for o in trial.moves
        )
    }


def _works(trial: Trial | None) -> bool:
    """The trial placed the pod and every replacement, each victim in someone's way."""
    return trial is not None and trial.legal and all(m.plan is not None for m in trial.moves)


def _core(trial: Trial) -> set[str]:
    """The victims in the pod's way, and those whose replacement goes to another GPU than they held."""
    return {
        m.victim.name
        for m in trial.moves
        if _in_the_way(trial.plan, (m.victim,))
        or (
            m.plan is not None and {d.gpu_uuid for d in m.plan.devices} != {u for u, _ in m.victim.placements}
        )
    }


def _one_more(base: tuple[int, int, int]) -> Cost:
    """A bound every set one pod larger than a set of (highest priority, count, priority sum) meets:
    as important, none lost, one pod more (what a chain step that is not taken leaves unexplored)."""
    return (base[0], 0, base[1] + 1, base[2], 0.0, "", ())


def _needed(trial: Trial) -> set[str]:
    """The victims a working trial needed: those in the pod's way, then those in the way of where a
    needed one's replacement went, and so on (the others only took room that pods not needed freed)."""
    by_name = {m.victim.name: m for m in trial.moves}
    todo = [m.victim.name for m in trial.moves if _in_the_way(trial.plan, (m.victim,))]
    needed = set(todo)
    while todo:
        plan = by_name[todo.pop()].plan
        if plan is None:
            continue
        for m in trial.moves:
            if m.victim.name not in needed and _in_the_way(plan, (m.victim,)):
                needed.add(m.victim.name)
                todo.append(m.victim.name)
    return needed


@dataclass(frozen=True)
class Trial:
    """A set freed on the whole fleet: where the pod lands, each replacement's fate in placement
    order, and whether every victim is in someone's way (the pod's, or another replacement's)."""

    plan: Plan
    moves: tuple[Move, ...]
    legal: bool
    left: Mapping[str, int]  # GPU UUID -> occupied slices afterwards, for the GPUs the set touched


def _has_uuids(pod: PodRequest) -> bool:
    return bool(pod.use_uuids or pod.nouse_uuids)


def _has_filters(pod: PodRequest) -> bool:
    return bool(pod.use_uuids or pod.nouse_uuids or pod.use_types or pod.nouse_types)


@dataclass
class _Node:
    name: str
    gpus: list[GpuState]
    holders: list[Holder]


def _nodes(
    gpus: Sequence[GpuState], holders: Sequence[Holder], allowed: Collection[str] | None
) -> list[_Node]:
    by: dict[str, _Node] = {}
    for g in gpus:
        if allowed is None or g.node in allowed:
            by.setdefault(g.node, _Node(g.node, [], [])).gpus.append(g)
    for h in holders:
        if h.node in by:
            by[h.node].holders.append(h)
    return [by[n] for n in sorted(by)]


def advise(
    pod: PodRequest,
    gpus: Sequence[GpuState],
    holders: Sequence[Holder],
    budgets: Mapping[str, int] | None = None,
    now: float = 0.0,
    nodes: Collection[str] | None = None,
    max_checks: int = MAX_CHECKS,
    known_unplaceable: bool = False,
    require_homes: bool = False,
    max_moves: int = MAX_MOVES,
    homes: Homes | None = None,
    max_relay_trials: int = MAX_RELAY_TRIALS,
) -> Advice:
    """The cheapest legal set of `holders` whose removal lets the engine place `pod` (see module doc).

    `known_unplaceable`: the caller already asked the engine (e.g. its live index) and the pod does
    not fit now, so the advisor does not build an index of the whole fleet to ask again.
    `require_homes`: only sets whose every removed pod is placed again (moves, none lost).
    Replacements are placed on all of `gpus` (any node), whatever `nodes` allows for the pod.
    `homes`: a `Homes` over these same `gpus`, shared between advice over one fleet (else built here).
    `max_relay_trials`: whole-fleet trials of re-laid GPUs; a search they run out in is not exact.
    """
    budgets = budgets or {}
    if not pod.devices():
        return Advice(why_none="the pod asks for no MIG device")
    fleet = _nodes(gpus, holders, nodes)
    if not known_unplaceable and _place(pod, [g for n in fleet for g in n.gpus]) is not None:
        return Advice(why_none="the pod fits without removing anything")
    homes = homes if homes is not None else Homes(gpus)
    homes.placed = 0
    everywhere = fleet if nodes is None else _nodes(gpus, holders, None)
    allowed = None if nodes is None else [n.name for n in fleet]
    search = _Search(
        pod,
        fleet,
        budgets,
        now,
        homes,
        require_homes,
        max_moves,
        everywhere,
        allowed,
        max_relay_trials=max_relay_trials,
    )
    return search.one_device() if pod.device_count == 1 else search.many_devices(max_checks)


@dataclass
class _Best:
    cost: Cost
    node: _Node
    victims: tuple[Holder, ...]
    placed: tuple[Plan, tuple[Move, ...]] | None = None  # from `Homes.place`, when it was run
    chain: bool = False  # found by the chain search: `placed` is its trial on the whole fleet


class _Search:
    """One advice's search: sets offered cheapest-first (by their cost with no pod lost), each priced
    with its lost pods (bounded first, placed on the whole fleet only when the bound cannot decide)."""

    def __init__(
        self,
        pod: PodRequest,
        fleet: list[_Node],
        budgets: Mapping[str, int],
        now: float,
        homes: Homes,
        require_homes: bool,
        max_moves: int,
        everywhere: list[_Node] | None = None,
        allowed: Collection[str] | None = None,
        max_chain_trials: int = MAX_CHAIN_TRIALS,
        max_relay_trials: int = MAX_RELAY_TRIALS,
    ):
        self.pod, self.fleet, self.budgets, self.now = pod, fleet, budgets, now
        self.homes, self.require_homes, self.max_moves = homes, require_homes, max_moves
        self.everywhere = everywhere if everywhere is not None else fleet  # where replacements may go
        self.allowed = allowed  # the nodes the pod may land on (None: any)
        self.max_chain_trials = max_chain_trials
        self.best: _Best | None = None
        self.blocked: set[str] = set()
        self.capped = False  # a set needed the exact placement past `max_moves`
        self.homeless = 0  # legal sets ruled out by `require_homes`
        # Sets that place the pod but strand a pod, with the victims known or likely lost: where
        # chains start (`chains`).
        self.seeds: list[tuple[Cost, _Node, tuple[Holder, ...], tuple[Holder, ...]]] = []
        self.chain_trials = 0
        self.chain_steps = 0  # sets grown (each looks at every room of one pod in the fleet)
        self.cut: Cost | None = None  # the cheapest bound the chain search left unexplored
        self._rooms: dict[PodRequest, list[tuple[tuple[int, int, int], tuple[Holder, ...]]]] = {}
        self._overlaps: dict[tuple[str, Placement], tuple[tuple[str, ...], tuple[Holder, ...]] | None] = {}
        self._owner_maps: dict[str, dict[tuple[str, Placement], Holder]] = {}
        self.relay_trials = 0
        self.relay_tried: set[frozenset[str]] = set()  # sets a re-lay tried (regions overlap)
        self.relay_done = False
        self.relayed = False  # the best set is a re-laid region's: not proven cheapest
        self.max_relay_trials = max_relay_trials
        self.relay_cut = False  # the re-lay's trials ran out before its regions did: a set may be missed

    def _past(self, quick: tuple[int, int, int]) -> bool:
        """Sets from here on (taken in order of `_quick`) cannot beat the best: a more important pod,
        or, when the best loses nobody, more pods or more priority."""
        assert self.best is not None
        c = self.best.cost
        return quick[0] > c[0] or (c[1] == 0 and quick > (c[0], c[2], c[3]))

    def beaten(self, bound: Cost) -> bool:
        """No set of at least this cost can improve on the best so far."""
        return self.best is not None and bound >= self.best.cost

    def offer(self, node: _Node, victims: tuple[Holder, ...], bound: Cost) -> None:
        """Price a set whose pod fits once it is gone (`bound`: its cost with no pod lost)."""
        group = within_budgets(victims, self.budgets)
        if group:
            self.blocked.add(group)
            return
        sure = self.homes.surely_lost(self.pod, node.gpus, victims)
        if sure is None:
            return
        if sure:
            likely = tuple(
                h for h in victims if h.request is None or not self.homes.fits_elsewhere(h.request, h.node)
            )
            self.seeds.append((bound, node, victims, likely))
        if self.require_homes and sure:
            self.homeless += 1
            return
        low = cost(node.name, victims, self.now, sure)
        if self.beaten(low):
            return
        if len(victims) == 1 or sure == len(victims):  # the bound is the count: no placement needed
            self.best = _Best(low, node, victims)
            return
        if self.homes.placed >= self.max_moves:
            self.capped = True
            return
        placed = self.homes.place(self.pod, node.name, victims)
        if placed is None:
            return
        lost = sum(m.plan is None for m in placed[1])
        if lost and not sure:
            self.seeds.append((bound, node, victims, tuple(m.victim for m in placed[1] if m.plan is None)))
        if self.require_homes and lost:
            self.homeless += 1
            return
        c = cost(node.name, victims, self.now, lost)
        if not self.beaten(c):
            self.best = _Best(c, node, victims, placed)

    def advice(self, checks: int, exact: bool = True) -> Advice:
        if exact:
            self.chains()
            self.beam()
        self.relay()
        chain_cut = self.cut is not None and (self.best is None or self.cut < self.best.cost)
        exact = exact and not chain_cut and not self.relayed and not self.relay_cut
        if self.best is None:
            return _none(self.blocked, checks, not exact or self.capped, self.homeless)
        best = self.best
        placed = best.placed or self.homes.place(self.pod, best.node.name, best.victims)
        if placed is None:  # the whole-fleet engine placed the pod elsewhere on the node: its own view
            plan, moves = _place(self.pod, _without(best.node.gpus, best.victims)), tuple[Move, ...]()
        else:
            plan, moves = placed
        return Advice(
            best.victims,
            plan.node if best.chain and plan is not None else best.node.name,
            plan,
            exact and not self.capped,
            checks,
            "",
            tuple(sorted(self.blocked)),
            moves,
        )

    # ---- chains: a stranded pod given a home by moving another ------------------------------
    def chains(self) -> None:
        """Sets that strand a pod, grown by the pods in that pod's way at a placement it could take
        (anywhere in the fleet), and so on up to `MAX_CHAIN_DEPTH` steps: uniform-cost search by the
        cost with none lost, each grown set tried on the whole fleet (`Homes.trial`). A step keeps
        every grown set when there are at most `CHAIN_BRANCH`, else the cheapest `CHAIN_BRANCH` of
        those whose new pods would fit in what the set leaves free (the room left beside the pending
        pod and the other replacements, or anywhere now); at most `max_chain_trials` trials. What
        that leaves unexplored is remembered (`cut`), so the advice says when a cheaper set may have
        been missed. Also when the best set so far loses no pod: a chain adds pods, but one as large
        as that set may still be cheaper by its priorities or its pods' age; the best's cost bounds
        the search (no set grows past the best's count)."""
        if not self.seeds:
            return
        # (order key, tick, bound, node, set, its lost pods or None: not tried yet, depth). The key
        # is the bound's highest priority and count, then how many new pods would not fit in what the
        # set leaves free, then the bound: likelier sets are tried first among sets of one count.
        Entry = tuple[
            tuple[object, ...], int, Cost, _Node, tuple[Holder, ...], tuple[Holder, ...] | None, int
        ]
        heap: list[Entry] = []
        seen: set[tuple[str, ...]] = set()
        for n, (bound, node, victims, likely) in enumerate(self.seeds):
            seen.add(tuple(h.name for h in victims))
            heap.append(((bound[0], bound[2], 0, bound), -n - 1, bound, node, victims, likely, 0))
        heapq.heapify(heap)
        tick = 0
        while heap:
            _, _, bound, node, victims, lost, depth = heapq.heappop(heap)
            if self.best is not None and (bound[0], 0, bound[2]) > self.best.cost[:3]:
                return  # every set left is dearer than the best (the key orders by these terms)
            if self.beaten(bound):
                continue
            if lost is None:  # a grown set: try it
                if self.chain_trials >= self.max_chain_trials:
                    self._cut(min((e[2] for e in heap), default=bound))
                    self._cut(bound)
                    return
                tried = self._try_chain(node, victims)
                if tried is None or not tried[0]:
                    continue
                lost, left, _ = tried
            else:  # a seed: what its pod leaves free on its node, without a whole-fleet trial
                left = _left_beside(self.pod, node, victims)
            if depth >= MAX_CHAIN_DEPTH:
                self._cut(bound)
                continue
            if self.chain_steps >= MAX_CHAIN_STEPS:
                self._cut(min((e[2] for e in heap), default=bound))
                self._cut(bound)
                return
            self.chain_steps += 1
            for c, unlikely, grown in self._grow(node, victims, lost, left, seen):
                tick += 1
                heapq.heappush(heap, ((c[0], c[2], unlikely, c), tick, c, node, grown, None, depth + 1))
        # explored everything the steps kept: exact up to `cut`

    def beam(self) -> None:
        """Past the uniform-cost search's budget with no set that loses nobody: grow the cheapest
        `BEAM_SEEDS` stranding sets depth first, keeping per step the `BEAM_WIDTH` likeliest (new pods
        that fit in what the set leaves free, then cost), at most `max_chain_trials` more trials.
        Whatever it finds is not proven cheapest (the `cut` says so)."""
        if self.cut is None or (self.best is not None and self.best.cost[1] == 0):
            return
        seen: set[tuple[str, ...]] = set()
        frontier: list[tuple[Cost, _Node, tuple[Holder, ...], tuple[Holder, ...], Mapping[str, int]]] = []
        for bound, node, victims, likely in sorted(self.seeds, key=lambda s: s[0])[:BEAM_SEEDS]:
            seen.add(tuple(h.name for h in victims))
            frontier.append((bound, node, victims, likely, _left_beside(self.pod, node, victims)))
        trials = 0
        for _ in range(MAX_CHAIN_DEPTH):
            grown_states = []
            for _, node, victims, lost, left in frontier:
                self.chain_steps += 1
                for c, _, grown in self._grow(node, victims, lost, left, seen)[:BEAM_WIDTH]:
                    if self.beaten(c):
                        continue
                    if trials >= self.max_chain_trials:
                        return
                    trials += 1
                    tried = self._try_chain(node, grown)
                    if tried is None:
                        continue
                    now_lost, now_left, better = tried
                    if better and not now_lost:
                        return
                    if now_lost:
                        grown_states.append((len(now_lost), c, node, grown, now_lost, now_left))
            grown_states.sort(key=lambda g: (g[0], g[1]))
            frontier = [
                (c, node, grown, lost, left) for _, c, node, grown, lost, left in grown_states[:BEAM_SEEDS]
            ]

    def _try_chain(
        self, node: _Node, victims: tuple[Holder, ...]
    ) -> tuple[tuple[Holder, ...], Mapping[str, int], bool] | None:
        """One whole-fleet trial of a grown set, kept as the best when it works and beats it: (the
        pods it strands, what it leaves occupied, whether it became the best); None: no trial."""
        self.chain_trials += 1
        trial = self.homes.trial(self.pod, self.allowed, victims)
        if trial is None:
            return None
        lost = tuple(m.victim for m in trial.moves if m.plan is None)
        better = False
        if trial.legal and not (self.require_homes and lost):
            c = cost(trial.plan.node, victims, self.now, len(lost))
            if not self.beaten(c):
                self.best = _Best(c, node, victims, (trial.plan, trial.moves), chain=True)
                better = True
        return lost, trial.left, better

    def _grow(
        self,
        node: _Node,
        victims: tuple[Holder, ...],
        lost: tuple[Holder, ...],
        left: Mapping[str, int],
        seen: set[tuple[str, ...]],
    ) -> list[tuple[Cost, int, tuple[Holder, ...]]]:
        """The sets one step longer: a stranded one-device pod (each of them: a set that homes the
        second may be cheaper than every set that homes the first) given a home by freeing the pods
        in its way at one of its placements (see `chains` for which are kept)."""
        base = (max(h.priority for h in victims), len(victims), sum(h.priority for h in victims))
        if any(h.request is not None and h.request.device_count > 1 for h in lost):
            # only a one-device pod is given a home by a chain: the sets that would give this one a
            # home (each one pod larger at least) are not searched here, so a proof stops below them
            self._cut(_one_more(base))
        requests = {h.request for h in lost if h.request is not None and h.request.device_count == 1}
        names = {h.name for h in victims}
        children: list[tuple[tuple[int, int, int, int], list[Holder]]] = []
        for request in sorted(requests, key=repr):  # the rooms of a request home each pod asking it
            children += self._children(base, names, self.rooms(request))
        priced = []
        for _, new in children:
            grown = tuple(sorted((*victims, *new), key=lambda h: h.name))
            key = tuple(h.name for h in grown)
            if key in seen:
                continue
            group = within_budgets(grown, self.budgets)
            if group:
                self.blocked.add(group)
                continue
            seen.add(key)
            priced.append((cost(node.name, grown, self.now), key, grown, new))
        scored = [
            (c, sum(not self.homes.fits_in(h.request, left) for h in new), key, grown)
            for c, key, grown, new in priced
        ]
        if len(scored) > CHAIN_BRANCH:
            scored.sort(key=lambda ch: (ch[1], ch[0]))
            self._cut(min(ch[0] for ch in scored[CHAIN_BRANCH:]))
            scored = scored[:CHAIN_BRANCH]
        return [(c, unlikely, grown) for c, unlikely, _, grown in scored]

    def _children(
        self,
        base: tuple[int, int, int],
        names: set[str],
        rooms: list[tuple[tuple[int, int, int], tuple[Holder, ...]]],
    ) -> list[tuple[tuple[int, int, int, int], list[Holder]]]:
        """(bound, new pods) of the rooms of one request, cheapest first, at most `CHAIN_WINDOW`."""
        children: list[tuple[tuple[int, int, int, int], list[Holder]]] = []
        for n, (quick, pods) in enumerate(rooms):
            if len(children) >= CHAIN_WINDOW:  # the rest (dearer by the rooms' order) are a cut
                self._cut(_one_more(base))
                break
            new = [h for h in pods if h.name not in names]
            if not new:
                continue
            if len(new) < len(pods):
                quick = _quick(new)
            lead = (max(base[0], quick[0]), 0, base[1] + quick[1], base[2] + quick[2])
            if self.best is not None and lead > self.best.cost[:4]:
                if quick[0] > base[0] and n + 1 < len(rooms) and rooms[n + 1][0][0] >= quick[0]:
                    break  # rooms are in order of priority: every one left is dearer too
                continue  # dearer than the best on the leading terms, whatever its age
            children.append((lead, new))
        return children

    def _cut(self, bound: Cost) -> None:
        self.cut = bound if self.cut is None or bound < self.cut else self.cut

    def overlapping(
        self, node: _Node, g: GpuState, p: Placement
    ) -> tuple[tuple[str, ...], tuple[Holder, ...]] | None:
        """`_overlapping` (with the pods' names), once per placement of an advice: the one-device
        search and every request's rooms ask about the same placements."""
        key = (g.uuid, p)
        if key not in self._overlaps:
            owners = self._owner_maps.get(node.name)
            if owners is None:
                owners = self._owner_maps[node.name] = _owners(node.holders)
            pods = _overlapping(g, p, owners)
            self._overlaps[key] = None if pods is None else (tuple(h.name for h in pods), pods)
        return self._overlaps[key]

    def rooms(self, request: PodRequest) -> list[tuple[tuple[int, int, int], tuple[Holder, ...]]]:
        """Every set of candidates in the way of a placement this one-device request could take,
        anywhere in the fleet (free placements need no set), cheapest first; once per request."""
        found = self._rooms.get(request)
        if found is not None:
            return found
        ask, memo = request.devices()[0][2], self.homes._usable.setdefault(request, {})
        sets: dict[tuple[str, ...], tuple[tuple[int, int, int], tuple[Holder, ...]]] = {}
        for node in self.everywhere:
            for g in node.gpus:
                for p in _usable_placements(request, g, ask, memo):
                    found_here = self.overlapping(node, g, p)
                    if found_here is not None and found_here[1]:
                        sets.setdefault(found_here[0], (_quick(found_here[1]), found_here[1]))
        self._rooms[request] = found = sorted(sets.values(), key=lambda s: (s[0], [h.name for h in s[1]]))
        return found

    # ---- re-laid GPUs: every candidate on a GPU or two removed, the engine lays them again --------
    def relay(self) -> None:
        """When no set found so far gives every pod a home: re-lay regions, most wasteful first
        (`mig.defrag_relay`): remove every candidate on one GPU, or on two (a PodDisruptionBudget's
        pods past what it allows stay), and try the set on the whole fleet. A pod in no one's way, or
        one the engine places nowhere, keeps its place and the rest is tried again (`RELAY_SETTLE`
        trials a region). The first set that works is made smaller (`_smaller`) and kept when it beats
        the best. At most `max_relay_trials` (`MAX_RELAY_TRIALS` unless the caller says) plus
        `MAX_RELAY_SHRINK` trials; what it finds is not proven cheapest, and a search its trials ran
        out in is not exact (`relay_cut`)."""
        if self.relay_done or (self.best is not None and self.best.cost[1] == 0):
            return
        self.relay_done = True
        everything = [g for node in self.everywhere for g in node.gpus]
        measure = Waste(everything)
        spare = {g.uuid: measure.usable_free(g) for g in everything}
        spare_total, need = sum(spare.values()), measure.least(self.pod)
        if len({(g.type, id(g.profiles), g.memory_mb) for g in everything}) == 1:
            # One model: an instance takes no less room on another GPU, so a GPU wastes its free room
            # only; the bound below at its best, before reading every instance.
            free = sorted((measure.free(g) - spare[g.uuid] for g in everything), reverse=True)[:2]
            if sum(free) + spare_total < need - 1e-9:
                return
        gpus, waste, held, by_gpu = self._waste(measure)
        gains = sorted((waste[g.uuid] - spare[g.uuid] for g in gpus), reverse=True)[:2]
        if sum(gains) + spare_total < need - 1e-9:
            return  # no region of one or two GPUs could hold the pod (the bound below, at its best)
        memo: dict[PodRequest, dict[tuple[int, int], list[Placement]]] = {}

        def usable(request: PodRequest, g: GpuState) -> list[Placement]:
            return _usable_placements(request, g, request.devices()[0][2], memo.setdefault(request, {}))

        for region in regions(gpus, waste, held, usable):
            if self.relay_trials >= self.max_relay_trials:
                self.relay_cut = True
                return
            # Room the region could gain (its waste) plus what is free and usable elsewhere must hold
            # the pod: each pod takes at least its least share wherever it goes (a bound for every
            # subset of the region's pods too: a pod that stays keeps at least that share).
            if sum(waste[u] - spare[u] for u in region) + spare_total < need - 1e-9:
                continue
            pods = self._within_budgets({h.name: h for u in region for h in by_gpu[u]}.values())
            if not self._may_land(region, pods, usable):
                continue
            settled = self._settle(pods)
            if settled is None:
                continue
            victims, trial = self._smaller(*settled)
            c = cost(trial.plan.node, victims, self.now)
            if not self.beaten(c):
                node = next(n for n in self.everywhere if n.name == trial.plan.node)
                self.best = _Best(c, node, victims, (trial.plan, trial.moves), chain=True)
                self.relayed = True
            return

    def _waste(
        self, measure: Waste
    ) -> tuple[list[GpuState], dict[str, float], dict[str, list[Instance]], dict[str, list[Holder]]]:
        """The GPUs with candidates on them (in the fleet's order), their waste, the instances each
        GPU holds (placement, request, may go) and its candidates."""
        by_gpu: dict[str, list[Holder]] = {}
        held: dict[str, list[Instance]] = {}
        for node in self.everywhere:
            for h in node.holders:
                for u, p in h.placements:
                    held.setdefault(u, []).append((p, h.request, h.candidate))
                    if h.candidate:
                        mine = by_gpu.setdefault(u, [])
                        if not mine or mine[-1] is not h:
                            mine.append(h)
        everything = [g for node in self.everywhere for g in node.gpus]
        gpus = [g for g in everything if g.uuid in by_gpu]
        waste = {g.uuid: measure.of(g, held.get(g.uuid, ())) for g in gpus}
        return gpus, waste, held, by_gpu

    def _may_land(
        self,
        region: tuple[str, ...],
        pods: tuple[Holder, ...],
        usable: Callable[[PodRequest, GpuState], list[Placement]],
    ) -> bool:
        """The pod, which fits nowhere now, can land only on the region's nodes: a one-device pod at a
        usable placement over none of what stays on a region GPU; others by the engine on each node
        the region touches, with the region's pods gone (one node, not the whole fleet)."""
        going = {(u, p) for h in pods for u, p in h.placements}
        if self.pod.device_count != 1:
            return any(
                _place(self.pod, _without(node.gpus, pods)) is not None
                for node in self.fleet
                if any(g.uuid in region for g in node.gpus)
            )
        for node in self.fleet:
            for g in node.gpus:
                if g.uuid not in region:
                    continue
                stays = 0
                for p in g.occupied:
                    stays |= 0 if p.size <= 0 or (g.uuid, p) in going else p.mask
                if any(not q.mask & stays for q in usable(self.pod, g)):
                    return True
        return False

    def _within_budgets(self, pods: Iterable[Holder]) -> tuple[Holder, ...]:
        """The pods, cheapest first, each kept while the set stays within every budget."""
        kept: list[Holder] = []
        for h in sorted(pods, key=lambda h: cost("", (h,), self.now)):
            if within_budgets((*kept, h), self.budgets):
                self.blocked.add(within_budgets((*kept, h), self.budgets))
            else:
                kept.append(h)
        return tuple(sorted(kept, key=lambda h: h.name))

    def _relay_trial(self, victims: tuple[Holder, ...]) -> Trial | None:
        """A whole-fleet trial of the set, stopped at the first pod it would lose (it must lose none)."""
        self.relay_trials += 1
        return self.homes.trial(self.pod, self.allowed, victims, until_lost=True)

    def _fresh(self, victims: tuple[Holder, ...]) -> bool:
        """The set was not tried by an earlier region (whose answer it would repeat); now it is."""
        key = frozenset(h.name for h in victims)
        if key in self.relay_tried:
            return False
        self.relay_tried.add(key)
        return True

    def _settle(self, victims: tuple[Holder, ...]) -> tuple[tuple[Holder, ...], Trial] | None:
        """The region's set, pods in no one's way or placed nowhere dropped until it works (or None)."""
        for _ in range(RELAY_SETTLE):
            if not victims:
                return None
            if self.relay_trials >= self.max_relay_trials:
                self.relay_cut = True
                return None
            if not self._fresh(victims):
                return None
            trial = self._relay_trial(victims)
            if trial is None:
                return None
            lost = {m.victim.name for m in trial.moves if m.plan is None}
            drop = lost or _idle(trial)  # a stopped trial says nothing of who is in whose way
            if not drop:
                return victims, trial
            victims = tuple(h for h in victims if h.name not in drop)
        return None

    def _smaller(self, victims: tuple[Holder, ...], trial: Trial) -> tuple[tuple[Holder, ...], Trial]:
        """A working set made smaller: first the pods it needed (`_needed`: pods that only took rooms
        pods not needed freed, e.g. two that swapped GPUs, stay where they are), then its core (the
        pods in the pending pod's way and those whose replacement goes to another GPU; the rest only
        changed places on their own GPU), then each pod, costliest first, kept in place when the
        others still work without it."""
        spent = 0
        for keep in (_needed, _core):  # each read from the trial that works so far
            kept = keep(trial)
            if len(kept) < len(victims):
                spent += 1
                fewer = tuple(h for h in victims if h.name in kept)
                again = self._relay_trial(fewer)
                if _works(again):
                    assert again is not None
                    victims, trial = fewer, again
        for h in sorted(victims, key=lambda h: cost("", (h,), self.now), reverse=True):
            if spent >= MAX_RELAY_SHRINK or len(victims) == 1:
                break
            spent += 1
            fewer = tuple(x for x in victims if x is not h)
            again = self._relay_trial(fewer)
            if _works(again):
                assert again is not None
                victims, trial = fewer, again
        return victims, trial

    # ---- one device: every usable placement, once ---------------------------------------------
    def one_device(self) -> Advice:
        ask = self.pod.devices()[0][2]
        sets: dict[tuple[str, tuple[str, ...]], tuple[tuple[int, int, int], int, tuple[Holder, ...]]] = {}
        usable: dict[tuple[int, int], list[Placement]] = {}  # (id of profiles, memory) -> placements
        top: tuple[int, int, int] | None = None  # the leading terms of the cheapest set so far
        for i, node in enumerate(self.fleet):
            for g in node.gpus:
                for p in _usable_placements(self.pod, g, ask, usable):
                    found_here = self.overlapping(node, g, p)
                    if found_here is None:
                        continue
                    victims = found_here[1]
                    group = within_budgets(victims, self.budgets)
                    if group:  # before it may prune dearer sets: a blocked set is no cheapest
                        self.blocked.add(group)
                        continue
                    quick = _quick(victims)
                    if top is not None and quick[0] > top[0] and not self.require_homes:
                        continue  # a more important pod: never cheaper, whatever it loses
                    top = quick if top is None or quick < top else top
                    sets.setdefault((node.name, found_here[0]), (quick, i, victims))
        for quick, i, victims in sorted(sets.values(), key=lambda s: s[0]):
            if self.best is not None and self._past(quick):
                break
            node = self.fleet[i]
            bound = cost(node.name, victims, self.now)
            if not self.beaten(bound):
                self.offer(node, victims, bound)
        return self.advice(1)

    # ---- several devices: uniform-cost search per node, capped --------------------------------
    def many_devices(self, max_checks: int) -> Advice:
        checks, now = 0, self.now
        heap: list[tuple[Cost, int, int, tuple[int, ...]]] = []  # (cost, node index, next candidate, set)
        pools: list[list[Holder]] = []
        for i, node in enumerate(self.fleet):
            pool = sorted((h for h in node.holders if h.candidate), key=lambda h: cost(node.name, (h,), now))
            pools.append(pool)
            if not pool:
                continue
            if checks >= max_checks:
                return self._capped(pools, checks, max_checks)
            checks += 1  # can the pod fit at all once every candidate here is gone?
            if _place(self.pod, _without(node.gpus, pool)):
                heapq.heappush(heap, (cost(node.name, (), now), i, 0, ()))
        while heap:
            bound, i, _, chosen = heap[0]
            if self.beaten(bound):
                break  # every set left costs at least the best found
            heapq.heappop(heap)
            if checks >= max_checks:
                return self._capped(pools, checks, max_checks)
            victims = tuple(pools[i][k] for k in chosen)
            if chosen:
                if within_budgets(victims, self.budgets):
                    self.blocked.add(within_budgets(victims, self.budgets))
                    continue  # every superset breaks the same budget
                checks += 1
                if _place(self.pod, _without(self.fleet[i].gpus, victims)) is not None:
                    self.offer(self.fleet[i], victims, bound)
            for k in range(chosen[-1] + 1 if chosen else 0, len(pools[i])):
                bigger = (*chosen, k)
                heapq.heappush(
                    heap, (cost(self.fleet[i].name, (pools[i][j] for j in bigger), now), i, k, bigger)
                )
        return self.advice(checks)

    def _capped(self, pools: list[list[Holder]], checks: int, allowance: int) -> Advice:
        """Past the cap: the best set found so far, or a re-laid region's (`relay`), or else the greedy
        one; not proven cheapest."""
        self.relay()
        if self.best is not None:
            return self.advice(checks, exact=False)
        found = _greedy(self.pod, self.fleet, pools, self.budgets, self.now, checks, allowance)
        if not found.found:
            return found
        node = next(n for n in self.fleet if n.name == found.node)
        placed = self.homes.place(self.pod, node.name, found.victims)
        lost = len(found.victims) if placed is None else sum(m.plan is None for m in placed[1])
        if self.require_homes and lost:
            return _none(set(), found.checks, True, 1)
        return replace(found, moves=() if placed is None else placed[1])


def _left_beside(pod: PodRequest, node: _Node, victims: Sequence[Holder]) -> dict[str, int]:
    """The slices the set's GPUs keep taken once it is freed and the pod placed on its node (the
    engine on that node alone; the other replacements not placed)."""
    after = _without(node.gpus, victims)
    plan = _place(pod, after)
    taken = {
        g.uuid: g.occupied_mask for g in after if any(u == g.uuid for h in victims for u, _ in h.placements)
    }
    for d in plan.devices if plan is not None else ():
        if d.gpu_uuid in taken:
            taken[d.gpu_uuid] |= d.placement.mask
    return taken


def _owners(holders: Iterable[Holder]) -> dict[tuple[str, Placement], Holder]:
    return {(uuid, p): h for h in holders for uuid, p in h.placements}


def _quick(victims: Sequence[Holder]) -> tuple[int, int, int]:
    """The leading terms of `cost` with none lost (highest priority, count, priority sum)."""
    priorities = [h.priority for h in victims]
    return (max(priorities, default=-(1 << 62)), len(priorities), sum(priorities))


def _usable_placements(
    pod: PodRequest, g: GpuState, ask: Memory, memo: dict[tuple[int, int], list[Placement]]
) -> list[Placement]:
    """Every placement of a covering profile the engine could give this device on this GPU, if free.

    `memo` holds the answer per (published profiles, memory asked) for one advice: GPUs of a node
    share their profiles, so most GPUs cost a lookup.
    """
    if not g.healthy or g.cordoned or not g.profiles:
        return []
    if pod.type_exclusion(g.type) is not None or pod.uuid_exclusion(g.uuid) is not None:
        return []
    mem = memory_on(ask, g.memory_mb)
    key = (id(g.profiles), -1 if mem is None else mem)
    found = memo.get(key)
    if found is None:
        pset = profile_set(g.profiles)
        found = memo[key] = sorted(
            {
                p
                for _, i in candidate_order(pset.profiles, mem, pod.preference)
                for p in pset.profiles[i].placements
                if p.size > 0
            }
        )
    return found


def _overlapping(
    g: GpuState, p: Placement, owners: Mapping[tuple[str, Placement], Holder]
) -> tuple[Holder, ...] | None:
    """The pods whose placements on `g` overlap `p`; None when one of them may not go (or no pod owns it)."""
    out: dict[str, Holder] = {}
    for q in g.occupied:
        if q.size <= 0 or not q.mask & p.mask:
            continue
        h = owners.get((g.uuid, q))
        if h is None or not h.candidate:
            return None  # a leftover, an in-flight reservation or a pod that must stay
        out[h.name] = h
    return tuple(sorted(out.values(), key=lambda h: h.name))


def _none(blocked: set[str], checks: int, capped: bool = False, homeless: int = 0) -> Advice:
    strands = "evicts a pod with no other home (move-only)"
    if blocked:
        why = (
            "every set that would place it is blocked by a PodDisruptionBudget ("
            + ", ".join(sorted(blocked))
            + ")"
            + (f" or {strands}" if homeless else "")
        )
    elif capped:
        why = f"no set found within the search limit ({checks} placement checks)"
    elif homeless:
        why = f"every set that would place it {strands}"
    else:
        why = "no set of running MIG pods that may be removed would place it"
    return Advice(exact=not capped, checks=checks, why_none=why, blocked_by_budget=tuple(sorted(blocked)))


def _greedy(
    pod: PodRequest,
    fleet: list[_Node],
    pools: list[list[Holder]],
    budgets: Mapping[str, int],
    now: float,
    checks: int,
    allowance: int,
) -> Advice:
    """Past the cap: per node, start from every candidate and drop the costliest while the pod fits.

    Spends at most `allowance` more engine calls (stopping at the first node with a set once spent).
    """
    pools = pools + [
        sorted((h for h in n.holders if h.candidate), key=lambda h: cost(n.name, (h,), now))
        for n in fleet[len(pools) :]
    ]
    best: tuple[Cost, int, tuple[Holder, ...], Plan] | None = None
    limit = checks + allowance
    for i, node in enumerate(fleet):
        if checks >= limit and best is not None:
            break
        if checks >= limit + allowance:
            break
        keep = list(pools[i])
        plan = _place(pod, _without(node.gpus, keep)) if keep else None
        if plan is None:
            continue
        for h in sorted(keep, key=lambda h: cost(node.name, (h,), now), reverse=True):
            trial = [x for x in keep if x is not h]
            fits = _place(pod, _without(node.gpus, trial)) if trial else None
            checks += 1
            if fits is not None:
                keep, plan = trial, fits
        if within_budgets(keep, budgets):
            continue
        c = cost(node.name, keep, now)
        if best is None or c < best[0]:
            best = (c, i, tuple(keep), plan)
    if best is None:
        return _none(set(), checks, capped=True)
    _, i, victims, plan = best
    return Advice(victims, fleet[i].name, plan, False, checks)


# ---- saying it --------------------------------------------------------------------------------


def _where(plan: Plan) -> str:
    return ", ".join(f"{d.profile} on {d.gpu_uuid} at {d.placement}" for d in plan.devices)


def advice_text(advice: Advice) -> str:
    """One line for people: which pods to remove, on which node, what the pod then gets, and per
    removed pod whether it is lost (first: what an operator most needs to see) or moves, and where,
    in the order to evict them (a chain's pods on other nodes are named with their nodes)."""
    if not advice.found:
        return f"defrag: {advice.why_none}" if advice.why_none else ""
    nodes = sorted({h.node for h in advice.victims}, key=lambda n: (n != advice.node, n))
    if nodes == [advice.node]:
        names = f"on {advice.node} (" + ", ".join(h.name for h in advice.victims) + ")"
        landing = ""
    else:  # a chain: pods on other nodes move out of the way of a pod that moves
        by_node = [", ".join(h.name for h in advice.victims if h.node == n) + f" on {n}" for n in nodes]
        names, landing = "(" + "; ".join(by_node) + ")", f" on {advice.node}"
    where = f"{landing} and get {_where(advice.plan)}" if advice.plan is not None else landing
    proof = "" if advice.exact else " (search capped: not proven cheapest)"
    count = len(advice.victims)
    fates = []
    lost = [m.victim for m in advice.moves if m.plan is None]
    if lost:
        fates.append(
            "evicts "
            + ", ".join(f"{h.name} ({'no other home' if h.request else 'not recreated'})" for h in lost)
        )
    moved = [m for m in advice.moves if m.plan is not None]
    if moved:
        fates.append(
            "moves "
            + ", ".join(f"{m.victim.name} to {m.plan.node} ({_where(m.plan)})" for m in moved if m.plan)
        )
    tail = "; " + "; ".join(fates) if fates else ""
    return f"defrag: removing {count} pod(s) {names} would let it be placed{where}{proof}{tail}"


MAX_ADVICE_TEXT = 1024  # what goes into an annotation or an event line


def bounded(text: str, limit: int = MAX_ADVICE_TEXT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ---- reading pods and PodDisruptionBudgets (plain Kubernetes JSON) -------------------------------


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    labels = metadata_of(obj).get("labels")
    return labels if isinstance(labels, Mapping) else {}


def pod_priority(pod: Mapping[str, Any]) -> int:
    """spec.priority (set by the API server from the PriorityClass); 0 when absent or unreadable."""
    spec = pod.get("spec")
    value = spec.get("priority") if isinstance(spec, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _epoch(text: Any) -> float | None:
    if not isinstance(text, str) or len(text) > 40:
        return None
    try:
        return float(calendar.timegm(time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return None


def pod_started(pod: Mapping[str, Any]) -> float:
    """When the pod started (status.startTime, else its creation), epoch seconds; 0 when unknown."""
    status = pod.get("status")
    start = _epoch(status.get("startTime")) if isinstance(status, Mapping) else None
    return start if start is not None else (_epoch(metadata_of(pod).get("creationTimestamp")) or 0.0)


_PINNED_KINDS = ("DaemonSet",)  # recreated on the same node only: the advisor does not move them


def replacement_request(pod: Mapping[str, Any], names: ResourceNames) -> PodRequest | None:
    """What the pod's replacement asks for, when its controller recreates it after an eviction (an
    ownerReference with controller: true, not a DaemonSet, which is pinned to its node); None for a
    bare pod, a pinned one, or a request that cannot be read (the advisor then counts it lost)."""
    owners = metadata_of(pod).get("ownerReferences")
    if not isinstance(owners, list) or len(owners) > 64:
        return None
    controllers = [o for o in owners if isinstance(o, Mapping) and o.get("controller") is True]
    if len(controllers) != 1 or controllers[0].get("kind") in _PINNED_KINDS:
        return None
    try:
        return gpu_request(pod, names)
    except (RequestError, TypeError, ValueError, AttributeError):
        return None


def opted_in(pod: Mapping[str, Any]) -> bool:
    """The pod carries `dynmig.io/evictable: "true"`: the defrag controller may evict it."""
    annotations = metadata_of(pod).get("annotations")
    return isinstance(annotations, Mapping) and str(annotations.get(EVICTABLE, "")).strip().lower() == "true"


_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def selects(selector: Any, labels: Mapping[str, Any]) -> bool:
    """A PodDisruptionBudget's label selector; empty or unreadable matches nothing (the eviction rule)."""
    if not isinstance(selector, Mapping):
        return False
    match = selector.get("matchLabels") or {}
    exprs = selector.get("matchExpressions") or []
    if not isinstance(match, Mapping) or not isinstance(exprs, list) or not (match or exprs):
        return False
    if any(labels.get(k) != v for k, v in match.items()):
        return False
    for e in exprs:
        if not isinstance(e, Mapping) or e.get("operator") not in _OPERATORS:
            return False
        key, op, values = str(e.get("key")), e.get("operator"), e.get("values") or []
        present = key in labels
        if (
            (op == "In" and labels.get(key) not in values)
            or (op == "NotIn" and present and labels.get(key) in values)
            or (op == "Exists" and not present)
            or (op == "DoesNotExist" and present)
        ):
            return False
    return True


def _whole(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclass(frozen=True)
class Budgets:
    """PodDisruptionBudgets as the advisor needs them: which select a pod, how many more may go."""

    selectors: tuple[tuple[str, str, Any], ...] = ()  # (namespace, "namespace/name", selector)
    allowed: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_objects(cls, pdbs: Iterable[Mapping[str, Any]]) -> Budgets:
        selectors, allowed = [], {}
        for pdb in pdbs:
            meta, spec, status = metadata_of(pdb), pdb.get("spec"), pdb.get("status")
            key = f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"
            selectors.append(
                (
                    str(meta.get("namespace") or ""),
                    key,
                    spec.get("selector") if isinstance(spec, Mapping) else None,
                )
            )
            status = status if isinstance(status, Mapping) else {}
            left = status.get("disruptionsAllowed")
            stale = _whole(status.get("observedGeneration")) < _whole(meta.get("generation"))
            allowed[key] = 0 if stale else _whole(left)
        return cls(tuple(selectors), allowed)

    def groups(self, pod: Mapping[str, Any]) -> tuple[str, ...]:
        namespace, labels = metadata_of(pod).get("namespace") or "", _labels(pod)
        return tuple(key for ns, key, sel in self.selectors if ns == namespace and selects(sel, labels))
