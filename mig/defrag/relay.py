"""Re-laid GPUs: when no set found so far gives every pod a home, every candidate on one GPU, or on two,
removed and the set tried on the whole fleet, regions in the order `regions` ranks them; a set that
works is made smaller. See docs/defrag.md, "Re-laid GPUs".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from mig.defrag.budgets import within_budgets
from mig.defrag.cost import cost
from mig.defrag.holders import Holder
from mig.defrag.homes import Trial
from mig.defrag.limits import MAX_RELAY_SHRINK, RELAY_SETTLE
from mig.defrag.nodes import in_the_way, place_on, usable_placements, without
from mig.defrag.regions import regions
from mig.defrag.search import Best, Search
from mig.defrag.waste import Instance, Waste
from mig.placement import GpuState, PodRequest
from mig.types import Placement


def relay(search: Search) -> bool:
    """Re-lay regions for the search, unless its best set already loses nobody; False when what it
    found, or the trials it ran out of, leave the advice not proven cheapest."""
    return _Relay(search).run()


class _Relay:
    """One advice's re-lay over its `Search`."""

    def __init__(self, search: Search):
        self.search = search
        self.trials = 0
        self.tried: set[frozenset[str]] = set()  # sets a re-lay tried (regions overlap)
        self.proven = True  # False: the best is a re-laid region's, or the trials ran out first

    def run(self) -> bool:
        """When no set found so far gives every pod a home: re-lay regions, most wasteful first
        (`regions`): remove every candidate on one GPU, or on two (a PodDisruptionBudget's pods past
        what it allows stay), and try the set on the whole fleet. A pod in no one's way, or one the
        engine places nowhere, keeps its place and the rest is tried again (`RELAY_SETTLE` trials a
        region). The first set that works is made smaller (`_smaller`) and kept when it beats the best.
        At most `max_relay_trials` (`MAX_RELAY_TRIALS` unless the caller says) plus `MAX_RELAY_SHRINK`
        trials; what it finds is not proven cheapest, and a search its trials ran out in is not exact:
        False then."""
        if not self.search.loses_nobody():
            self._lay()
        return self.proven

    def _lay(self) -> None:
        everything = [g for node in self.search.everywhere for g in node.gpus]
        measure = Waste(everything)
        spare = {g.uuid: measure.usable_free(g) for g in everything}
        spare_total, need = sum(spare.values()), measure.least(self.search.pod)
        # One model: an instance takes no less room on another GPU, so a GPU wastes its free room only;
        # the bound below at its best, before reading every instance.
        one_model = len({(g.type, id(g.profiles), g.memory_mb) for g in everything}) == 1
        if (
            one_model
            and _two_largest(measure.free(g) - spare[g.uuid] for g in everything) + spare_total < need - 1e-9
        ):
            return
        gpus, waste, held, by_gpu = self._waste(measure)
        if _two_largest(waste[g.uuid] - spare[g.uuid] for g in gpus) + spare_total < need - 1e-9:
            return  # no region of one or two GPUs could hold the pod (the bound below, at its best)
        memo: dict[PodRequest, dict[tuple[int, int], list[Placement]]] = {}

        def usable(request: PodRequest, g: GpuState) -> list[Placement]:
            return usable_placements(request, g, request.devices()[0][2], memo.setdefault(request, {}))

        for region in regions(gpus, waste, held, usable):
            if self.trials >= self.search.max_relay_trials:
                self.proven = False
                return
            # Room the region could gain (its waste) plus what is free and usable elsewhere must hold
            # the pod: each pod takes at least its least share wherever it goes (a bound for every
            # subset of the region's pods too: a pod that stays keeps at least that share).
            if sum(waste[u] - spare[u] for u in region) + spare_total < need - 1e-9:
                continue
            if self._lay_region(region, by_gpu, usable):
                return

    def _lay_region(
        self,
        region: tuple[str, ...],
        by_gpu: Mapping[str, list[Holder]],
        usable: Callable[[PodRequest, GpuState], list[Placement]],
    ) -> bool:
        """Try one region: True when a set of its pods works (kept as the best when it beats it)."""
        pods = self._within_budgets({h.name: h for u in region for h in by_gpu[u]}.values())
        if not self._may_land(region, pods, usable):
            return False
        settled = self._settle(pods)
        if settled is None:
            return False
        victims, trial = self._smaller(*settled)
        c = cost(trial.plan.node, victims, self.search.now)
        if not self.search.beaten(c):
            node = next(n for n in self.search.everywhere if n.name == trial.plan.node)
            self.search.best = Best(c, node, victims, (trial.plan, trial.moves), chain=True)
            self.proven = False
        return True

    def _waste(
        self, measure: Waste
    ) -> tuple[list[GpuState], dict[str, float], dict[str, list[Instance]], dict[str, list[Holder]]]:
        """The GPUs with candidates on them (in the fleet's order), their waste, the instances each
        GPU holds (placement, request, may go) and its candidates."""
        by_gpu: dict[str, list[Holder]] = {}
        held: dict[str, list[Instance]] = {}
        for node in self.search.everywhere:
            for h in node.holders:
                for u, p in h.placements:
                    held.setdefault(u, []).append((p, h.request, h.candidate))
                    if h.candidate:
                        mine = by_gpu.setdefault(u, [])
                        if not mine or mine[-1] is not h:
                            mine.append(h)
        everything = [g for node in self.search.everywhere for g in node.gpus]
        gpus = [g for g in everything if g.uuid in by_gpu]
        waste = {g.uuid: measure.of(g, held.get(g.uuid, ())) for g in gpus}
        return gpus, waste, held, by_gpu

    def _may_land(
        self,
        region: tuple[str, ...],
        pods: tuple[Holder, ...],
        usable: Callable[[PodRequest, GpuState], list[Placement]],
    ) -> bool:
        """The pod, which fits nowhere now, can land only on the region's nodes: a one-device pod at a
        usable placement over none of what stays on a region GPU; others by the engine on each node
        the region touches, with the region's pods gone (one node, not the whole fleet)."""
        going = {(u, p) for h in pods for u, p in h.placements}
        if self.search.pod.device_count != 1:
            return any(
                place_on(self.search.pod, without(node.gpus, pods)) is not None
                for node in self.search.fleet
                if any(g.uuid in region for g in node.gpus)
            )
        for node in self.search.fleet:
            for g in node.gpus:
                if g.uuid not in region:
                    continue
                stays = 0
                for p in g.occupied:
                    stays |= 0 if p.size <= 0 or (g.uuid, p) in going else p.mask
                if any(not q.mask & stays for q in usable(self.search.pod, g)):
                    return True
        return False

    def _within_budgets(self, pods: Iterable[Holder]) -> tuple[Holder, ...]:
        """The pods, cheapest first, each kept while the set stays within every budget."""
        kept: list[Holder] = []
        for h in sorted(pods, key=lambda h: cost("", (h,), self.search.now)):
            if within_budgets((*kept, h), self.search.budgets):
                self.search.blocked.add(within_budgets((*kept, h), self.search.budgets))
            else:
                kept.append(h)
        return tuple(sorted(kept, key=lambda h: h.name))

    def _relay_trial(self, victims: tuple[Holder, ...]) -> Trial | None:
        """A whole-fleet trial of the set, stopped at the first pod it would lose (it must lose none)."""
        self.trials += 1
        return self.search.homes.trial(self.search.pod, self.search.allowed, victims, until_lost=True)

    def _fresh(self, victims: tuple[Holder, ...]) -> bool:
        """The set was not tried by an earlier region (whose answer it would repeat); now it is."""
        key = frozenset(h.name for h in victims)
        if key in self.tried:
            return False
        self.tried.add(key)
        return True

    def _settle(self, victims: tuple[Holder, ...]) -> tuple[tuple[Holder, ...], Trial] | None:
        """The region's set, pods in no one's way or placed nowhere dropped until it works (or None)."""
        for _ in range(RELAY_SETTLE):
            if not victims:
                return None
            if self.trials >= self.search.max_relay_trials:
                self.proven = False
                return None
            if not self._fresh(victims):
                return None
            trial = self._relay_trial(victims)
            if trial is None:
                return None
            lost = {m.victim.name for m in trial.moves if m.plan is None}
            drop = lost or _idle(trial)  # a stopped trial says nothing of who is in whose way
            if not drop:
                return victims, trial
            victims = tuple(h for h in victims if h.name not in drop)
        return None

    def _smaller(self, victims: tuple[Holder, ...], trial: Trial) -> tuple[tuple[Holder, ...], Trial]:
        """A working set made smaller: first the pods it needed (`_needed`: pods that only took rooms
        pods not needed freed, e.g. two that swapped GPUs, stay where they are), then its core (the
        pods in the pending pod's way and those whose replacement goes to another GPU; the rest only
        changed places on their own GPU), then each pod, costliest first, kept in place when the
        others still work without it."""
        spent = 0
        for keep in (_needed, _core):  # each read from the trial that works so far
            kept = keep(trial)
            if len(kept) < len(victims):
                spent += 1
                fewer = tuple(h for h in victims if h.name in kept)
                again = self._relay_trial(fewer)
                if _works(again):
                    assert again is not None
                    victims, trial = fewer, again
        for h in sorted(victims, key=lambda h: cost("", (h,), self.search.now), reverse=True):
            if spent >= MAX_RELAY_SHRINK or len(victims) == 1:
                break
            spent += 1
            fewer = tuple(x for x in victims if x is not h)
            again = self._relay_trial(fewer)
            if _works(again):
                assert again is not None
                victims, trial = fewer, again
        return victims, trial


def _idle(trial: Trial) -> set[str]:
    """The victims of a trial in no one's way (neither the pod's nor another replacement's)."""
    return {
        m.victim.name
        for m in trial.moves
        if not in_the_way(trial.plan, (m.victim,))
        and not any(
            o.plan is not None and o is not m and in_the_way(o.plan, (m.victim,)) for o in trial.moves
        )
    }


def _works(trial: Trial | None) -> bool:
    """The trial placed the pod and every replacement, each victim in someone's way."""
    return trial is not None and trial.legal and all(m.plan is not None for m in trial.moves)


def _core(trial: Trial) -> set[str]:
    """The victims in the pod's way, and those whose replacement goes to another GPU than they held."""
    return {
        m.victim.name
        for m in trial.moves
        if in_the_way(trial.plan, (m.victim,))
        or (
            m.plan is not None and {d.gpu_uuid for d in m.plan.devices} != {u for u, _ in m.victim.placements}
        )
    }


def _needed(trial: Trial) -> set[str]:
    """The victims a working trial needed: those in the pod's way, then those in the way of where a
    needed one's replacement went, and so on (the others only took room that pods not needed freed)."""
    by_name = {m.victim.name: m for m in trial.moves}
    todo = [m.victim.name for m in trial.moves if in_the_way(trial.plan, (m.victim,))]
    needed = set(todo)
    while todo:
        plan = by_name[todo.pop()].plan
        if plan is None:
            continue
        for m in trial.moves:
            if m.victim.name not in needed and in_the_way(plan, (m.victim,)):
                needed.add(m.victim.name)
                todo.append(m.victim.name)
    return needed


def _two_largest(values: Iterable[float]) -> float:
    return sum(sorted(values, reverse=True)[:2])
