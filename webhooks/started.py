"""Time to Running: how long a MIG pod took from its creation to its containers running.

Read from the pod as the cache sees it change: the update that first shows a MIG pod (one the
scheduler placed on a MIG node, `hami.io/vgpu-node`) in phase Running after a copy that was not.
A pod already Running when serve (re)lists is not counted, so a restart counts nobody twice. The
time is the latest container's `state.running.startedAt` (kubelet's clock) minus
`metadata.creationTimestamp` (the API server's).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from mig.annotations import VGPU_NODE


def time_to_running(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> float | None:
    """Seconds from creation to running when `after` is the update that shows the MIG pod Running
    (`before`: the copy the cache held, None when it held none); else None, also for a pod whose
    fields are not what the API server writes."""
    if before is None or _phase(before) == "Running" or _phase(after) != "Running":
        return None
    meta = _map(after.get("metadata"))
    if not _map(meta.get("annotations")).get(VGPU_NODE):
        return None
    created = _time(meta.get("creationTimestamp"))
    statuses = _map(after.get("status")).get("containerStatuses")
    started = [_started(s) for s in statuses] if isinstance(statuses, list) else []
    if created is None or not started or None in started:
        return None
    return max(0.0, (max(t for t in started if t is not None) - created).total_seconds())


def _phase(pod: Mapping[str, Any]) -> str:
    return str(_map(pod.get("status")).get("phase") or "")


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _started(status: Any) -> dt.datetime | None:
    """A container status's `state.running.startedAt` (None when it is not running)."""
    return _time(_map(_map(_map(status).get("state")).get("running")).get("startedAt"))


def _time(value: Any) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
