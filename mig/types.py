"""The small shared vocabulary of the domain: placements on a GPU's memory-slice axis."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Placement:
    """A GPU instance's interval [start, start+size) on the memory-slice axis of one GPU."""

    start: int
    size: int

    @property
    def end(self) -> int:
        return self.start + self.size

    @property
    def mask(self) -> int:
        """Bitmask of the slices this placement occupies (bit i = slice i)."""
        return ((1 << self.size) - 1) << self.start

    def overlaps(self, other: Placement) -> bool:
        return self.start < other.end and other.start < self.end

    def __str__(self) -> str:
        return f"{self.start}:{self.size}"
