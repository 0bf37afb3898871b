"""Defrag advice: the cheapest set of running MIG pods whose removal would let a pending pod be placed.

Pure (no I/O): the scheduler hands in the fleet as the placement engine sees it (`GpuState`s with
their occupied placements), the running pods that hold those placements, and how many more pods
each PodDisruptionBudget lets go; the advisor answers with a set, or why there is none.

Cost of a set (lower is better, first difference wins), the same for every caller:
1. the highest priority in the set (never disturb more important work than needed),
2. how many pods,
3. the sum of their priorities,
4. how long they have run in total (younger pods lose less work),
then the node name and the pods' names, so equal costs give the same answer every time.

A set is legal when every pod in it is a candidate (the caller decides: e.g. only pods that opted in
and have a lower priority than the pending one), no PodDisruptionBudget group loses more pods than it
still allows, and with the set's placements freed the placement engine itself places the pod on that
node (so the advice is exactly what the scheduler would then do).

Search. The pod lands on one node, so a set lies on one node. A one-device pod needs one free
placement: for every placement the engine could use, the pods overlapping it are the only set that
frees it and any set that works contains one of these, so the cheapest is found exactly by looking at
every placement once (linear in the fleet). A multi-device pod is searched per node in order of
cost (uniform-cost search over sets: each set is tried only after every cheaper one, so the first
that places the pod is the cheapest); the work is capped (`max_checks` engine calls) and, once
capped, the advice falls back to a greedy set (every candidate on the node, then each dropped while
the pod still fits) and says it is not proven cheapest.
"""

from __future__ import annotations

import calendar
import heapq
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from mig.annotations import EVICTABLE
from mig.placement import GpuState, PlacementIndex, Plan, PodRequest
from mig.placement.occupancy import profile_set
from mig.placement.preference import candidate_order
from mig.placement.request import Memory, memory_on
from mig.pods import metadata_of
from mig.types import Placement

MAX_CHECKS = 400  # engine calls per advice for multi-device pods; ~1 ms each on an 8-GPU node


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


Cost = tuple[int, int, int, float, str, tuple[str, ...]]


def cost(node: str, victims: Iterable[Holder], now: float) -> Cost:
    """The cost of removing these pods from `node` (see the module docstring); lower is better."""
    pods = sorted(victims, key=lambda h: h.name)
    if not pods:
        return (-(1 << 62), 0, 0, 0.0, node, ())
    return (
        max(h.priority for h in pods),
        len(pods),
        sum(h.priority for h in pods),
        sum(max(0.0, now - h.started) for h in pods),
        node,
        tuple(h.name for h in pods),
    )


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

    @property
    def found(self) -> bool:
        return bool(self.victims)


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
) -> Advice:
    """The cheapest legal set of `holders` whose removal lets the engine place `pod` (see module doc).

    `known_unplaceable`: the caller already asked the engine (e.g. its live index) and the pod does
    not fit now, so the advisor does not build an index of the whole fleet to ask again.
    """
    budgets = budgets or {}
    if not pod.devices():
        return Advice(why_none="the pod asks for no MIG device")
    fleet = _nodes(gpus, holders, nodes)
    if not known_unplaceable and _place(pod, [g for n in fleet for g in n.gpus]) is not None:
        return Advice(why_none="the pod fits without removing anything")
    search = _one_device if pod.device_count == 1 else _many_devices
    return search(pod, fleet, budgets, now, max_checks)


# ---- one device: every usable placement, once -----------------------------------------------


def _one_device(
    pod: PodRequest, fleet: list[_Node], budgets: Mapping[str, int], now: float, _: int
) -> Advice:
    ask = pod.devices()[0][2]
    best: tuple[Cost, _Node, tuple[Holder, ...]] | None = None
    blocked: set[str] = set()
    usable: dict[tuple[int, int], list[Placement]] = {}  # (id of profiles, memory) -> placements
    for node in fleet:
        owners = _owners(node.holders)
        for g in node.gpus:
            for p in _usable_placements(pod, g, ask, usable):
                victims = _overlapping(g, p, owners)
                if victims is None:
                    continue
                if best is not None and _quick(victims) > best[0][:3]:
                    continue  # dearer on the leading terms: no need for the full cost or the budgets
                group = within_budgets(victims, budgets)
                if group:
                    blocked.add(group)
                    continue
                c = cost(node.name, victims, now)
                if best is None or c < best[0]:
                    best = (c, node, victims)
    if best is None:
        return _none(blocked, 0)
    node, victims = best[1], best[2]
    plan = _place(pod, _without(node.gpus, victims))
    return Advice(victims, node.name, plan, True, 1, "", tuple(sorted(blocked)))


def _owners(holders: Iterable[Holder]) -> dict[tuple[str, Placement], Holder]:
    return {(uuid, p): h for h in holders for uuid, p in h.placements}


def _quick(victims: Sequence[Holder]) -> tuple[int, int, int]:
    """The leading terms of `cost` (highest priority, count, priority sum), cheap to compare first."""
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


def _none(blocked: set[str], checks: int, capped: bool = False) -> Advice:
    if blocked:
        why = (
            "every set that would place it is blocked by a PodDisruptionBudget ("
            + ", ".join(sorted(blocked))
            + ")"
        )
    elif capped:
        why = f"no set found within the search limit ({checks} placement checks)"
    else:
        why = "no set of running MIG pods that may be removed would place it"
    return Advice(exact=not capped, checks=checks, why_none=why, blocked_by_budget=tuple(sorted(blocked)))


# ---- several devices: uniform-cost search per node, capped ----------------------------------


def _many_devices(
    pod: PodRequest, fleet: list[_Node], budgets: Mapping[str, int], now: float, max_checks: int
) -> Advice:
    checks, blocked = 0, set()
    heap: list[tuple[Cost, int, int, tuple[int, ...]]] = []  # (cost, node index, next candidate, set)
    pools: list[list[Holder]] = []
    for i, node in enumerate(fleet):
        pool = sorted((h for h in node.holders if h.candidate), key=lambda h: cost(node.name, (h,), now))
        pools.append(pool)
        if not pool:
            continue
        if checks >= max_checks:
            return _greedy(pod, fleet, pools, budgets, now, checks, max_checks)
        checks += 1  # can the pod fit at all once every candidate here is gone?
        if _place(pod, _without(node.gpus, pool)):
            heapq.heappush(heap, (cost(node.name, (), now), i, 0, ()))
    while heap:
        if checks >= max_checks:
            return _greedy(pod, fleet, pools, budgets, now, checks, max_checks)
        _, i, _, chosen = heapq.heappop(heap)
        victims = tuple(pools[i][k] for k in chosen)
        if chosen:
            group = within_budgets(victims, budgets)
            if group:
                blocked.add(group)
                continue  # every superset breaks the same budget
            checks += 1
            plan = _place(pod, _without(fleet[i].gpus, victims))
            if plan is not None:
                return Advice(victims, fleet[i].name, plan, True, checks, "", tuple(sorted(blocked)))
        for k in range(chosen[-1] + 1 if chosen else 0, len(pools[i])):
            bigger = (*chosen, k)
            heapq.heappush(heap, (cost(fleet[i].name, (pools[i][j] for j in bigger), now), i, k, bigger))
    return _none(blocked, checks)


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


def advice_text(advice: Advice) -> str:
    """One line for people: which pods to remove, on which node, and what the pod then gets."""
    if not advice.found:
        return f"defrag: {advice.why_none}" if advice.why_none else ""
    names = ", ".join(h.name for h in advice.victims)
    where = ""
    if advice.plan is not None:
        where = " and get " + ", ".join(
            f"{d.profile} on {d.gpu_uuid} at {d.placement}" for d in advice.plan.devices
        )
    proof = "" if advice.exact else " (search capped: not proven cheapest)"
    count = len(advice.victims)
    return f"defrag: removing {count} pod(s) on {advice.node} ({names}) would let it be placed{where}{proof}"


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
