"""Steered first fit: a node's MIG devices in the order dynmig's engine prefers them.

kube-scheduler's structured allocator takes, for each requested device, the first device in its
pools' slices that matches the request's selectors, is not allocated and whose counters are free
(kubernetes `staging/src/k8s.io/dynamic-resource-allocation/structured/internal/*/allocator_*.go`,
`allocateOne`). It has no device scoring, so the only lever a driver has is which devices it lists
and in what order. `steer` lists, per profile, the node's free placements best first by the engine's
own ranking (`mig.placement`: the fragmentation loss of `occupancy.ProfileSet`, then `plan.rank_key`'s
binpack/binpack order: fuller GPU, lower start, then GPU order), so first fit takes what the engine
would take on this node.

Pruning. Per GPU and profile it keeps the `per_gpu` best free placements (all free ones when the
profile's placements overlap each other), so a request for up to `per_gpu` devices of one profile
that fits somewhere on the node (that many disjoint free placements, counters allowing) still finds
them. Placements already occupied are not candidates: their counters are taken, first fit would skip
them. Devices of the instances that exist are listed apart (`Steered.allocated`): the allocator only
subtracts counters for allocated devices it finds in the pool's slices, so leaving them out would let
it allocate an overlapping placement.

Order between GPUs matters only inside one ResourceSlice: kube-scheduler lists slices from an
informer cache (a map: no defined order) and groups them into pools in a map, so the devices of two
slices come in either order. `mig.dra.slices` therefore puts a profile's candidates in one slice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mig.dra.devices import Gpu, MigDevice, instance_device, mig_device
from mig.placement import PodRequest, profile_set
from mig.placement.occupancy import ProfileSet
from mig.placement.plan import fragmentation, rank_key, whole_gpu_cost
from mig.placement.published import from_catalog
from mig.types import Placement

_BINPACK = PodRequest(containers=())  # the engine's default policies: binpack nodes, binpack GPUs


@dataclass(frozen=True)
class Steered:
    """A node's devices as steered publishing lists them."""

    candidates: tuple[tuple[str, tuple[MigDevice, ...]], ...]  # (profile, its free devices best first)
    allocated: tuple[MigDevice, ...]  # the devices of the instances that exist

    def devices(self) -> tuple[MigDevice, ...]:
        return tuple(d for _, group in self.candidates for d in group) + self.allocated


def _pset(gpu: Gpu) -> ProfileSet:
    return profile_set(from_catalog(gpu.model, gpu.allowed))


def placement_loss(ps: ProfileSet, mask: int, p: Placement) -> tuple[int, int, int]:
    """The engine's (capacity, large value, value) loss of taking `p` at `mask`: what
    `ProfileSet.best` minimises, for every free placement rather than the best alone."""
    before, after = ps.value(mask), ps.value(mask | p.mask)
    return (before[0] - after[0], before[1] - after[1], before[2] - after[2])


def _overlapping(placements: Sequence[Placement]) -> bool:
    return any(a.overlaps(b) for i, a in enumerate(placements) for b in placements[i + 1 :])


_Ranked = tuple[tuple[str, tuple[tuple[tuple[object, ...], MigDevice], ...]], ...]
_RANKED: dict[tuple[object, ...], _Ranked] = {}
_RANKED_LIMIT = 65536


def _ranked(g: Gpu, position: int, model_gpus: int, model_empty: int, per_gpu: int) -> _Ranked:
    """Per allowed profile of the GPU: its kept free placements as (engine key, device), best first.
    Memoized: a GPU's candidates depend only on what is in the key."""
    memo = (g.minor, g.uuid, g.model.key, g.allowed, g.instances, position, model_gpus, model_empty, per_gpu)
    hit = _RANKED.get(memo)
    if hit is not None:
        return hit
    ps = _pset(g)
    mask = g.mask
    used = (mask & ps.full_mask).bit_count() / ps.axis if ps.axis else 0.0
    out = []
    for spec in g.specs():
        legal = [p for p in spec.placements if p.size > 0]
        ranked = []
        for p in legal:
            if p.mask & mask:
                continue
            whole = 0.0
            if p.size >= ps.axis:  # a whole GPU: the engine prices it by its model's empty GPUs
                whole = whole_gpu_cost(ps.capacity(0), model_gpus, max(1, model_empty))
            loss = fragmentation(placement_loss(ps, mask, p), whole, spec.memory_mib)
            key = (*rank_key(_BINPACK, (0, 0), loss, 0.0, used, p.start), position)
            ranked.append((key, mig_device(g, spec, p)))
        ranked.sort(key=lambda kd: kd[0])
        out.append((spec.name, tuple(ranked if _overlapping(legal) else ranked[:per_gpu])))
    if len(_RANKED) >= _RANKED_LIMIT:
        _RANKED.clear()
    result = _RANKED[memo] = tuple(out)
    return result


def steer(gpus: Sequence[Gpu], per_gpu: int = 2) -> Steered:
    """The node's candidates per profile, best first across its GPUs, and its allocated devices."""
    if per_gpu < 1:
        raise ValueError("per_gpu must be at least 1")
    keyed: dict[str, list[tuple[tuple[object, ...], MigDevice]]] = {}
    empty_by_model: dict[str, int] = {}
    count_by_model: dict[str, int] = {}
    for g in gpus:
        count_by_model[g.model.key] = count_by_model.get(g.model.key, 0) + 1
        empty_by_model[g.model.key] = empty_by_model.get(g.model.key, 0) + (0 if g.instances else 1)
    allocated = []
    for position, g in enumerate(gpus):
        for inst in g.instances:
            d = instance_device(g, inst)
            if d is not None:
                allocated.append(d)
        ranked = _ranked(g, position, count_by_model[g.model.key], empty_by_model[g.model.key], per_gpu)
        for name, keep in ranked:
            keyed.setdefault(name, []).extend(keep)
    candidates = tuple(
        (name, tuple(d for _, d in sorted(group, key=lambda kd: kd[0])))
        for name, group in sorted(keyed.items())
    )
    return Steered(candidates, tuple(sorted(allocated, key=lambda d: d.name)))
