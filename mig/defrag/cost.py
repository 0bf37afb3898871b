"""The cost of removing a set of running pods: lower is better, the first field that differs decides.

The same for every caller; see docs/defrag.md, "Cost".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from mig.defrag.holders import Holder

NOBODY = -(1 << 62)  # the highest priority of an empty set: below every pod's


class Cost(NamedTuple):
    """A set's cost, compared field by field in this order (a tuple)."""

    priority: int  # the highest priority in the set: never disturb more important work than needed
    lost: int  # how many of its pods have nowhere to go once it is freed and the pod placed
    pods: int  # how many pods
    priorities: int  # the sum of their priorities
    runtime: float  # how long they have run in total, seconds: younger pods lose less work
    node: str  # then names, so that equal costs give the same answer every time
    names: tuple[str, ...]


class Lead(NamedTuple):
    """The leading fields of a set's cost with none lost: how sets are ordered before they are priced."""

    priority: int
    pods: int
    priorities: int


def cost(node: str, victims: Iterable[Holder], now: float, lost: int = 0) -> Cost:
    """The cost of removing these pods from `node`, `lost` of them with nowhere to go; with `lost` 0
    it is a lower bound of the set's cost."""
    pods = sorted(victims, key=lambda h: h.name)
    if not pods:
        return Cost(NOBODY, 0, 0, 0, 0.0, node, ())
    return Cost(
        max(h.priority for h in pods),
        lost,
        len(pods),
        sum(h.priority for h in pods),
        sum(max(0.0, now - h.started) for h in pods),
        node,
        tuple(h.name for h in pods),
    )


def lead(victims: Sequence[Holder]) -> Lead:
    """The set's `Lead`."""
    priorities = [h.priority for h in victims]
    return Lead(max(priorities, default=NOBODY), len(priorities), sum(priorities))


def one_more(base: Lead) -> Cost:
    """A bound every set one pod larger than a set of this lead meets: as important, none lost, one
    pod more (what a chain step that is not taken leaves unexplored)."""
    return Cost(base.priority, 0, base.pods + 1, base.priorities, 0.0, "", ())
