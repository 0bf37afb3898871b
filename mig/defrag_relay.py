"""Re-laid GPUs: which GPUs the defrag advisor re-lays first when no chain gives every pod a home.

Near capacity a fleet's free slices are often ones nothing asked for can use (the eighth slice of
an A100 or H100 whose other half holds small instances), and pods sit on models where they take a
larger share of a GPU than they would on another (a 9,000 MiB pod takes a quarter of an A100 but an
eighth of an H100). An oracle that may move every instance packs such a fleet; one that re-lays a GPU
or two (every candidate on them removed, then the pending pod and the replacements placed by the
engine) often does too. This module ranks the regions to try: single GPUs, then pairs, by how much
room they waste (free slices, plus each instance's share of its GPU above the least share its request
takes on any model of the fleet), most first, a pair of two models before a pair of one.

Pure: the advisor (`mig.defrag`) tries each region on the whole fleet with the engine and keeps the
first that works.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from mig.placement import GpuState, PodRequest
from mig.placement.occupancy import profile_set
from mig.placement.preference import candidate_order
from mig.placement.request import Memory, memory_on
from mig.types import Placement

Instance = tuple[Placement, PodRequest | None, bool]  # a placement, its pod's request, may it go
RELAY_SINGLES = 8  # single GPUs tried, most wasteful first
RELAY_LEADS = 16  # GPUs that lead a pair (the most wasteful)
RELAY_PARTNERS = 256  # GPUs each lead is paired with (the most wasteful, a lead's own waste aside)


_AXES: dict[tuple[object, ...], int] = {}


def _axis(g: GpuState) -> int:
    """The GPU's slices: the end of its last published placement (0 when it publishes none)."""
    key = tuple(id(pr) for pr in g.profiles)
    found = _AXES.get(key)
    if found is None:
        found = max((p.end for pr in g.profiles for p in pr.placements), default=0)
        if len(_AXES) < 4096:
            _AXES[key] = found
    return found


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
                if size is not None and _axis(g):
                    shares.append(size / _axis(g))
            self._least[key] = min(shares, default=-1.0)
        found = self._least[key]
        return None if found < 0 else found

    def least(self, pod: PodRequest) -> float:
        """The least share of a GPU all the request's devices take together (0 for one it cannot say)."""
        return sum(self.least_share(pod, d) or 0.0 for d in range(len(pod.devices())))

    def of(self, g: GpuState, held: Sequence[Instance]) -> float:
        """The GPU's waste: its free slices, plus each instance that may go's share above the least
        share a device of its request takes (the least over its devices: never less waste)."""
        axis = _axis(g)
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


def usable_free(g: GpuState) -> float:
    """The share of the GPU's slices that lie in a published placement with nothing on it (0 for a
    GPU nothing may land on): what a replacement could take there without anything moving."""
    if not g.healthy or g.cordoned or not _axis(g):
        return 0.0
    taken, mask = g.occupied_mask, 0
    for pr in g.profiles:
        for p in pr.placements:
            if p.size > 0 and not p.mask & taken:
                mask |= p.mask
    return bin(mask).count("1") / _axis(g)


def regions(
    gpus: Sequence[GpuState],
    waste: Mapping[str, float],
    held: Mapping[str, Sequence[Instance]],
    usable: Callable[[PodRequest, GpuState], Sequence[Placement]],
) -> Iterator[tuple[str, ...]]:
    """The regions to re-lay, in order: `RELAY_SINGLES` single GPUs, most waste first; then pairs of a
    lead (the `RELAY_LEADS` most wasteful) and a partner (the `RELAY_PARTNERS` most wasteful), those
    where an instance would take less room on the other GPU's model and one of them could take a free
    slice of the other first, then those with one of the two, by waste (pairs with neither are not
    tried: moving their instances between them gains no room); among equals, two models first.
    `gpus`: the GPUs with candidates, in the fleet's order; `held`: per GPU UUID, its instances;
    `usable`: the placements a request could take on a GPU."""
    ranked = sorted(gpus, key=lambda g: -waste[g.uuid])
    for g in ranked[:RELAY_SINGLES]:
        yield (g.uuid,)
    position = {g.uuid: n for n, g in enumerate(ranked)}
    leads, partners = ranked[:RELAY_LEADS], ranked[:RELAY_PARTNERS]
    look = _Pairs(held, usable)
    keyed = []
    for a in leads:
        for b in partners:
            if b is a or (position[b.uuid] < position[a.uuid] and b in leads):
                continue
            absorbs = look.absorbs(a, b) or look.absorbs(b, a)
            exchanges = (a.type, id(a.profiles)) != (b.type, id(b.profiles)) and (
                look.exchanges(a, b) or look.exchanges(b, a)
            )
            if not (absorbs or exchanges):
                continue
            keyed.append(
                (
                    (not (absorbs and exchanges), not exchanges),
                    -(waste[a.uuid] + waste[b.uuid]),
                    a.type == b.type,
                    position[a.uuid],
                    position[b.uuid],
                    (a.uuid, b.uuid),
                )
            )
    keyed.sort()
    for *_, pair in keyed:
        yield pair


class _Pairs:
    """What moving instances between two GPUs could gain, answered once per GPU shape and request."""

    def __init__(
        self,
        held: Mapping[str, Sequence[Instance]],
        usable: Callable[[PodRequest, GpuState], Sequence[Placement]],
    ):
        self.held, self.usable = held, usable
        self._kinds: dict[PodRequest, int] = {}
        self._going: dict[str, list[tuple[int, PodRequest, int]]] = {}  # GPU -> (kind, request, size)
        self._masks: dict[str, tuple[int, int]] = {}  # GPU -> (free slices, slices that stay)
        self._absorb: dict[tuple[object, ...], bool] = {}
        self._smaller: dict[tuple[object, ...], bool] = {}

    def _of(self, g: GpuState) -> tuple[list[tuple[int, PodRequest, int]], int, int]:
        if g.uuid not in self._masks:
            stays, going = 0, []
            for p, request, may_go in self.held.get(g.uuid, ()):
                if may_go and request is not None:
                    going.append((self._kinds.setdefault(request, len(self._kinds)), request, p.size))
                else:
                    stays |= p.mask
            self._going[g.uuid] = going
            self._masks[g.uuid] = (((1 << _axis(g)) - 1) & ~g.occupied_mask, stays)
        return self._going[g.uuid], *self._masks[g.uuid]

    def absorbs(self, a: GpuState, b: GpuState) -> bool:
        """An instance that may go on `b` could take a free slice of `a`, at a placement over nothing
        that must stay."""
        _, free, stays = self._of(a)
        if not free:
            return False
        for kind, request, _ in self._of(b)[0]:
            # per GPU shape; a request naming GPUs (UUID filters) is asked per GPU
            key = (id(a.profiles), a.memory_mb, a.type, free, stays, kind, a.uuid if _named(request) else "")
            found = self._absorb.get(key)
            if found is None:
                found = self._absorb[key] = any(
                    q.mask & free and not q.mask & stays for q in self.usable(request, a)
                )
            if found:
                return True
        return False

    def exchanges(self, a: GpuState, b: GpuState) -> bool:
        """An instance that may go on `a` would take a smaller share of `b`."""
        axis_a, axis_b = _axis(a), _axis(b)
        if not axis_a or not axis_b:
            return False
        for kind, request, size in self._of(a)[0]:
            key = (kind, size, axis_a, id(b.profiles), b.memory_mb, b.type, b.uuid if _named(request) else "")
            found = self._smaller.get(key)
            if found is None:
                sizes = [q.size for q in self.usable(request, b)]
                found = self._smaller[key] = bool(sizes) and min(sizes) / axis_b < size / axis_a
            if found:
                return True
        return False


def _named(request: PodRequest) -> bool:
    return bool(request.use_uuids or request.nouse_uuids)
