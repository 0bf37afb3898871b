"""Chains: a set that strands a pod grows by the pods in that pod's way at a room it could take anywhere
in the fleet, and so on, a few steps; a uniform-cost search over the grown sets, then a small beam.
See docs/defrag.md, "Chains".
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence

from mig.defrag.budgets import within_budgets
from mig.defrag.cost import Cost, Lead, cost, lead, one_more
from mig.defrag.holders import Holder
from mig.defrag.limits import (
    BEAM_SEEDS,
    BEAM_WIDTH,
    CHAIN_BRANCH,
    CHAIN_WINDOW,
    MAX_CHAIN_DEPTH,
    MAX_CHAIN_STEPS,
    MAX_CHAIN_TRIALS,
)
from mig.defrag.nodes import Node, place_on, without
from mig.defrag.search import Best, Search
from mig.placement import PodRequest

Room = tuple[Lead, tuple[Holder, ...]]  # the candidates in the way of one placement, and their lead


def chains(search: Search) -> Cost | None:
    """Grow the search's stranding sets into chains (uniform-cost, then the beam): the cheapest bound
    they left unexplored, None when they left none."""
    grower = _Chains(search)
    grower.uniform_cost()
    grower.beam()
    return grower.cut


class _Chains:
    """One advice's chain search over its `Search`."""

    def __init__(self, search: Search, max_trials: int = MAX_CHAIN_TRIALS):
        self.search = search
        self.max_trials = max_trials
        self.trials = 0
        self.steps = 0  # sets grown (each looks at every room of one pod in the fleet)
        self.cut: Cost | None = None  # the cheapest bound the chain search left unexplored
        self._rooms: dict[PodRequest, list[Room]] = {}

    def uniform_cost(self) -> None:
        """Sets that strand a pod, grown by the pods in that pod's way at a placement it could take
        (anywhere in the fleet), and so on up to `MAX_CHAIN_DEPTH` steps: uniform-cost search by the
        cost with none lost, each grown set tried on the whole fleet (`Homes.trial`). A step keeps
        every grown set when there are at most `CHAIN_BRANCH`, else the cheapest `CHAIN_BRANCH` of
        those whose new pods would fit in what the set leaves free (the room left beside the pending
        pod and the other replacements, or anywhere now); at most `max_trials` trials. What
        that leaves unexplored is remembered (`cut`), so the advice says when a cheaper set may have
        been missed. Also when the best set so far loses no pod: a chain adds pods, but one as large
        as that set may still be cheaper by its priorities or its pods' age; the best's cost bounds
        the search (no set grows past the best's count)."""
        if not self.search.seeds:
            return
        # (order key, tick, bound, node, set, its lost pods or None: not tried yet, depth). The key
        # is the bound's highest priority and count, then how many new pods would not fit in what the
        # set leaves free, then the bound: likelier sets are tried first among sets of one count.
        Entry = tuple[tuple[object, ...], int, Cost, Node, tuple[Holder, ...], tuple[Holder, ...] | None, int]
        heap: list[Entry] = []
        seen: set[tuple[str, ...]] = set()
        for n, (bound, node, victims, likely) in enumerate(self.search.seeds):
            seen.add(tuple(h.name for h in victims))
            heap.append(((bound.priority, bound.pods, 0, bound), -n - 1, bound, node, victims, likely, 0))
        heapq.heapify(heap)
        tick = 0
        while heap:
            _, _, bound, node, victims, lost, depth = heapq.heappop(heap)
            if self.search.best is not None and (bound.priority, 0, bound.pods) > self.search.best.cost[:3]:
                return  # every set left is dearer than the best (the key orders by these terms)
            if self.search.beaten(bound):
                continue
            if lost is None:  # a grown set: try it
                if self.trials >= self.max_trials:
                    self._cut(min((e[2] for e in heap), default=bound))
                    self._cut(bound)
                    return
                tried = self._try_chain(node, victims)
                if tried is None or not tried[0]:
                    continue
                lost, left, _ = tried
            else:  # a seed: what its pod leaves free on its node, without a whole-fleet trial
                left = _left_beside(self.search.pod, node, victims)
            if depth >= MAX_CHAIN_DEPTH:
                self._cut(bound)
                continue
            if self.steps >= MAX_CHAIN_STEPS:
                self._cut(min((e[2] for e in heap), default=bound))
                self._cut(bound)
                return
            self.steps += 1
            for c, unlikely, grown in self._grow(node, victims, lost, left, seen):
                tick += 1
                heapq.heappush(
                    heap, ((c.priority, c.pods, unlikely, c), tick, c, node, grown, None, depth + 1)
                )
        # explored everything the steps kept: exact up to `cut`

    def beam(self) -> None:
        """Past the uniform-cost search's budget with no set that loses nobody: grow the cheapest
        `BEAM_SEEDS` stranding sets depth first, keeping per step the `BEAM_WIDTH` likeliest (new pods
        that fit in what the set leaves free, then cost), at most `max_trials` more trials.
        Whatever it finds is not proven cheapest (the `cut` says so)."""
        if self.cut is None or self.search.loses_nobody():
            return
        seen: set[tuple[str, ...]] = set()
        frontier: list[tuple[Cost, Node, tuple[Holder, ...], tuple[Holder, ...], Mapping[str, int]]] = []
        for bound, node, victims, likely in sorted(self.search.seeds, key=lambda s: s.bound)[:BEAM_SEEDS]:
            seen.add(tuple(h.name for h in victims))
            frontier.append((bound, node, victims, likely, _left_beside(self.search.pod, node, victims)))
        trials = 0
        for _ in range(MAX_CHAIN_DEPTH):
            grown_states = []
            for _, node, victims, lost, left in frontier:
                self.steps += 1
                for c, _, grown in self._grow(node, victims, lost, left, seen)[:BEAM_WIDTH]:
                    if self.search.beaten(c):
                        continue
                    if trials >= self.max_trials:
                        return
                    trials += 1
                    tried = self._try_chain(node, grown)
                    if tried is None:
                        continue
                    now_lost, now_left, better = tried
                    if better and not now_lost:
                        return
                    if now_lost:
                        grown_states.append((len(now_lost), c, node, grown, now_lost, now_left))
            grown_states.sort(key=lambda g: (g[0], g[1]))
            frontier = [
                (c, node, grown, lost, left) for _, c, node, grown, lost, left in grown_states[:BEAM_SEEDS]
            ]

    def _try_chain(
        self, node: Node, victims: tuple[Holder, ...]
    ) -> tuple[tuple[Holder, ...], Mapping[str, int], bool] | None:
        """One whole-fleet trial of a grown set, kept as the best when it works and beats it: (the
        pods it strands, what it leaves occupied, whether it became the best); None: no trial."""
        self.trials += 1
        trial = self.search.homes.trial(self.search.pod, self.search.allowed, victims)
        if trial is None:
            return None
        lost = tuple(m.victim for m in trial.moves if m.plan is None)
        better = False
        if trial.legal and not (self.search.require_homes and lost):
            c = cost(trial.plan.node, victims, self.search.now, len(lost))
            if not self.search.beaten(c):
                self.search.best = Best(c, node, victims, (trial.plan, trial.moves), chain=True)
                better = True
        return lost, trial.left, better

    def _grow(
        self,
        node: Node,
        victims: tuple[Holder, ...],
        lost: tuple[Holder, ...],
        left: Mapping[str, int],
        seen: set[tuple[str, ...]],
    ) -> list[tuple[Cost, int, tuple[Holder, ...]]]:
        """The sets one step longer: a stranded one-device pod (each of them: a set that homes the
        second may be cheaper than every set that homes the first) given a home by freeing the pods
        in its way at one of its placements (see `uniform_cost` for which are kept)."""
        base = lead(victims)
        if any(h.request is not None and h.request.device_count > 1 for h in lost):
            # only a one-device pod is given a home by a chain: the sets that would give this one a
            # home (each one pod larger at least) are not searched here, so a proof stops below them
            self._cut(one_more(base))
        requests = {h.request for h in lost if h.request is not None and h.request.device_count == 1}
        names = {h.name for h in victims}
        children: list[tuple[tuple[int, int, int, int], list[Holder]]] = []
        for request in sorted(requests, key=repr):  # the rooms of a request home each pod asking it
            children += self._children(base, names, self.rooms(request))
        priced = []
        for _, new in children:
            grown = tuple(sorted((*victims, *new), key=lambda h: h.name))
            key = tuple(h.name for h in grown)
            if key in seen:
                continue
            group = within_budgets(grown, self.search.budgets)
            if group:
                self.search.blocked.add(group)
                continue
            seen.add(key)
            priced.append((cost(node.name, grown, self.search.now), key, grown, new))
        scored = [
            (c, sum(not self.search.homes.fits_in(h.request, left) for h in new), key, grown)
            for c, key, grown, new in priced
        ]
        if len(scored) > CHAIN_BRANCH:
            scored.sort(key=lambda ch: (ch[1], ch[0]))
            self._cut(min(ch[0] for ch in scored[CHAIN_BRANCH:]))
            scored = scored[:CHAIN_BRANCH]
        return [(c, unlikely, grown) for c, unlikely, _, grown in scored]

    def _children(
        self,
        base: Lead,
        names: set[str],
        rooms: list[Room],
    ) -> list[tuple[tuple[int, int, int, int], list[Holder]]]:
        """(bound, new pods) of the rooms of one request, cheapest first, at most `CHAIN_WINDOW`."""
        children: list[tuple[tuple[int, int, int, int], list[Holder]]] = []
        for n, (quick, pods) in enumerate(rooms):
            if len(children) >= CHAIN_WINDOW:  # the rest (dearer by the rooms' order) are a cut
                self._cut(one_more(base))
                break
            new = [h for h in pods if h.name not in names]
            if not new:
                continue
            if len(new) < len(pods):
                quick = lead(new)
            head = (
                max(base.priority, quick.priority),
                0,
                base.pods + quick.pods,
                base.priorities + quick.priorities,
            )
            if self.search.best is not None and head > self.search.best.cost[:4]:
                if (
                    quick.priority > base.priority
                    and n + 1 < len(rooms)
                    and rooms[n + 1][0].priority >= quick.priority
                ):
                    break  # rooms are in order of priority: every one left is dearer too
                continue  # dearer than the best on the leading terms, whatever its age
            children.append((head, new))
        return children

    def _cut(self, bound: Cost) -> None:
        self.cut = bound if self.cut is None or bound < self.cut else self.cut

    def rooms(self, request: PodRequest) -> list[Room]:
        """Every set of candidates in the way of a placement this one-device request could take,
        anywhere in the fleet (free placements need no set), cheapest first; once per request."""
        found = self._rooms.get(request)
        if found is not None:
            return found
        sets: dict[tuple[str, ...], Room] = {}
        for node in self.search.everywhere:
            for g in node.gpus:
                for p in self.search.homes.usable(request, g):
                    found_here = self.search.overlapping(node, g, p)
                    if found_here is not None and found_here[1]:
                        sets.setdefault(found_here[0], (lead(found_here[1]), found_here[1]))
        self._rooms[request] = found = sorted(sets.values(), key=lambda s: (s[0], [h.name for h in s[1]]))
        return found


def _left_beside(pod: PodRequest, node: Node, victims: Sequence[Holder]) -> dict[str, int]:
    """The slices the set's GPUs keep taken once it is freed and the pod placed on its node (the
    engine on that node alone; the other replacements not placed)."""
    after = without(node.gpus, victims)
    plan = place_on(pod, after)
    taken = {
        g.uuid: g.occupied_mask for g in after if any(u == g.uuid for h in victims for u, _ in h.placements)
    }
    for d in plan.devices if plan is not None else ():
        if d.gpu_uuid in taken:
            taken[d.gpu_uuid] |= d.placement.mask
    return taken
