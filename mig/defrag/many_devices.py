"""The search for a pod of several devices: uniform-cost search over sets per node, capped, with a greedy
set past the cap. See docs/defrag.md, "Search".
"""

from __future__ import annotations

import heapq
from dataclasses import replace

from mig.defrag.advice import Advice
from mig.defrag.budgets import within_budgets
from mig.defrag.cost import Cost, cost
from mig.defrag.holders import Holder
from mig.defrag.nodes import Node, place_on, without
from mig.defrag.relay import relay
from mig.defrag.search import Search
from mig.defrag.text import no_set
from mig.placement import Plan


def many_devices(search: Search, max_checks: int) -> tuple[int, bool]:
    """Offer each node's sets in order of their cost with none lost (each tried only after every
    cheaper one), until no set left can beat the best or `max_checks` engine calls are spent:
    (engine calls spent, whether the cap stopped the search)."""
    now, checks = search.now, 0
    pools = [_pool(node, now) for node in search.fleet]
    heap: list[tuple[Cost, int, int, tuple[int, ...]]] = []  # (cost, node index, next candidate, set)
    for i, node in enumerate(search.fleet):
        if not pools[i]:
            continue
        if checks >= max_checks:
            return checks, True
        checks += 1  # can the pod fit at all once every candidate here is gone?
        if place_on(search.pod, without(node.gpus, pools[i])):
            heapq.heappush(heap, (cost(node.name, (), now), i, 0, ()))
    while heap:
        bound, i, _, chosen = heap[0]
        if search.beaten(bound):
            break  # every set left costs at least the best found
        heapq.heappop(heap)
        if checks >= max_checks:
            return checks, True
        node, victims = search.fleet[i], tuple(pools[i][k] for k in chosen)
        if chosen:
            group = within_budgets(victims, search.budgets)
            if group:
                search.blocked.add(group)
                continue  # every superset breaks the same budget
            checks += 1
            if place_on(search.pod, without(node.gpus, victims)) is not None:
                search.offer(node, victims, bound)
        for k in range(chosen[-1] + 1 if chosen else 0, len(pools[i])):
            bigger = (*chosen, k)
            heapq.heappush(heap, (cost(node.name, (pools[i][j] for j in bigger), now), i, k, bigger))
    return checks, False


def past_the_cap(search: Search, checks: int, allowance: int) -> Advice:
    """The best set found so far, or a re-laid region's (`relay`), or else the greedy one; not proven
    cheapest."""
    relay(search)
    if search.best is not None:
        return search.answer(checks, exact=False)
    found = _greedy(search, checks, allowance)
    if not found.found:
        return found
    placed = search.homes.place(search.pod, found.node, found.victims)
    lost = len(found.victims) if placed is None else sum(m.plan is None for m in placed[1])
    if search.require_homes and lost:
        return no_set(set(), found.checks, True, 1)
    return replace(found, moves=() if placed is None else placed[1])


def _pool(node: Node, now: float) -> list[Holder]:
    """The node's candidates, cheapest first."""
    return sorted((h for h in node.holders if h.candidate), key=lambda h: cost(node.name, (h,), now))


def _greedy(search: Search, checks: int, allowance: int) -> Advice:
    """Per node, start from every candidate and drop the costliest while the pod fits.

    Spends at most `allowance` more engine calls (stopping at the first node with a set once spent).
    """
    pod, now = search.pod, search.now
    best: tuple[Cost, Node, tuple[Holder, ...], Plan] | None = None
    limit = checks + allowance
    for node in search.fleet:
        if checks >= limit and best is not None:
            break
        if checks >= limit + allowance:
            break
        keep = _pool(node, now)
        plan = place_on(pod, without(node.gpus, keep)) if keep else None
        if plan is None:
            continue
        for h in sorted(keep, key=lambda h: cost(node.name, (h,), now), reverse=True):
            trial = [x for x in keep if x is not h]
            fits = place_on(pod, without(node.gpus, trial)) if trial else None
            checks += 1
            if fits is not None:
                keep, plan = trial, fits
        if within_budgets(keep, search.budgets):
            continue
        c = cost(node.name, keep, now)
        if best is None or c < best[0]:
            best = (c, node, tuple(keep), plan)
    if best is None:
        return no_set(set(), checks, capped=True)
    _, node, victims, plan = best
    return Advice(victims, node.name, plan, False, checks)
