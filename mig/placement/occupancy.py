"""Occupancy of one GPU as a bitmask over its placement axis, and per-profile-set lookup tables.

Every GPU that publishes the same profiles shares one `ProfileSet`. Its tables are keyed by the
occupancy mask (at most 12 bits on real GPUs, so at most 4096 entries) and filled lazily, so the
scheduler's hot path is a dictionary lookup per (profile set, mask), not a walk over placements.

Fragmentation score. Placing an instance costs the GPU two things, compared in this order:

1. *Usable capacity*: the free slices that some published placement still covers. Placing an
   instance uses its own slices, and may strand others: on an A100 or H100 slice 7 is covered only by
   3g at 4:4 and 7g at 0:8, so a 1g in the upper half leaves slice 7 unusable until something
   leaves, while a 1g in the lower half does not. Capacity is counted as a share of the GPU, so a 1g
   that takes 1 of 8 slices costs less than one that takes 3 of 12, and a request goes to the model
   where it uses the least of a GPU. Under load this is what decides how many pods fit at all.
2. *Shape*: the *placeable value* of a mask is the sum, over every published profile and every one
   of its placements still free, of a weight that grows with the cube of the placement's share of the
   axis: (8·size/axis)³, i.e. 1, 8, 64, 512 for 1-, 2-, 4- and 8-slice placements on an 8-slice GPU.
   Choosing the lowest loss of value keeps big placements (and big profiles) available: one more
   free 4-slice placement is worth more than all the 1-slice placements it could hold. Because the
   weight depends on the share of the axis, losses are comparable across GPU models.

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
_SHARE = 5040  # capacity is counted in 1/5040 of a GPU: exact for axes of 1-10 and 12 slices


def _weight(size: int, axis: int) -> int:
    return round((8 * size / axis) ** 3 * 1000)


def free_slices(mask: int, axis: int) -> list[int]:
    return [i for i in range(axis) if not mask >> i & 1]


@dataclass(frozen=True)
class Choice:
    """The best free placement of one profile at one mask, and what it costs (lower is better).

    `loss` is (usable capacity lost, in 1/5040 of the GPU; placeable value destroyed): see the module
    docstring. Tuples compare in that order.
    """

    placement: Placement
    loss: tuple[int, int]


class ProfileSet:
    """The published profiles of a GPU (in default order) with lazily memoized occupancy tables."""

    def __init__(self, profiles: Sequence[PublishedProfile]):
        self.profiles: tuple[PublishedProfile, ...] = tuple(sorted(profiles, key=default_sort_key))
        self.axis: int = max((p.end for pr in self.profiles for p in pr.placements), default=0)
        self._value: dict[int, tuple[int, int]] = {}
        self._best: dict[tuple[int, int], Choice | None] = {}
        self._order: dict[tuple[int | None, tuple[str, ...]], tuple[tuple[Rank, int], ...]] = {}

    @cached_property
    def _weighted(self) -> tuple[tuple[int, int], ...]:
        """(placement mask, weight) of every (profile, placement) pair."""
        return tuple(
            (p.mask, _weight(p.size, self.axis)) for pr in self.profiles for p in pr.placements if p.size > 0
        )

    @cached_property
    def full_mask(self) -> int:
        return (1 << self.axis) - 1

    def value(self, mask: int) -> tuple[int, int]:
        """(usable capacity, placeable value) of what is still free at this mask; see the module docstring."""
        v = self._value.get(mask)
        if v is None:
            value = covered = 0
            for m, w in self._weighted:
                if not m & mask:
                    value += w
                    covered |= m
            v = self._value[mask] = ((covered & ~mask).bit_count() * _SHARE // self.axis, value)
        return v

    def best(self, mask: int, profile: int) -> Choice | None:
        """Lowest-loss free placement of profile index `profile` at `mask` (ties: lower start)."""
        key = (mask, profile)
        if key in self._best:
            return self._best[key]
        cap, value = self.value(mask)
        found: Choice | None = None
        for p in sorted(self.profiles[profile].placements):
            if p.size <= 0 or p.mask & mask:
                continue
            cap_after, value_after = self.value(mask | p.mask)
            loss = (cap - cap_after, value - value_after)
            if found is None or loss < found.loss:
                found = Choice(p, loss)
        self._best[key] = found
        return found

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
