"""Scheduling failure messages in kube-scheduler's words."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

NO_NODES = "no nodes available to schedule pods"


def fit_error(num_all_nodes: int, reasons: Mapping[str, str | list[str]]) -> str:
    """`0/N nodes are available: <count> <reason>, ....` with reasons counted and sorted as
    kube-scheduler's FitError does (by the "<count> <reason>" string); a node may have several
    (NodeResourcesFit gives one per missing resource), each counted."""
    histogram = Counter(r for why in reasons.values() for r in ([why] if isinstance(why, str) else why))
    parts = sorted(f"{count} {reason}" for reason, count in histogram.items())
    msg = f"0/{num_all_nodes} nodes are available:"
    if parts:
        msg += " " + ", ".join(parts) + "."
    return msg


def prefilter_error(num_all_nodes: int, message: str) -> str:
    """FitError when a PreFilter plugin rejected the pod: its message for every node at once."""
    return f"0/{num_all_nodes} nodes are available: {message}."


def scheduled(namespace: str, name: str, node: str) -> str:
    return f"Successfully assigned {namespace}/{name} to {node}"


NOTE_LIMIT = 1024  # bytes: the API server's limit on an event's note (validation.NoteLengthLimit)


def truncated(message: str) -> str:
    """kube-scheduler's truncateMessage: at most NOTE_LIMIT bytes, the cut marked " ..."."""
    data = message.encode()
    if len(data) <= NOTE_LIMIT:
        return message
    return data[: NOTE_LIMIT - 4].decode(errors="ignore") + " ..."
