"""HAMi #2378: descending start for profiles named 1g.* or 3g.*, ascending otherwise; first fit.

GPU and node order are HAMi's chart defaults (node binpack, GPU spread); the `Binpack` variant
runs the same rule with binpack/binpack.
"""

from __future__ import annotations

from _baselines.common import BGpu, HamiOrder, free
from mig.placement import PublishedProfile
from mig.types import Placement


class Hami2378(HamiOrder):
    name = "hami-2378"

    def choose(self, gpu: BGpu, mask: int, profile: PublishedProfile) -> Placement | None:
        descending = profile.name.startswith(("1g.", "3g."))
        options = free(sorted(profile.placements, key=lambda p: p.start, reverse=descending), mask)
        return options[0] if options else None


class Hami2378Binpack(Hami2378):
    name = "hami-2378 bp/bp"
    gpu_binpack = True
