"""One advice's search: the sets offered cheapest first (by their cost with no pod lost), each priced
with its lost pods (bounded first, placed on the whole fleet only when the bound cannot decide), and
the best kept. The strategies that offer sets are `one_device`, `many_devices`, `chains` and `relay`;
see docs/defrag.md, "Search".
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from mig.defrag.advice import Advice, Move
from mig.defrag.budgets import within_budgets
from mig.defrag.cost import Cost, cost
from mig.defrag.holders import Holder
from mig.defrag.homes import Homes
from mig.defrag.limits import MAX_MOVES, MAX_RELAY_TRIALS
from mig.defrag.nodes import Node, overlapping, owners, place_on, without
from mig.defrag.text import no_set
from mig.placement import GpuState, Plan, PodRequest
from mig.types import Placement


@dataclass
class Best:
    cost: Cost
    node: Node
    victims: tuple[Holder, ...]
    placed: tuple[Plan, tuple[Move, ...]] | None = None  # from `Homes.place`, when it was run
    chain: bool = False  # found on the whole fleet (a chain, a re-lay): `placed` is its trial


class Seed(NamedTuple):
    """A set that places the pod but strands a pod: where chains start."""

    bound: Cost  # its cost with none lost
    node: Node
    victims: tuple[Holder, ...]
    lost: tuple[Holder, ...]  # the victims known or likely lost


class Search:
    """The state one advice's strategies share: the pod, the fleet, the best set so far and why sets
    were ruled out."""

    def __init__(
        self,
        pod: PodRequest,
        fleet: list[Node],
        budgets: Mapping[str, int],
        now: float,
        homes: Homes,
        require_homes: bool,
        max_moves: int = MAX_MOVES,
        everywhere: list[Node] | None = None,
        allowed: Collection[str] | None = None,
        max_relay_trials: int = MAX_RELAY_TRIALS,
    ):
        self.pod, self.fleet, self.budgets, self.now = pod, fleet, budgets, now
        self.homes, self.require_homes, self.max_moves = homes, require_homes, max_moves
        self.everywhere = everywhere if everywhere is not None else fleet  # where replacements may go
        self.allowed = allowed  # the nodes the pod may land on (None: any)
        self.max_relay_trials = max_relay_trials
        self.best: Best | None = None
        self.blocked: set[str] = set()
        self.capped = False  # a set needed the exact placement past `max_moves`
        self.homeless = 0  # legal sets ruled out by `require_homes`
        self.seeds: list[Seed] = []
        self._overlaps: dict[tuple[str, Placement], tuple[tuple[str, ...], tuple[Holder, ...]] | None] = {}
        self._owner_maps: dict[str, dict[tuple[str, Placement], Holder]] = {}

    def beaten(self, bound: Cost) -> bool:
        """No set of at least this cost can improve on the best so far."""
        return self.best is not None and bound >= self.best.cost

    def loses_nobody(self) -> bool:
        """The best set so far gives every removed pod a home."""
        return self.best is not None and self.best.cost.lost == 0

    def offer(self, node: Node, victims: tuple[Holder, ...], bound: Cost) -> None:
        """Price a set whose pod fits once it is gone (`bound`: its cost with no pod lost)."""
        group = within_budgets(victims, self.budgets)
        if group:
            self.blocked.add(group)
            return
        sure = self.homes.surely_lost(self.pod, node.gpus, victims)
        if sure is None:
            return
        if sure:
            self.seeds.append(Seed(bound, node, victims, self._stranding(victims)))
        if self.require_homes and sure:
            self.homeless += 1
            return
        low = cost(node.name, victims, self.now, sure)
        if self.beaten(low):
            return
        if len(victims) == 1 or sure == len(victims):  # the bound is the count: no placement needed
            self.best = Best(low, node, victims)
            return
        if self.homes.placed >= self.max_moves:
            self.capped = True
            return
        trial = self.homes.trial(self.pod, node.name, victims)
        if trial is None:
            return
        stranded = tuple(m.victim for m in trial.moves if m.plan is None)
        if sure:  # the bound's guess may miss a pod the trial strands (see `_stranding`)
            guess = self.seeds[-1].lost
            self.seeds[-1] = Seed(bound, node, victims, guess + tuple(h for h in stranded if h not in guess))
        elif stranded and trial.legal:
            self.seeds.append(Seed(bound, node, victims, stranded))
        if not trial.legal:
            return
        placed, lost = (trial.plan, trial.moves), len(stranded)
        if self.require_homes and lost:
            self.homeless += 1
            return
        c = cost(node.name, victims, self.now, lost)
        if not self.beaten(c):
            self.best = Best(c, node, victims, placed)

    def _stranding(self, victims: tuple[Holder, ...]) -> tuple[Holder, ...]:
        """The victims a set that surely loses a pod likely strands, before any trial: those nothing
        recreates or whose request fits on no other node now. A guess: a victim that fits elsewhere
        alone may still be stranded when another replacement takes that room first, so a set priced
        by a trial is grown from the pods the trial strands too. A set left untried (its bound beaten, or
        ruled out by `require_homes`) may keep the guess: a set containing it can only be cheaper by
        giving a home to one of its surely lost pods, and those are all in the guess."""
        return tuple(
            h for h in victims if h.request is None or not self.homes.fits_elsewhere(h.request, h.node)
        )

    def overlapping(
        self, node: Node, g: GpuState, p: Placement
    ) -> tuple[tuple[str, ...], tuple[Holder, ...]] | None:
        """`nodes.overlapping` (with the pods' names), once per placement of an advice: the one-device
        search and every request's rooms ask about the same placements."""
        key = (g.uuid, p)
        if key not in self._overlaps:
            owned = self._owner_maps.get(node.name)
            if owned is None:
                owned = self._owner_maps[node.name] = owners(node.holders)
            pods = overlapping(g, p, owned)
            self._overlaps[key] = None if pods is None else (tuple(h.name for h in pods), pods)
        return self._overlaps[key]

    def answer(self, checks: int, exact: bool, cut: Cost | None = None) -> Advice:
        """The advice: the best set, or why there is none. `exact`: no strategy was cut short; `cut`:
        the cheapest bound the chains left unexplored (the best is not proven cheapest above it)."""
        chain_cut = cut is not None and (self.best is None or cut < self.best.cost)
        exact = exact and not chain_cut
        if self.best is None:
            return no_set(self.blocked, checks, not exact or self.capped, self.homeless)
        best = self.best
        placed = best.placed or self.homes.place(self.pod, best.node.name, best.victims)
        if placed is None:  # the whole-fleet engine placed the pod elsewhere on the node: its own view
            plan, moves = place_on(self.pod, without(best.node.gpus, best.victims)), tuple[Move, ...]()
        else:
            plan, moves = placed
        return Advice(
            best.victims,
            plan.node if best.chain and plan is not None else best.node.name,
            plan,
            exact and not self.capped,
            checks,
            "",
            tuple(sorted(self.blocked)),
            moves,
        )
