"""Which GPUs the defrag advisor re-lays first: single GPUs, then pairs, by the room they waste (see
`waste`), most first, a pair of two models before a pair of one. See docs/defrag.md, "Re-laid GPUs".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from mig.defrag.limits import RELAY_LEADS, RELAY_PARTNERS, RELAY_SINGLES
from mig.defrag.nodes import names_gpus
from mig.defrag.waste import Instance, axis_of
from mig.placement import GpuState, PodRequest
from mig.types import Placement


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
        self._axes: dict[str, int] = {}  # GPU -> slices

    def _axis(self, g: GpuState) -> int:
        found = self._axes.get(g.uuid)
        if found is None:
            found = self._axes[g.uuid] = axis_of(g)
        return found

    def _of(self, g: GpuState) -> tuple[list[tuple[int, PodRequest, int]], int, int]:
        if g.uuid not in self._masks:
            stays, going = 0, []
            for p, request, may_go in self.held.get(g.uuid, ()):
                if may_go and request is not None:
                    going.append((self._kinds.setdefault(request, len(self._kinds)), request, p.size))
                else:
                    stays |= p.mask
            self._going[g.uuid] = going
            self._masks[g.uuid] = (((1 << self._axis(g)) - 1) & ~g.occupied_mask, stays)
        return self._going[g.uuid], *self._masks[g.uuid]

    def absorbs(self, a: GpuState, b: GpuState) -> bool:
        """An instance that may go on `b` could take a free slice of `a`, at a placement over nothing
        that must stay."""
        _, free, stays = self._of(a)
        if not free:
            return False
        for kind, request, _ in self._of(b)[0]:
            # per GPU shape; a request naming GPUs (UUID filters) is asked per GPU
            key = (
                id(a.profiles),
                a.memory_mb,
                a.type,
                free,
                stays,
                kind,
                a.uuid if names_gpus(request) else "",
            )
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
        axis_a, axis_b = self._axis(a), self._axis(b)
        if not axis_a or not axis_b:
            return False
        for kind, request, size in self._of(a)[0]:
            key = (
                kind,
                size,
                axis_a,
                id(b.profiles),
                b.memory_mb,
                b.type,
                b.uuid if names_gpus(request) else "",
            )
            found = self._smaller.get(key)
            if found is None:
                sizes = [q.size for q in self.usable(request, b)]
                found = self._smaller[key] = bool(sizes) and min(sizes) / axis_b < size / axis_a
            if found:
                return True
        return False
