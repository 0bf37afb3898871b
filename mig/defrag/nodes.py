"""The fleet as the defrag advisor reads it: nodes with their GPUs and the pods holding them, what
freeing a set leaves, and which pods stand in the way of a placement. See docs/defrag.md.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from mig.defrag.holders import Holder
from mig.placement import GpuState, PlacementIndex, Plan, PodRequest
from mig.placement.occupancy import profile_set
from mig.placement.preference import candidate_order
from mig.placement.request import Memory, memory_on
from mig.types import Placement


@dataclass
class Node:
    name: str
    gpus: list[GpuState]
    holders: list[Holder]


def by_node(
    gpus: Sequence[GpuState], holders: Sequence[Holder], allowed: Collection[str] | None
) -> list[Node]:
    """The nodes of `gpus` (those in `allowed`, or all), by name, each with the holders on it."""
    by: dict[str, Node] = {}
    for g in gpus:
        if allowed is None or g.node in allowed:
            by.setdefault(g.node, Node(g.node, [], [])).gpus.append(g)
    for h in holders:
        if h.node in by:
            by[h.node].holders.append(h)
    return [by[n] for n in sorted(by)]


def without(gpus: Sequence[GpuState], victims: Iterable[Holder]) -> list[GpuState]:
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


def place_on(pod: PodRequest, gpus: Sequence[GpuState]) -> Plan | None:
    """The engine's plan for the pod on these GPUs alone, or None when it does not fit."""
    result = PlacementIndex(gpus).plan(pod)
    return result if isinstance(result, Plan) and result.devices else None


def in_the_way(plan: Plan, victims: Iterable[Holder]) -> bool:
    """Every victim holds a slice the plan gives the pod."""
    given = [(d.gpu_uuid, d.placement.mask) for d in plan.devices]
    return all(any(u == gu and p.mask & mask for u, p in h.placements for gu, mask in given) for h in victims)


def owners(holders: Iterable[Holder]) -> dict[tuple[str, Placement], Holder]:
    """Who holds each (GPU UUID, placement)."""
    return {(uuid, p): h for h in holders for uuid, p in h.placements}


def overlapping(
    g: GpuState, p: Placement, owned: Mapping[tuple[str, Placement], Holder]
) -> tuple[Holder, ...] | None:
    """The pods whose placements on `g` overlap `p`; None when one of them may not go (or no pod owns it)."""
    out: dict[str, Holder] = {}
    for q in g.occupied:
        if q.size <= 0 or not q.mask & p.mask:
            continue
        h = owned.get((g.uuid, q))
        if h is None or not h.candidate:
            return None  # a leftover, an in-flight reservation or a pod that must stay
        out[h.name] = h
    return tuple(sorted(out.values(), key=lambda h: h.name))


def usable_placements(
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


def names_gpus(pod: PodRequest) -> bool:
    """The request names GPUs by UUID (to use or to avoid)."""
    return bool(pod.use_uuids or pod.nouse_uuids)


def filters_gpus(pod: PodRequest) -> bool:
    """The request names GPUs by UUID or by type (to use or to avoid)."""
    return bool(pod.use_uuids or pod.nouse_uuids or pod.use_types or pod.nouse_types)
