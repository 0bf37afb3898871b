"""What the defrag advisor answers: the set to remove, where the pod then lands, and where each removed
pod's replacement is expected to go. See docs/defrag.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mig.defrag.holders import Holder
from mig.placement import Plan


@dataclass(frozen=True)
class Move:
    """Where a removed pod's replacement is expected to go: the engine's plan, or None (lost)."""

    victim: Holder
    plan: Plan | None


@dataclass(frozen=True)
class Advice:
    """The cheapest legal set found (empty `victims` with `node` "" means none), and how it was found."""

    victims: tuple[Holder, ...] = ()
    node: str = ""
    plan: Plan | None = None  # where the engine places the pod once the set is gone
    exact: bool = True  # False: the search was capped, the set is not proven cheapest
    checks: int = 0  # engine calls spent
    why_none: str = ""  # when there is no set: why
    blocked_by_budget: tuple[str, ...] = field(default=())  # PDB groups that ruled out a set
    moves: tuple[Move, ...] = ()  # per victim, most important first: where it goes, or lost

    @property
    def found(self) -> bool:
        return bool(self.victims)

    @property
    def lost(self) -> tuple[Holder, ...]:
        """The victims whose replacements the engine could not place (or that nothing recreates)."""
        return tuple(m.victim for m in self.moves if m.plan is None)
