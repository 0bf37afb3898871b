"""Three simple placement rules with GPU binpack: the strong baselines a platform team would try first.

All three fill the fullest node first (share of its slices in use, then node order) and, per device,
the fullest GPU first (its share of slices in use, tentative ones of the same pod included, then GPU
order); on that GPU the first covering profile (memory ascending, as HAMi orders them) with a free
placement is used, at the placement the rule picks:

- `DriverOrder`: NVIDIA's driver order, a fixed order per profile computed once on the empty GPU:
  placements that overlap the fewest placements of larger profiles first, then those in the upper
  half of the axis, then lower start. On an A100 or H100 a 1g goes to 6, 4, 5, 0, 1, 2, 3, as
  `nvidia-smi mig -cgi` without a placement does. Occupancy is not looked at.
- `LowestStart`: the free placement with the lowest start (first fit within the GPU).
- `LeastDamage`: least-damage best fit, the free placement that destroys the fewest placements of
  larger profiles still free on the GPU (an occupancy-aware best fit), then lower start.

They live in bench/, beside `_baselines` (which they extend), only to be measured against.
"""

from __future__ import annotations

from functools import cache

from _baselines.common import Baseline, BGpu, BNode, Pick, free

from mig.placement import PublishedProfile
from mig.types import Placement


class Memo(Baseline):
    """A baseline whose per-GPU answer (profile and placement for a request at an occupancy) is
    memoized: every baseline's `choose` looks at the GPU's profiles and occupancy only, so this
    changes no decision, only the time a replay takes."""

    def _slot(self, node: BNode, masks: dict[int, int], mem: int | None) -> Pick | None:
        """`Baseline._slot`, each GPU's answer memoized."""
        memo = self.__dict__.setdefault("_memo", {})
        for gpu in self.gpu_order(node, masks):
            key = (id(gpu.profiles), masks[id(gpu)], mem)
            if key not in memo:
                memo[key] = self._first(gpu, masks[id(gpu)], mem)
            hit = memo[key]
            if hit is not None:
                return gpu, hit[1], hit[0]
        return None

    def _first(self, gpu: BGpu, mask: int, mem: int | None) -> tuple[PublishedProfile, Placement] | None:
        top = max(p.memory_mb for p in gpu.profiles)
        for prof in gpu.profiles:
            if prof.memory_mb >= (top if mem is None else mem):
                place = self.choose(gpu, mask, prof)
                if place is not None:
                    return prof, place
        return None


def memoized(cls: type[Baseline]) -> type[Baseline]:
    """The same baseline with `Memo`'s per-GPU memo (same name, same decisions)."""
    return type(cls.__name__, (Memo, cls), {})


class Binpack(Memo):
    """Fullest node first, fullest GPU first (see the module docstring)."""

    name = "binpack"

    def node_order(self) -> list[BNode]:
        return sorted(
            self.nodes, key=lambda n: -sum(g.used_slices for g in n.gpus) / sum(g.axis for g in n.gpus)
        )

    def gpu_order(self, node: BNode, masks: dict[int, int]) -> list[BGpu]:
        return sorted(node.gpus, key=lambda g: -masks[id(g)].bit_count() / g.axis)


def _larger(gpu: BGpu, profile: PublishedProfile) -> list[Placement]:
    return [
        p for pr in gpu.profiles if pr.slice_count > profile.slice_count for p in pr.placements if p.size > 0
    ]


@cache
def _driver_order(profiles: tuple[PublishedProfile, ...], name: str) -> tuple[Placement, ...]:
    prof = next(p for p in profiles if p.name == name)
    axis = max(p.end for pr in profiles for p in pr.placements)
    larger = [p for pr in profiles if pr.slice_count > prof.slice_count for p in pr.placements if p.size > 0]
    return tuple(
        sorted(
            (p for p in prof.placements if p.size > 0),
            key=lambda p: (sum(1 for q in larger if q.mask & p.mask), 2 * p.start < axis, p.start),
        )
    )


class DriverOrder(Binpack):
    name = "driver order"

    def choose(self, gpu: BGpu, mask: int, profile: PublishedProfile) -> Placement | None:
        options = free(_driver_order(gpu.profiles, profile.name), mask)
        return options[0] if options else None


class LowestStart(Binpack):
    name = "lowest start"

    def choose(self, gpu: BGpu, mask: int, profile: PublishedProfile) -> Placement | None:
        options = free(sorted(profile.placements), mask)
        return options[0] if options else None


class LeastDamage(Binpack):
    name = "least damage"

    def choose(self, gpu: BGpu, mask: int, profile: PublishedProfile) -> Placement | None:
        options = free(sorted(profile.placements), mask)
        if not options:
            return None
        alive = [q for q in _larger(gpu, profile) if not q.mask & mask]
        return min(options, key=lambda p: (sum(1 for q in alive if q.mask & p.mask), p.start))


RULES = (DriverOrder, LowestStart, LeastDamage)
