"""Why a pod does not fit: a short code per GPU or node (for metrics) plus text a person can act on."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property

UNHEALTHY = "unhealthy"
CORDONED = "cordoned"
NO_PROFILES = "no-mig-profiles"
EXCLUDED = "excluded-by-annotation"
NOT_ENOUGH_MEMORY = "no-profile-large-enough"
NOT_ENOUGH_SLICES = "not-enough-free-slices"
FRAGMENTED = "fragmented"
DEVICES_DO_NOT_FIT_TOGETHER = "devices-do-not-fit-together"
NO_GPUS = "no-mig-gpus"

MAX_NODE_TEXT = 1024  # one node's line in an extender's FailedNodes

# When a node has several GPU reasons, its headline is the one closest to fitting.
_CLOSEST_FIRST = (
    DEVICES_DO_NOT_FIT_TOGETHER,
    FRAGMENTED,
    NOT_ENOUGH_SLICES,
    NOT_ENOUGH_MEMORY,
    EXCLUDED,
    NO_PROFILES,
    CORDONED,
    UNHEALTHY,
    NO_GPUS,
)


@dataclass(frozen=True)
class Reason:
    """One refusal: `code` is stable and short (a metric label), `message` says what to change."""

    code: str
    message: str
    node: str
    gpu: str | None = None  # GPU UUID, or None for a node-level reason

    def __str__(self) -> str:
        where = f"{self.node}/{self.gpu}" if self.gpu else self.node
        return f"{where}: {self.message}"


class Refusal:
    """No node can take the whole pod: every reason, per node and per GPU.

    The reasons may be given as a function: the engine hands over a snapshot of the fleet and the
    texts are only built when someone reads them, so refusing stays as cheap as placing.
    """

    fits = False

    def __init__(self, reasons: Iterable[Reason] | Callable[[], Iterable[Reason]]):
        self._source = reasons

    @cached_property
    def reasons(self) -> tuple[Reason, ...]:
        src = self._source
        return tuple(src() if callable(src) else src)

    def __repr__(self) -> str:
        return f"Refusal({self.summary()!r})"

    @cached_property
    def _by_node(self) -> dict[str, list[Reason]]:
        out: dict[str, list[Reason]] = {}
        for r in self.reasons:
            out.setdefault(r.node, []).append(r)
        return out

    def by_node(self) -> dict[str, list[Reason]]:
        """Reasons grouped by node, built once (every lookup below is linear in one node's reasons)."""
        return self._by_node

    def node_code(self, node: str) -> str:
        codes = {r.code for r in self._by_node.get(node, ())}
        return next((c for c in _CLOSEST_FIRST if c in codes), NO_GPUS)

    def node_message(self, node: str, limit: int = MAX_NODE_TEXT) -> str:
        """One line per node for an extender's FailedNodes map, at most `limit` characters."""
        parts = [(f"GPU {r.gpu}: {r.message}" if r.gpu else r.message) for r in self._by_node.get(node, ())]
        return bounded_join(parts, limit, "GPUs")

    def counts(self) -> Counter[str]:
        """Nodes per headline code (like kube-scheduler's "3 Insufficient ..." counts)."""
        return Counter(self.node_code(n) for n in self.by_node())

    def summary(self) -> str:
        nodes = self.by_node()
        parts = ", ".join(f"{n} {code}" for code, n in sorted(self.counts().items()))
        return f"0/{len(nodes)} nodes can place the pod's MIG devices: {parts}"


def bounded_join(parts: list[str], limit: int, what: str, sep: str = "; ") -> str:
    """`parts` joined by `sep`, cut before `limit` characters with "and N more <what>" (linear)."""
    out: list[str] = []
    size = 0
    for i, part in enumerate(parts):
        if size + len(part) + len(sep) > limit and out:
            out.append(f"and {len(parts) - i} more {what}")
            break
        out.append(part if len(part) <= limit else part[:limit] + "…")
        size += len(part) + len(sep)
    return sep.join(out)


def slices_text(slices: list[int]) -> str:
    return ",".join(str(s) for s in slices) if slices else "none"


def placements_text(placements: Iterable[object]) -> str:
    return ",".join(str(p) for p in placements)
