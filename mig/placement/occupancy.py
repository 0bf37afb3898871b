"""Occupancy of one GPU as a bitmask over its placement axis, and per-profile-set lookup tables.

Every GPU that publishes the same profiles shares one `ProfileSet`. Its tables are keyed by the
occupancy mask (at most 12 bits on real GPUs, so at most 4096 entries) and filled lazily, so the
scheduler's hot path is a dictionary lookup per (profile set, mask), not a walk over placements.

Fragmentation score. Placing an instance costs the GPU two things, compared in this order:

1. *Usable capacity*: the most compute slices that legal, disjoint placements of the published
   profiles can still hold in the free slices (an exact packing over the placements, memoized per
   mask), as a share of what the empty GPU holds. Placing an instance costs at least its own compute
   slices, more when it strands others: on an A100, a 1g at slice 2 leaves slice 1 to a 1g but kills
   the 2g at 0:2 and 2:2 without costing capacity, while a 3g at 4:4 after a 1g at 0 leaves 1-3 for
   three 1g only. Slice 7 of an A100 or H100 (covered only by 3g at 4:4 and 7g) is memory without
   compute of its own: a 1g at 6 costs one compute slice like a 1g anywhere, so three 2g still fit
   beside it (HAMi's and NVIDIA's own order put the first 1g there). A request goes to the model where
   it uses the least of a GPU: a 1g is 1/7 of an A100 but 1/4 of an RTX PRO 6000. Under load this is
   what decides how many pods fit at all.
2. *Shape*: the *placeable value* of a mask is the sum, over every published profile and every one
   of its placements still free, of a weight that grows with the cube of the placement's share of the
   axis: (8·size/axis)³, i.e. 1, 8, 64, 512 for 1-, 2-, 4- and 8-slice placements on an 8-slice GPU.
   Choosing the lowest loss of value keeps big placements (and big profiles) available: one more
   free 4-slice placement is worth more than all the 1-slice placements it could hold. Because the
   weight depends on the share of the axis, losses are comparable across GPU models. On an A100 a
   first 1g goes to slice 6 (it kills the 3g at 4:4 and the 7g, where a 1g at 0 would also kill the
   2g at 0:2 and the 3g at 0:4), the next to 4 and 5, then 0 to 3: NVIDIA's driver order.
   The value is kept in two parts, compared apart (`mig.placement.plan.fragmentation` puts the
   profile's memory between them): the *large* value, of placements spanning at least half the axis
   (an A100's 3g and 7g, an RTX PRO 6000's 2g and 4g), and the whole value. Losing a half-GPU
   placement is what strands the requests that need one; between candidates losing the same large
   value, the smaller placements they shape matter less than leaving the larger-memory instances to
   the requests that need their memory.

(A demand-weighted shape score, weighting placements by how often each profile was asked for, was
measured in bench/placement.py and refused more pods: the small profiles asked for most are also the
easiest to place, so weighting by demand gave away the large placements.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from mig.placement.preference import Rank, candidate_order, default_sort_key
from mig.placement.request import PublishedProfile
from mig.types import Placement

_MEMO_LIMIT = 4096  # distinct (request, preference) keys kept per profile set
_SHARE = 5040  # capacity is counted in 1/5040 of a GPU: exact for GPUs of 1-10 and 12 compute slices


def _weight(size: int, axis: int) -> int:
    return round((8 * size / axis) ** 3 * 1000)


def free_slices(mask: int, axis: int) -> list[int]:
    return [i for i in range(axis) if not mask >> i & 1]


@dataclass(frozen=True)
class Choice:
    """The best free placement of one profile at one mask, and what it costs (lower is better).

    `loss` is (usable compute capacity lost, in 1/5040 of the GPU; large placeable value destroyed;
    placeable value destroyed): see the module docstring. Tuples compare in that order.
    """

    placement: Placement
    loss: tuple[int, int, int]
    risk: int = 0


class ProfileSet:
    """The published profiles of a GPU (in default order) with lazily memoized occupancy tables."""

    def __init__(self, profiles: Sequence[PublishedProfile]):
        self.profiles: tuple[PublishedProfile, ...] = tuple(sorted(profiles, key=default_sort_key))
        self.axis: int = max((p.end for pr in self.profiles for p in pr.placements), default=0)
        self._value: dict[int, tuple[int, int, int]] = {}
        self._capacity: dict[int, int] = {}
        self._best: dict[tuple[int, int], Choice | None] = {}
        self._slots: dict[int, tuple[int, ...]] = {}
        self._at_risk: dict[tuple[int, int, tuple[int, ...]], Choice | None] = {}
        self._order: dict[tuple[int | None, tuple[str, ...]], tuple[tuple[Rank, int], ...]] = {}

    @cached_property
    def _weighted(self) -> tuple[tuple[int, int, bool], ...]:
        """(placement mask, weight, spans at least half the axis) of every (profile, placement) pair."""
        return tuple(
            (p.mask, _weight(p.size, self.axis), 2 * p.size >= self.axis)
            for pr in self.profiles
            for p in pr.placements
            if p.size > 0
        )

    @cached_property
    def full_mask(self) -> int:
        return (1 << self.axis) - 1

    @cached_property
    def _by_low_slice(self) -> tuple[tuple[tuple[int, int], ...], ...]:
        """Per slice s: (placement mask, compute slices) of every placement whose lowest slice is s."""
        rows: list[list[tuple[int, int]]] = [[] for _ in range(self.axis)]
        for pr in self.profiles:
            for p in pr.placements:
                if p.size > 0:
                    rows[p.start].append((p.mask, pr.slice_count))
        return tuple(tuple(r) for r in rows)

    def capacity(self, mask: int) -> int:
        """The most compute slices disjoint legal placements can hold in the free slices of `mask`."""
        hit = self._capacity.get(mask)
        if hit is not None:
            return hit
        free = ~mask & self.full_mask
        if not free:
            best = 0
        else:
            low = (free & -free).bit_length() - 1
            best = self.capacity(mask | 1 << low)  # the lowest free slice stays empty
            for m, compute in self._by_low_slice[low]:
                if not m & mask:
                    best = max(best, compute + self.capacity(mask | m))
        self._capacity[mask] = best
        return best

    def value(self, mask: int) -> tuple[int, int, int]:
        """(usable capacity, large placeable value, placeable value) of what is still free at this
        mask; see the module docstring."""
        v = self._value.get(mask)
        if v is None:
            value = large = 0
            for m, w, half in self._weighted:
                if not m & mask:
                    value += w
                    large += w if half else 0
            whole = self.capacity(0) or 1
            v = self._value[mask] = (self.capacity(mask) * _SHARE // whole, large, value)
        return v

    def best(self, mask: int, profile: int) -> Choice | None:
        """Lowest-loss free placement of profile index `profile` at `mask` (ties: lower start)."""
        key = (mask, profile)
        if key in self._best:
            return self._best[key]
        cap, large, value = self.value(mask)
        found: Choice | None = None
        for p in sorted(self.profiles[profile].placements):
            if p.size <= 0 or p.mask & mask:
                continue
            cap_after, large_after, value_after = self.value(mask | p.mask)
            loss = (cap - cap_after, large - large_after, value - value_after)
            if found is None or loss < found.loss:
                found = Choice(p, loss)
        self._best[key] = found
        return found

    def share(self, profile: int) -> int:
        """Profile index `profile`'s compute slices over what the empty GPU holds, in 1/5040 of a GPU:
        what one instance of it costs this model (`mig.placement.plan.fragmentation` ranks by it first)."""
        return self.profiles[profile].slice_count * _SHARE // (self.capacity(0) or 1)

    @cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.profiles)

    def slots(self, mask: int) -> tuple[int, ...]:
        """Per profile: how many instances of it alone the free slices of `mask` still hold (the most
        disjoint free placements; greedy by end, exact for intervals)."""
        hit = self._slots.get(mask)
        if hit is None:
            counts = []
            for pr in self.profiles:
                taken, n = mask, 0
                for p in sorted((p for p in pr.placements if p.size > 0), key=lambda p: (p.end, p.start)):
                    if not p.mask & taken:
                        taken |= p.mask
                        n += 1
                counts.append(n)
            hit = self._slots[mask] = tuple(counts)
        return hit

    def risk(self, mask: int, placement: Placement, weights: tuple[int, ...]) -> int:
        """The price of the slots a placement destroys: per profile, slots before minus after, times
        its weight (`mig.placement.demand.risk_weights`)."""
        before, after = self.slots(mask), self.slots(mask | placement.mask)
        return sum(w * (b - a) for w, b, a in zip(weights, before, after, strict=True))

    def best_at_risk(self, mask: int, profile: int, weights: tuple[int, ...]) -> Choice | None:
        """Lowest (risk, loss) free placement of profile index `profile` at `mask` (ties: lower start)."""
        key = (mask, profile, weights)
        if key in self._at_risk:
            return self._at_risk[key]
        if len(self._at_risk) >= 16 * _MEMO_LIMIT:
            self._at_risk.clear()
        cap, large, value = self.value(mask)
        found: Choice | None = None
        for p in sorted(self.profiles[profile].placements):
            if p.size <= 0 or p.mask & mask:
                continue
            cap_after, large_after, value_after = self.value(mask | p.mask)
            c = Choice(
                p, (cap - cap_after, large - large_after, value - value_after), self.risk(mask, p, weights)
            )
            if found is None or (c.risk, c.loss) < (found.risk, found.loss):
                found = c
        self._at_risk[key] = found
        return found

    def offered(self, mix: tuple[tuple[int | None, float], ...]) -> tuple[float, ...]:
        """Per profile: the work `mix` offers it on a GPU of this set (each ask on its smallest covering
        profile, weighted by that profile's share of the axis); with no mix, one instance each. Only
        profiles spanning at least half the axis are offered work (see below)."""
        sizes = [max((p.size for p in pr.placements), default=0) for pr in self.profiles]
        # only placements of at least half the axis are priced: smaller ones are the capacity and
        # memory criteria's to place (they substitute across models, which one model's count misses)
        shares = [s / (self.axis or 1) if 2 * s >= self.axis else 0.0 for s in sizes]
        if not mix:
            return tuple(shares)
        out = [0.0] * len(self.profiles)
        for ask, work in mix:
            order = self.order(ask, ())
            if order:
                idx = order[0][1]
                out[idx] += work * shares[idx]
        return tuple(out)

    def free_placements(self, mask: int, profile: int) -> list[Placement]:
        return [p for p in sorted(self.profiles[profile].placements) if p.size > 0 and not p.mask & mask]

    def order(self, memory_mib: int | None, preference: tuple[str, ...]) -> tuple[tuple[Rank, int], ...]:
        """Memoized `candidate_order` for this profile set."""
        key = (memory_mib, preference)
        hit = self._order.get(key)
        if hit is None:
            if len(self._order) >= _MEMO_LIMIT:
                self._order.clear()
            hit = self._order[key] = candidate_order(self.profiles, memory_mib, preference)
        return hit


_SETS: dict[tuple[PublishedProfile, ...], ProfileSet] = {}


def profile_set(profiles: Sequence[PublishedProfile]) -> ProfileSet:
    """The shared `ProfileSet` for these published profiles (interned: equal sets share tables)."""
    key = tuple(sorted(profiles, key=default_sort_key))
    ps = _SETS.get(key)
    if ps is None:
        ps = _SETS[key] = ProfileSet(key)
    return ps
