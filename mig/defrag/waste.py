"""How much room a GPU wastes, in shares of a GPU: its free slices, plus each instance's share above the
least share its request takes on any model of the fleet. The re-lay ranks regions by it; see
docs/defrag.md, "Re-laid GPUs".
"""

from __future__ import annotations

from collections.abc import Sequence

from mig.placement import GpuState, PodRequest
from mig.placement.occupancy import profile_set
from mig.placement.preference import candidate_order
from mig.placement.request import Memory, memory_on
from mig.types import Placement

Instance = tuple[Placement, PodRequest | None, bool]  # a placement, its pod's request, may it go


def axis_of(g: GpuState) -> int:
    """The GPU's slices: the end of its last published placement (0 when it publishes none)."""
    return max((p.end for pr in g.profiles for p in pr.placements), default=0)


class Waste:
    """How much room each GPU wastes, in shares of a GPU (see the module docstring)."""

    def __init__(self, gpus: Sequence[GpuState]):
        self._models: dict[tuple[str, int], GpuState] = {}
        for g in gpus:
            if g.healthy and not g.cordoned and g.profiles:
                self._models.setdefault((g.type, id(g.profiles)), g)
        self._least: dict[tuple[PodRequest, int], float] = {}  # (request, device) -> least share
        self._sizes: dict[tuple[int, int], int | None] = {}  # (id of profiles, MiB) -> least slices
        self._by_object: dict[int, tuple[PodRequest, float | None]] = {}
        self._axes: dict[int, int] = {}  # id of profiles -> slices (the GPUs outlive this object)
        self._spare: dict[tuple[int, int], float] = {}  # (id of profiles, occupied) -> usable free share
        self._keep = list(gpus)  # holds the profiles whose ids key the caches

    def axis(self, g: GpuState) -> int:
        found = self._axes.get(id(g.profiles))
        if found is None:
            found = self._axes[id(g.profiles)] = axis_of(g)
        return found

    def usable_free(self, g: GpuState) -> float:
        """The share of the GPU's slices that lie in a published placement with nothing on it (0 for
        a GPU nothing may land on): what a replacement could take there without anything moving."""
        axis = self.axis(g)
        if not g.healthy or g.cordoned or not axis:
            return 0.0
        key = (id(g.profiles), g.occupied_mask)
        found = self._spare.get(key)
        if found is None:
            mask = 0
            for pr in g.profiles:
                for p in pr.placements:
                    if p.size > 0 and not p.mask & key[1]:
                        mask |= p.mask
            found = self._spare[key] = bin(mask).count("1") / axis
        return found

    def free(self, g: GpuState) -> float:
        """The share of the GPU's slices nothing holds."""
        axis = self.axis(g)
        return (axis - bin(g.occupied_mask & ((1 << axis) - 1)).count("1")) / axis if axis else 0.0

    def _slices(self, g: GpuState, ask: Memory, pod: PodRequest) -> int | None:
        mem = memory_on(ask, g.memory_mb)
        key = (id(g.profiles), -1 if mem is None else mem)
        if key not in self._sizes:
            pset = profile_set(g.profiles)
            sizes = [
                p.size
                for _, i in candidate_order(pset.profiles, mem, pod.preference)
                for p in pset.profiles[i].placements
                if p.size > 0
            ]
            self._sizes[key] = min(sizes, default=None)
        return self._sizes[key]

    def least_share(self, pod: PodRequest, device: int) -> float | None:
        """The least share of a GPU this device of the request takes on any model of the fleet."""
        key = (pod, device)
        if key not in self._least:
            ask = pod.devices()[device][2]
            shares = []
            for g in self._models.values():
                size = self._slices(g, ask, pod)
                if size is not None and self.axis(g):
                    shares.append(size / self.axis(g))
            self._least[key] = min(shares, default=-1.0)
        found = self._least[key]
        return None if found < 0 else found

    def least(self, pod: PodRequest) -> float:
        """The least share of a GPU all the request's devices take together (0 for one it cannot say)."""
        return sum(self.least_share(pod, d) or 0.0 for d in range(len(pod.devices())))

    def of(self, g: GpuState, held: Sequence[Instance]) -> float:
        """The GPU's waste: its free slices, plus each instance that may go's share above the least
        share a device of its request takes (the least over its devices: never less waste)."""
        axis = self.axis(g)
        if not axis:
            return 0.0
        waste = (axis - bin(g.occupied_mask).count("1")) / axis
        for p, request, may_go in held:
            if may_go and request is not None:
                least = self._least_device(request)
                if least is not None:
                    waste += max(0.0, p.size / axis - least)
        return waste

    def _least_device(self, request: PodRequest) -> float | None:
        """The least share any one device of the request takes (by identity first: holders keep
        their request objects, and hashing a request is dear)."""
        found = self._by_object.get(id(request))
        if found is None or found[0] is not request:
            shares = [self.least_share(request, d) for d in range(len(request.devices()))]
            known = [x for x in shares if x is not None]
            found = self._by_object[id(request)] = (request, min(known) if known else None)
        return found[1]
