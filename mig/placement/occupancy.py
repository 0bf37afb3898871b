"""Occupancy of one GPU as a bitmask over its placement axis, and per-profile-set lookup tables.

Every GPU that publishes the same profiles shares one `ProfileSet`. Its tables are keyed by the
occupancy mask (at most 12 bits on real GPUs, so at most 4096 entries) and filled lazily, so the
scheduler's hot path is a dictionary lookup per (profile set, mask), not a walk over placements.

Fragmentation score. The *placeable value* of a mask is the sum, over every published profile and
every one of its placements still free, of a weight that grows with the cube of the placement's
share of the axis: (8·size/axis)³, i.e. 1, 8, 64, 512 for 1-, 2-, 4- and 8-slice placements on an
8-slice GPU. The *loss* of placing an instance is how much placeable value it destroys. Choosing the
lowest loss keeps big placements (and big profiles) available: one more free 4-slice placement is
worth more than all the 1-slice placements it could hold. Because the weight depends on the share of
the axis, losses are comparable across GPU models.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from mig.placement.preference import Rank, candidate_order, default_sort_key
from mig.placement.request import PublishedProfile
from mig.types import Placement

_MEMO_LIMIT = 4096  # distinct (request, preference) keys kept per profile set


def _weight(size: int, axis: int) -> int:
    return round((8 * size / axis) ** 3 * 1000)


def free_slices(mask: int, axis: int) -> list[int]:
    return [i for i in range(axis) if not mask >> i & 1]


@dataclass(frozen=True)
class Choice:
    """The best free placement of one profile at one mask, and the placeable value it destroys."""

    placement: Placement
    loss: int


class ProfileSet:
    """The published profiles of a GPU (in default order) with lazily memoized occupancy tables."""

    def __init__(self, profiles: Sequence[PublishedProfile]):
        self.profiles: tuple[PublishedProfile, ...] = tuple(sorted(profiles, key=default_sort_key))
        self.axis: int = max((p.end for pr in self.profiles for p in pr.placements), default=0)
        self._value: dict[int, int] = {}
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

    def value(self, mask: int) -> int:
        """Placeable value of what is still free at this mask."""
        v = self._value.get(mask)
        if v is None:
            v = self._value[mask] = sum(w for m, w in self._weighted if not m & mask)
        return v

    def best(self, mask: int, profile: int) -> Choice | None:
        """Lowest-loss free placement of profile index `profile` at `mask` (ties: lower start)."""
        key = (mask, profile)
        if key in self._best:
            return self._best[key]
        before = self.value(mask)
        found: Choice | None = None
        for p in sorted(self.profiles[profile].placements):
            if p.size <= 0 or p.mask & mask:
                continue
            loss = before - self.value(mask | p.mask)
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
