"""The order removed pods' replacements are placed in, which is the order the controller evicts them in.
See docs/defrag.md, "Order".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from mig.defrag.advice import Advice
from mig.defrag.holders import Holder
from mig.defrag.nodes import in_the_way
from mig.placement import Plan, PodRequest


def replacement_order(
    victims: Iterable[Holder], fits_now: Callable[[PodRequest | None], bool] = lambda r: False
) -> list[Holder]:
    """The order replacements are placed in, which is the order the controller evicts them in: most
    important first (kube-scheduler's queue pops higher priority first, and among equal ones the one
    queued first), then those whose request fits nowhere now (they need the room the set frees: a pod
    evicted only to make room for another goes after it, or it might take its own room back), then name."""
    return sorted(victims, key=lambda h: (-h.priority, fits_now(h.request), h.name))


def placing_order(
    victims: Sequence[Holder], placed: list[Plan], fits_now: Callable[[PodRequest | None], bool]
) -> Iterable[Holder]:
    """The victims in the order their replacements are placed (`placed` grows as they are): most
    important first; among equal priorities, next the one whose slices a pod placed so far took
    (the pending pod, or a replacement: it was moved to make that room, so it goes right after the
    pod that needed it), else `replacement_order`'s (those that fit nowhere now first, then name)."""
    left = replacement_order(victims, fits_now)
    while left:
        top = left[0].priority
        pick = next(
            (h for h in left if h.priority == top and any(in_the_way(p, (h,)) for p in placed)), left[0]
        )
        left.remove(pick)
        yield pick


def eviction_order(advice: Advice) -> tuple[Holder, ...]:
    """The order to evict the set in: the order the advisor placed the replacements in (among equal
    priorities kube-scheduler takes the replacement queued first), so a pod that needs the room
    another's move makes is placed before that other pod can take its own room back."""
    if len(advice.moves) == len(advice.victims):
        return tuple(m.victim for m in advice.moves)
    return tuple(replacement_order(advice.victims))
