"""Best fit: the most-filled GPU with room, then the placement that loses the least capacity.

Per device, every GPU of the node is a candidate with the smallest covering profile that has a free
placement there; the winner is the GPU with the highest share of slices in use (tentative ones of
the same pod included), then the placement that leaves the fewest free slices unusable (taken or
stranded: no legal placement of any profile covers them any more), then the lower start. Nodes are
tried fullest first (share of slices in use); the first node that takes every device wins.
"""

from __future__ import annotations

from _baselines.common import Baseline, BGpu, BNode, free
from mig.placement import PublishedProfile
from mig.types import Placement


def _usable(gpu: BGpu, mask: int) -> int:
    """Free slices that some legal placement of some profile still covers at this occupancy."""
    covered = 0
    for prof in gpu.profiles:
        for p in prof.placements:
            if not p.mask & mask:
                covered |= p.mask
    return (covered & ~mask).bit_count()


class BestFit(Baseline):
    name = "best-fit"

    def node_order(self) -> list[BNode]:
        return sorted(
            self.nodes, key=lambda n: -sum(g.used_slices for g in n.gpus) / sum(g.axis for g in n.gpus)
        )

    def gpu_order(self, node: BNode, masks: dict[int, int]) -> list[BGpu]:
        return sorted(node.gpus, key=lambda g: -masks[id(g)].bit_count() / g.axis)

    def choose(self, gpu: BGpu, mask: int, profile: PublishedProfile) -> Placement | None:
        options = free(sorted(profile.placements), mask)
        if not options:
            return None
        before = _usable(gpu, mask)
        return min(options, key=lambda p: (before - _usable(gpu, mask | p.mask), p.start))
