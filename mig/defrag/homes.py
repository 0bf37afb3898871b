"""Where removed pods' replacements would go, over one fleet, and cheap bounds on how many a set loses.
See docs/defrag.md, "Cost" and "Search".
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from mig.defrag.advice import Move
from mig.defrag.holders import Holder
from mig.defrag.nodes import filters_gpus, in_the_way, names_gpus, usable_placements, without
from mig.defrag.order import placing_order
from mig.placement import GpuState, PlacementIndex, Plan, PodRequest
from mig.types import Placement


@dataclass(frozen=True)
class Trial:
    """A set freed on the whole fleet: where the pod lands, each replacement's fate in placement
    order, and whether every victim is in someone's way (the pod's, or another replacement's)."""

    plan: Plan
    moves: tuple[Move, ...]
    legal: bool
    left: Mapping[str, int]  # GPU UUID -> occupied slices afterwards, for the GPUs the set touched


class Homes:
    """Where removed pods' replacements would go, over one fleet: the whole fleet in one engine index
    (built on first use), changed for one set and restored; and cheap bounds on how many a set loses.

    A caller advising several pods over the same fleet (the controller's pass) shares one `Homes`, so
    the fleet-wide index is built once and what fits where is looked up once per request."""

    def __init__(self, gpus: Sequence[GpuState]):
        self.gpus = gpus
        self._index: PlacementIndex | None = None
        self._fit_nodes: dict[PodRequest, tuple[str, ...]] = {}  # request -> up to two nodes it fits now
        self._own: dict[tuple[object, ...], bool] = {}  # (node shape after, pod, request) -> fits there
        self._beside: dict[tuple[object, ...], bool | None] = {}  # (pod, request, freed GPUs) -> may fit
        self._ids: dict[PodRequest, int] = {}  # equal requests share one number (cheap memo keys)
        self._by_object: dict[int, tuple[PodRequest, int]] = {}
        self._masks: dict[str, int] = {g.uuid: g.occupied_mask for g in gpus}
        self._on_node: dict[tuple[str, int], tuple[str, ...]] = {}  # (node, request) -> GPUs it fits now
        self._usable: dict[PodRequest, dict[tuple[int, int], list[Placement]]] = {}
        self._free: dict[tuple[int, int, int, int], bool] = {}  # (request, profiles, MiB, mask) -> fits
        self.placed = 0  # sets placed on the whole fleet
        self._by_uuid: dict[str, GpuState] | None = None
        self._fit_gpus: dict[PodRequest, tuple[str, ...]] = {}  # one-device request -> GPUs it fits now

    @property
    def index(self) -> PlacementIndex:
        if self._index is None:
            self._index = PlacementIndex(self.gpus)
        return self._index

    def _id(self, request: PodRequest) -> int:
        """The request's number: by identity first (holders keep their request objects), then by value."""
        found = self._by_object.get(id(request))
        if found is None or found[0] is not request:
            found = self._by_object[id(request)] = (request, self._ids.setdefault(request, len(self._ids)))
        return found[1]

    def _fits_gpu(self, request: PodRequest, g: GpuState, mask: int) -> bool:
        """A one-device request fits on `g` with these slices taken (a table lookup per GPU shape)."""
        if not g.healthy or g.cordoned:
            return False
        if filters_gpus(request):  # per GPU: its UUID or type may rule it out
            return any(not p.mask & mask for p in self.usable(request, g))
        key = (self._id(request), id(g.profiles), g.memory_mb, mask)
        found = self._free.get(key)
        if found is None:
            found = self._free[key] = any(not p.mask & mask for p in self.usable(request, g))
        return found

    def _nodes_fitting(self, request: PodRequest) -> tuple[str, ...]:
        """Up to two nodes the request fits on now: one-device requests by a table lookup per GPU,
        others by the engine (at most two calls)."""
        found = self._fit_nodes.get(request)
        if found is not None:
            return found
        out: list[str] = []
        if request.device_count == 1:
            for g in self.gpus:
                if g.node not in out and self._fits_gpu(request, g, g.occupied_mask):
                    out.append(g.node)
                    if len(out) == 2:
                        break
        else:
            plan = self.index.plan(request)
            if isinstance(plan, Plan) and plan.devices:
                out.append(plan.node)
                again = self.index.plan(request, nodes=[n for n in self.index.nodes() if n != plan.node])
                if isinstance(again, Plan) and again.devices:
                    out.append(again.node)
        self._fit_nodes[request] = found = tuple(out)
        return found

    def fits_elsewhere(self, request: PodRequest, node: str) -> bool:
        """The request fits now on some node other than `node`."""
        return any(n != node for n in self._nodes_fitting(request))

    def surely_lost(self, pod: PodRequest, gpus: Sequence[GpuState], victims: Sequence[Holder]) -> int | None:
        """How many victims are lost whatever the order (a lower bound), or None when the pod does not
        fit on the node with the set freed. A victim is surely lost when nothing recreates it, or its
        request fits on no other node now and not on its own node once the set is freed and the pod
        placed there (one-device requests: for every placement the pod could take, by table lookups;
        others: the engine on the node, its answer shared by nodes of the same shape)."""
        lost, after = 0, None
        for h in victims:
            if h.request is None:
                lost += 1
                continue
            if self.fits_elsewhere(h.request, h.node):
                continue
            if pod.device_count == 1 and h.request.device_count == 1:
                fits = self._fits_beside_any(pod, gpus, victims, h.request)
            else:
                after = after or without(gpus, victims)
                fits = self._fits_beside(pod, after, h.request)
            if fits is None:
                return None
            lost += not fits
        return lost

    def _fits_beside_any(
        self, pod: PodRequest, gpus: Sequence[GpuState], victims: Sequence[Holder], request: PodRequest
    ) -> bool | None:
        """Whether the request may fit on the node beside the pod, for some placement the pod could
        take there (None: the pod could take none). The pod did not fit before, so it lands on a GPU
        a victim freed; the node's other GPUs take the request as they would now. Answers are shared
        by sets freeing GPUs of the same shape."""
        freed: dict[str, int] = {}
        for h in victims:
            for u, p in h.placements:
                freed[u] = freed.get(u, 0) | p.mask
        node = gpus[0].node
        fits_now = self._on_node.get((node, self._id(request)))
        if fits_now is None:
            fits_now = tuple(g.uuid for g in gpus if self._fits_gpu(request, g, self._masks.get(g.uuid, 0)))
            self._on_node[(node, self._id(request))] = fits_now
        if any(u not in freed for u in fits_now):
            return True
        touched = [(g, self._masks.get(g.uuid, 0) & ~freed[g.uuid]) for g in gpus if g.uuid in freed]
        key: tuple[object, ...] = (self._id(pod), self._id(request))
        key += tuple((id(g.profiles), g.memory_mb, g.healthy, g.cordoned, m) for g, m in touched)
        if filters_gpus(pod) or filters_gpus(request):
            key += tuple(g.uuid for g, _ in touched)
        found = self._beside.get(key)
        if key not in self._beside:
            spots = [(g, q) for g, m in touched for q in self.usable(pod, g) if not q.mask & m]
            found = self._beside[key] = (
                None
                if not spots
                else any(
                    self._fits_gpu(request, t, m | (q.mask if t is g else 0))
                    for g, q in spots
                    for t, m in touched
                )
            )
        return found

    def _fits_beside(self, pod: PodRequest, after: Sequence[GpuState], request: PodRequest) -> bool | None:
        named = names_gpus(pod) or names_gpus(request)
        shape = tuple(
            (g.index, g.uuid if named else "", id(g.profiles), g.occupied_mask, g.type, g.healthy, g.cordoned)
            for g in sorted(after, key=lambda g: (g.index, g.uuid))
        )
        key = (shape, pod, request)
        if key not in self._own:
            index = PlacementIndex(after)
            plan = index.plan(pod)
            if not isinstance(plan, Plan) or not plan.devices:
                return None
            index.apply(plan)
            again = index.plan(request)
            self._own[key] = isinstance(again, Plan) and bool(again.devices)
        return self._own[key]

    def fits_in(self, request: PodRequest | None, left: Mapping[str, int]) -> bool:
        """The request fits on some GPU with the slices `left` says are taken on the GPUs it names
        (the others as they are now); a request of several devices: fits now on a node it names not."""
        if request is None:
            return False
        if request.device_count != 1:
            return any(all(u not in left for u in self._node_uuids(n)) for n in self._nodes_fitting(request))
        fitting = self._fit_gpus.get(request)
        if fitting is None:
            fitting = self._fit_gpus[request] = tuple(
                g.uuid for g in self.gpus if self._fits_gpu(request, g, g.occupied_mask)
            )
        if any(u not in left for u in fitting):
            return True
        by_uuid = self._gpu_by_uuid()
        return any(self._fits_gpu(request, by_uuid[u], m) for u, m in left.items() if u in by_uuid)

    def _gpu_by_uuid(self) -> dict[str, GpuState]:
        if self._by_uuid is None:
            self._by_uuid = {g.uuid: g for g in self.gpus}
        return self._by_uuid

    def _node_uuids(self, node: str) -> list[str]:
        return [g.uuid for g in self.gpus if g.node == node]

    def fits_now(self, request: PodRequest | None) -> bool:
        """The request fits somewhere in the fleet as it is now (before any set is freed)."""
        return request is not None and bool(self._nodes_fitting(request))

    def usable(self, request: PodRequest, g: GpuState) -> list[Placement]:
        """`usable_placements` for the request's one device, remembered per request for this fleet."""
        return usable_placements(request, g, request.devices()[0][2], self._usable.setdefault(request, {}))

    def place(
        self, pod: PodRequest, node: str | Collection[str] | None, victims: Sequence[Holder]
    ) -> tuple[Plan, tuple[Move, ...]] | None:
        """Free the set, place the pod on `node` (a name, several, or None: anywhere) and each
        replacement (in `order`) anywhere, as the engine would; None when the pod does not then land
        there or some victim is in no one's way (neither the pod's nor another replacement's).
        The index is restored afterwards."""
        trial = self.trial(pod, node, victims)
        return None if trial is None or not trial.legal else (trial.plan, trial.moves)

    def trial(
        self,
        pod: PodRequest,
        node: str | Collection[str] | None,
        victims: Sequence[Holder],
        until_lost: bool = False,
    ) -> Trial | None:
        """`place`, also for a set some pod of which is in no one's way (`Trial.legal` False);
        None when the pod does not land. `until_lost`: stop at the first replacement placed nowhere
        (the moves then end with it; `legal` False)."""
        self.placed += 1
        index = self.index
        freed = [(u, p) for h in victims for u, p in h.placements]
        applied: list[Plan] = []
        try:
            for u, p in freed:
                index.release(u, p)
            plan = index.plan(pod, nodes=(node,) if isinstance(node, str) else node)
            if not isinstance(plan, Plan) or not plan.devices:
                return None
            index.apply(plan)
            applied.append(plan)
            moves = []
            for h in placing_order(victims, applied, self.fits_now):
                again = index.plan(h.request) if h.request is not None else None
                if isinstance(again, Plan) and again.devices:
                    index.apply(again)
                    applied.append(again)
                    moves.append(Move(h, again))
                else:
                    moves.append(Move(h, None))
                    if until_lost:
                        return Trial(plan, tuple(moves), False, {})
            legal = all(
                in_the_way(plan, (m.victim,))
                or any(o.plan is not None and o is not m and in_the_way(o.plan, (m.victim,)) for o in moves)
                for m in moves
            )
            touched = {u for u, _ in freed} | {d.gpu_uuid for done in applied for d in done.devices}
            return Trial(plan, tuple(moves), legal, {u: index.occupied_mask(u) for u in touched})
        finally:
            for done in applied:
                for d in done.devices:
                    index.release(d.gpu_uuid, d.placement)
            for u, p in freed:
                if not index.occupied_mask(u) & p.mask:
                    index.reserve(u, p)
