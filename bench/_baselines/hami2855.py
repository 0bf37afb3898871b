"""HAMi #2855: half scoring.

The card is split at axis/2 unless a non-full-card placement straddles the midpoint (then plain
first fit by lowest start). The "reserved" half is the one holding fewer placements (ties: upper).
A candidate is scored, in order: more completely empty halves after placing; zone match (a candidate
filling a whole half belongs in the reserved half, smaller ones outside it); packing toward the
outer edge (lower half: halfEnd - end; upper half: start - halfStart; larger is better); lower start.
GPU and node order are HAMi's chart defaults (node binpack, GPU spread); the `Binpack` variant
runs the same rule with binpack/binpack.
"""

from __future__ import annotations

from functools import cache

from _baselines.common import BGpu, HamiOrder, free
from mig.placement import PublishedProfile
from mig.types import Placement


@cache
def _layout(profiles: tuple[PublishedProfile, ...]) -> tuple[int, int, bool, int]:
    """(axis, mid, split?, reserved half: 0 lower / 1 upper) for a profile set."""
    axis = max(p.end for pr in profiles for p in pr.placements)
    mid = axis // 2
    places = {p for pr in profiles for p in pr.placements}
    straddle = any(p.start < mid < p.end and p.size < axis for p in places)
    lower = sum(1 for p in places if p.end <= mid)
    upper = sum(1 for p in places if p.start >= mid)
    return axis, mid, not straddle, 0 if lower < upper else 1


class Hami2855(HamiOrder):
    name = "hami-2855"

    def choose(self, gpu: BGpu, mask: int, profile: PublishedProfile) -> Placement | None:
        options = free(sorted(profile.placements), mask)
        if not options:
            return None
        axis, mid, split, reserved = _layout(gpu.profiles)
        if not split:
            return options[0]
        halves = (((1 << mid) - 1), ((1 << axis) - 1) & ~((1 << mid) - 1))

        def score(p: Placement) -> tuple:
            after = mask | p.mask
            empty = sum(1 for h in halves if not after & h)
            if p.size >= axis:
                mismatch, edge = 0, 0
            else:
                half = 0 if p.end <= mid else 1
                fills = p.size == mid
                mismatch = int(fills != (half == reserved))
                edge = (mid - p.end) if half == 0 else (p.start - mid)
            return (-empty, mismatch, -edge, p.start)

        return min(options, key=score)


class Hami2855Binpack(Hami2855):
    name = "hami-2855 bp/bp"
    gpu_binpack = True
