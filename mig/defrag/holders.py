"""The running MIG pods the defrag advisor may remove, and how it reads them from plain Kubernetes JSON.

See docs/defrag.md.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mig.allowlist import ResourceNames
from mig.annotations import EVICTABLE
from mig.placement import PodRequest, RequestError
from mig.pods import gpu_request, metadata_of
from mig.types import Placement


@dataclass(frozen=True)
class Holder:
    """A running MIG pod as the advisor sees it: what it holds and what removing it costs."""

    name: str  # namespace/name
    node: str
    placements: tuple[tuple[str, Placement], ...]  # (GPU UUID, placement) of every device it holds
    priority: int = 0
    started: float = 0.0  # epoch seconds it started running
    groups: tuple[str, ...] = ()  # the PodDisruptionBudgets (namespace/name) that select it
    candidate: bool = True  # may be part of the advice at all
    # What its replacement asks for (its controller recreates it with the same spec); None: nothing
    # recreates it (a bare pod) or it cannot be read, so removing it loses it.
    request: PodRequest | None = None


def pod_priority(pod: Mapping[str, Any]) -> int:
    """spec.priority (set by the API server from the PriorityClass); 0 when absent or unreadable."""
    spec = pod.get("spec")
    value = spec.get("priority") if isinstance(spec, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _epoch(text: Any) -> float | None:
    if not isinstance(text, str) or len(text) > 40:
        return None
    try:
        return float(calendar.timegm(time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return None


def pod_started(pod: Mapping[str, Any]) -> float:
    """When the pod started (status.startTime, else its creation), epoch seconds; 0 when unknown."""
    status = pod.get("status")
    start = _epoch(status.get("startTime")) if isinstance(status, Mapping) else None
    return start if start is not None else (_epoch(metadata_of(pod).get("creationTimestamp")) or 0.0)


_PINNED_KINDS = ("DaemonSet",)  # recreated on the same node only: the advisor does not move them


def replacement_request(pod: Mapping[str, Any], names: ResourceNames) -> PodRequest | None:
    """What the pod's replacement asks for, when its controller recreates it after an eviction (an
    ownerReference with controller: true, not a DaemonSet, which is pinned to its node); None for a
    bare pod, a pinned one, or a request that cannot be read (the advisor then counts it lost)."""
    owners = metadata_of(pod).get("ownerReferences")
    if not isinstance(owners, list) or len(owners) > 64:
        return None
    controllers = [o for o in owners if isinstance(o, Mapping) and o.get("controller") is True]
    if len(controllers) != 1 or controllers[0].get("kind") in _PINNED_KINDS:
        return None
    try:
        return gpu_request(pod, names)
    except (RequestError, TypeError, ValueError, AttributeError):
        return None


def opted_in(pod: Mapping[str, Any]) -> bool:
    """The pod carries `dynmig.io/evictable: "true"`: the defrag controller may evict it."""
    annotations = metadata_of(pod).get("annotations")
    return isinstance(annotations, Mapping) and str(annotations.get(EVICTABLE, "")).strip().lower() == "true"
