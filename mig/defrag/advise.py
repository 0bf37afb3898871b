"""The defrag advisor's entry point: the cheapest legal set of running MIG pods whose removal lets the
placement engine place a pending pod. See docs/defrag.md.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from mig.defrag.advice import Advice
from mig.defrag.chains import chains
from mig.defrag.holders import Holder
from mig.defrag.homes import Homes
from mig.defrag.limits import MAX_CHECKS, MAX_MOVES, MAX_RELAY_TRIALS
from mig.defrag.many_devices import many_devices, past_the_cap
from mig.defrag.nodes import by_node, place_on
from mig.defrag.one_device import one_device
from mig.defrag.relay import relay
from mig.defrag.search import Search
from mig.placement import GpuState, PodRequest


def advise(
    pod: PodRequest,
    gpus: Sequence[GpuState],
    holders: Sequence[Holder],
    budgets: Mapping[str, int] | None = None,
    now: float = 0.0,
    nodes: Collection[str] | None = None,
    max_checks: int = MAX_CHECKS,
    known_unplaceable: bool = False,
    require_homes: bool = False,
    max_moves: int = MAX_MOVES,
    homes: Homes | None = None,
    max_relay_trials: int = MAX_RELAY_TRIALS,
) -> Advice:
    """The cheapest legal set of `holders` whose removal lets the engine place `pod` (docs/defrag.md).

    `known_unplaceable`: the caller already asked the engine (e.g. its live index) and the pod does
    not fit now, so the advisor does not build an index of the whole fleet to ask again.
    `require_homes`: only sets whose every removed pod is placed again (moves, none lost).
    Replacements are placed on all of `gpus` (any node), whatever `nodes` allows for the pod.
    `homes`: a `Homes` over these same `gpus`, shared between advice over one fleet (else built here).
    `max_relay_trials`: whole-fleet trials of re-laid GPUs; a search they run out in is not exact.
    """
    budgets = budgets or {}
    if not pod.devices():
        return Advice(why_none="the pod asks for no MIG device")
    fleet = by_node(gpus, holders, nodes)
    if not known_unplaceable and place_on(pod, [g for n in fleet for g in n.gpus]) is not None:
        return Advice(why_none="the pod fits without removing anything")
    homes = homes if homes is not None else Homes(gpus)
    homes.placed = 0
    everywhere = fleet if nodes is None else by_node(gpus, holders, None)
    allowed = None if nodes is None else [n.name for n in fleet]
    search = Search(
        pod, fleet, budgets, now, homes, require_homes, max_moves, everywhere, allowed, max_relay_trials
    )
    if pod.device_count == 1:
        one_device(search)
        return conclude(search, checks=1)
    checks, capped = many_devices(search, max_checks)
    return past_the_cap(search, checks, max_checks) if capped else conclude(search, checks)


def conclude(search: Search, checks: int) -> Advice:
    """The advice once a search has offered its sets: chains, then re-laid GPUs, when they may still
    find a cheaper set; exact unless one of them was cut short."""
    cut = chains(search)
    proven = relay(search)
    return search.answer(checks, exact=proven, cut=cut)
