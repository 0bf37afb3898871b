"""Steered first fit: a node's MIG devices in the order dynmig's engine would take them, one by one.

kube-scheduler's structured allocator takes, for each requested device, the first device in its
pools' slices that matches the request's selectors, is not allocated and whose counters are free
(kubernetes `staging/src/k8s.io/dynamic-resource-allocation/structured/internal/*/allocator_*.go`,
`allocateOne`). It has no device scoring, so the only lever a driver has is which devices it lists
and in what order.

A burst is allocated from one publication: kube-scheduler schedules one pod per cycle, each cycle
counting the devices of the claims allocated before it (in flight or written), and the driver's
republish comes only later (`pkg/scheduler/framework/plugins/dynamicresources/dra_manager.go`,
`allocateddevices.go`). So a profile's list must be good not only for its first device but for
every device after it. `steer` lists, per profile, the **sequence** in which the engine would place
that profile's instances one after another on this node: the engine's best free placement across
the node's GPUs (the fragmentation loss of `occupancy.ProfileSet`, priced by `plan.fragmentation`,
ordered by `plan.rank_key` for the binpack/binpack policy, then GPU order), then its best once that
one is taken, and so on until nothing more fits. First fit over that list places N claims of the
profile where the engine would, one by one: the fullest GPU's best placements first, an empty GPU
broken only when no other GPU has room. Every other free placement of a GPU follows that GPU's last
sequence entry (best first), so a request that fits anywhere still finds a device, and a placement
the sequence expected but another profile's claim took is skipped for the next one on the same GPU.

Occupied placements are not candidates. Devices of the instances that exist are listed apart
(`Steered.allocated`): the allocator only subtracts counters for allocated devices it finds in the
pool's slices, so leaving them out would let it allocate an overlapping placement.

Profiles are listed smallest first (memory, then compute slices), so first fit over a claim that
selects by capacity (`device.capacity[...].memory.compareTo(quantity("9Gi")) >= 0`) takes the
smallest allowed profile that holds it, as the engine would.

Order between GPUs matters only inside one ResourceSlice: kube-scheduler lists slices from an
informer cache (a map: no defined order) and groups them into pools in a map, so the devices of two
slices come in either order. `mig.dra.slices` therefore puts a profile's candidates in one slice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mig.catalog import ProfileSpec
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

    candidates: tuple[tuple[str, tuple[MigDevice, ...]], ...]  # (profile, its free devices in order)
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


Key = tuple[object, ...]
_Sequence = tuple[tuple[tuple[Key, Placement], ...], tuple[Placement, ...]]
_SEQUENCES: dict[tuple[object, ...], _Sequence] = {}
_SEQUENCES_LIMIT = 65536
_REACHABLE_LIMIT = 4096


def _key(ps: ProfileSet, spec: ProfileSpec, mask: int, p: Placement, whole: float, position: int) -> Key:
    """The engine's comparison key of taking `p` on a GPU at `mask` (lower is better)."""
    used = (mask & ps.full_mask).bit_count() / ps.axis if ps.axis else 0.0
    loss = fragmentation(placement_loss(ps, mask, p), whole if p.size >= ps.axis else 0.0, spec.memory_mib)
    return (*rank_key(_BINPACK, (0, 0), loss, 0.0, used, p.start), position)


def _reachable(ps: ProfileSet, mask: int) -> list[int]:
    """The occupancies the engine's own placements (`ProfileSet.best`, any allowed profile, one after
    another) reach from `mask`, nearest first."""
    seen, order, i = {mask}, [mask], 0
    while i < len(order) and len(order) < _REACHABLE_LIMIT:
        m = order[i]
        i += 1
        for k in range(len(ps.profiles)):
            choice = ps.best(m, k)
            if choice is not None and (n := m | choice.placement.mask) not in seen:
                seen.add(n)
                order.append(n)
    return order


def _gpu_order(ps: ProfileSet, spec: ProfileSpec, mask: int, free: list[Placement]) -> list[Placement]:
    """One fixed order of the free placements of `spec` in which the first one still free is the
    engine's choice (`ProfileSet.best`) at every occupancy its placements reach from `mask`, nearest
    occupancies first where two disagree; otherwise by the loss at `mask`."""
    k = ps.names.index(spec.name)
    after: dict[int, set[int]] = {p.mask: set() for p in free}  # placement -> placements it precedes

    def reaches(a: int, b: int) -> bool:
        stack, seen = [a], {a}
        while stack:
            x = stack.pop()
            if x == b:
                return True
            for y in after[x] - seen:
                seen.add(y)
                stack.append(y)
        return False

    chain, m = [], mask  # a run of this profile alone first: identical claims land as the engine's
    while (choice := ps.best(m, k)) is not None:
        chain.append(m)
        m |= choice.placement.mask
    for m in chain + _reachable(ps, mask):
        choice = ps.best(m, k)
        if choice is None or choice.placement.mask not in after:
            continue
        b = choice.placement.mask
        for q in free:
            if q.mask != b and not q.mask & m and q.mask not in after[b] and not reaches(q.mask, b):
                after[b].add(q.mask)
    rank = {p.mask: (placement_loss(ps, mask, p), p.start) for p in free}
    before = {p.mask: sum(p.mask in after[x] for x in after) for p in free}
    by_mask = {p.mask: p for p in free}
    out: list[Placement] = []
    while before:
        ready = min((x for x, n in before.items() if n == 0), key=lambda x: rank[x])
        out.append(by_mask[ready])
        del before[ready]
        for y in after[ready]:
            before[y] -= 1
    return out


def _gpu_sequence(g: Gpu, spec: ProfileSpec, position: int, whole: float) -> _Sequence:
    """On one GPU: the placements of `spec` a run of its claims takes one after another from the
    current occupancy (each with the engine's key when taken), following `_gpu_order`, and the free
    placements that run skips, in that order. Memoized: it depends only on what is in the memo key."""
    memo = (g.model.key, g.allowed, g.mask, spec.name, position, whole)
    hit = _SEQUENCES.get(memo)
    if hit is not None:
        return hit
    ps = _pset(g)
    order = _gpu_order(ps, spec, g.mask, [p for p in spec.placements if p.size > 0 and not p.mask & g.mask])
    mask, taken, rest = g.mask, [], []
    for p in order:
        if p.mask & mask:
            rest.append(p)
            continue
        taken.append((_key(ps, spec, mask, p, whole, position), p))
        mask |= p.mask
    if len(_SEQUENCES) >= _SEQUENCES_LIMIT:
        _SEQUENCES.clear()
    result = _SEQUENCES[memo] = (tuple(taken), tuple(rest))
    return result


def _merged(gpus: Sequence[Gpu], spec_name: str, whole: dict[str, float]) -> tuple[MigDevice, ...]:
    """One profile's list for the node: the GPUs' sequences merged as the engine would place one
    instance after another (the lowest key among the GPUs' next placements first), each GPU's
    leftover placements right after its last sequence entry."""
    runs: list[tuple[Gpu, ProfileSpec, list[tuple[Key, Placement]], tuple[Placement, ...]]] = []
    for position, g in enumerate(gpus):
        spec = next((s for s in g.specs() if s.name == spec_name), None)
        if spec is not None:
            seq, rest = _gpu_sequence(g, spec, position, whole[g.model.key])
            runs.append((g, spec, list(seq), rest))
    order: list[tuple[int, Placement]] = []
    heads = [0] * len(runs)
    while True:
        live = [i for i, run in enumerate(runs) if heads[i] < len(run[2])]
        if not live:
            break
        i = min(live, key=lambda k: runs[k][2][heads[k]][0])
        order.append((i, runs[i][2][heads[i]][1]))
        heads[i] += 1
    out: list[MigDevice] = []
    last = {i: max((n for n, (j, _) in enumerate(order) if j == i), default=-1) for i in range(len(runs))}
    for i in (i for i in range(len(runs)) if last[i] < 0):  # nothing in sequence: leftovers lead
        out.extend(mig_device(runs[i][0], runs[i][1], p) for p in runs[i][3])
    for n, (i, p) in enumerate(order):
        g, spec, _, rest = runs[i]
        out.append(mig_device(g, spec, p))
        if n == last[i]:
            out.extend(mig_device(g, spec, q) for q in rest)
    return tuple(out)


def steer(gpus: Sequence[Gpu]) -> Steered:
    """The node's candidates per profile in the engine's one-by-one order, and its allocated devices."""
    empty_by_model: dict[str, int] = {}
    count_by_model: dict[str, int] = {}
    for g in gpus:
        count_by_model[g.model.key] = count_by_model.get(g.model.key, 0) + 1
        empty_by_model[g.model.key] = empty_by_model.get(g.model.key, 0) + (0 if g.instances else 1)
    # a whole-GPU placement is priced by its model's empty GPUs now (the engine's `whole_gpu_cost`)
    whole = {
        g.model.key: whole_gpu_cost(
            _pset(g).capacity(0), count_by_model[g.model.key], max(1, empty_by_model[g.model.key])
        )
        for g in gpus
    }
    allocated = [d for g in gpus for inst in g.instances if (d := instance_device(g, inst)) is not None]
    # smaller profiles first: a claim selecting by memory (`memory >= 9Gi`) gets the smallest that holds it
    memory: dict[str, tuple[int, int]] = {}
    for g in gpus:
        for spec in g.specs():
            memory[spec.name] = min(
                memory.get(spec.name, (spec.memory_mib, spec.slice_count)),
                (spec.memory_mib, spec.slice_count),
            )
    names = sorted(memory, key=lambda n: (*memory[n], n))
    candidates = tuple((name, devices) for name in names if (devices := _merged(gpus, name, whole)))
    return Steered(candidates, tuple(sorted(allocated, key=lambda d: d.name)))
