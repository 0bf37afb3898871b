"""Defrag advice: the cheapest set of running MIG pods whose removal would let a pending pod be placed.

Pure (no I/O): the scheduler hands in the fleet as the placement engine sees it (`GpuState`s with
their occupied placements), the running pods that hold those placements (`Holder`s), and how many
more pods each PodDisruptionBudget lets go; `advise` answers with an `Advice`: a set, or why there is
none. How a set is priced, which sets are legal and how they are searched: docs/defrag.md.
"""

from mig.defrag.advice import Advice, Move
from mig.defrag.advise import advise
from mig.defrag.budgets import Budgets, selects, within_budgets
from mig.defrag.cost import Cost, cost
from mig.defrag.holders import Holder, opted_in, pod_priority, pod_started, replacement_request
from mig.defrag.homes import Homes, Trial
from mig.defrag.limits import MAX_CHECKS, MAX_MOVES, MAX_RELAY_TRIALS
from mig.defrag.order import eviction_order, replacement_order
from mig.defrag.text import MAX_ADVICE_TEXT, advice_text, bounded

__all__ = [
    "MAX_ADVICE_TEXT",
    "MAX_CHECKS",
    "MAX_MOVES",
    "MAX_RELAY_TRIALS",
    "Advice",
    "Budgets",
    "Cost",
    "Holder",
    "Homes",
    "Move",
    "Trial",
    "advice_text",
    "advise",
    "bounded",
    "cost",
    "eviction_order",
    "opted_in",
    "pod_priority",
    "pod_started",
    "replacement_order",
    "replacement_request",
    "selects",
    "within_budgets",
]
