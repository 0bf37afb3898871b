"""First fit: nodes by name, GPUs in order, the lowest free start of the first covering profile."""

from __future__ import annotations

from _baselines.common import Baseline, BGpu, free
from mig.placement import PublishedProfile
from mig.types import Placement


class FirstFit(Baseline):
    name = "first-fit"

    def choose(self, gpu: BGpu, mask: int, profile: PublishedProfile) -> Placement | None:
        options = free(sorted(profile.placements), mask)
        return options[0] if options else None
