"""The search for a one-device pod: every placement it could take, once. See docs/defrag.md, "Search".

The pods overlapping a placement are the only legal set that frees it, so every legal set is found by
looking at every placement once (linear in the fleet); the sets are offered in order of their cost
with no pod lost, and the search stops at the first that no later one can beat.
"""

from __future__ import annotations

from mig.defrag.budgets import within_budgets
from mig.defrag.cost import Cost, Lead, cost, lead
from mig.defrag.holders import Holder
from mig.defrag.nodes import usable_placements
from mig.defrag.search import Search
from mig.types import Placement


def one_device(search: Search) -> None:
    """Offer every set that frees a placement the pod could take, cheapest first, until none can win."""
    for quick, i, victims in sorted(_sets(search).values(), key=lambda s: s[0]):
        if search.best is not None and _past(search.best.cost, quick):
            break
        node = search.fleet[i]
        bound = cost(node.name, victims, search.now)
        if not search.beaten(bound):
            search.offer(node, victims, bound)


def _sets(search: Search) -> dict[tuple[str, tuple[str, ...]], tuple[Lead, int, tuple[Holder, ...]]]:
    """Per (node, pods' names): the set in the way of a placement the pod could take, with its lead
    and its node's index; sets blocked by a budget, or led by a more important pod than the cheapest
    one's (unless homes are required), left out."""
    ask = search.pod.devices()[0][2]
    sets: dict[tuple[str, tuple[str, ...]], tuple[Lead, int, tuple[Holder, ...]]] = {}
    usable: dict[tuple[int, int], list[Placement]] = {}  # (id of profiles, memory) -> placements
    top: Lead | None = None  # the leading terms of the cheapest set so far
    for i, node in enumerate(search.fleet):
        for g in node.gpus:
            for p in usable_placements(search.pod, g, ask, usable):
                found_here = search.overlapping(node, g, p)
                if found_here is None:
                    continue
                victims = found_here[1]
                group = within_budgets(victims, search.budgets)
                if group:  # before it may prune dearer sets: a blocked set is no cheapest
                    search.blocked.add(group)
                    continue
                quick = lead(victims)
                if top is not None and quick.priority > top.priority and not search.require_homes:
                    continue  # a more important pod: never cheaper, whatever it loses
                top = quick if top is None or quick < top else top
                sets.setdefault((node.name, found_here[0]), (quick, i, victims))
    return sets


def _past(best: Cost, quick: Lead) -> bool:
    """Sets from here on (taken in order of their lead) cannot beat the best: a more important pod,
    or, when the best loses nobody, more pods or more priority."""
    return quick.priority > best.priority or (
        best.lost == 0 and quick > (best.priority, best.pods, best.priorities)
    )
