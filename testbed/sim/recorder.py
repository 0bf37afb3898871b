"""Events as Kubernetes components record them: one core/v1 Event per occurrence, best effort.

What the simulated kubelet and the lab's controllers write about the objects they act on, in the
shape client-go's event recorder gives them: `involvedObject` naming the object (kind, API
version, namespace, name, uid, resourceVersion when known), `source` and `reportingComponent`
naming the writer (and the node, for a kubelet), first and last timestamps equal, count 1, the
message cut at 1,024 characters. A failed write is logged and dropped, as the recorder drops it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

log = logging.getLogger(__name__)
MAX_MESSAGE = 1024


def record(
    core: Any,
    regarding: dict[str, Any],
    *,
    api_version: str,
    kind: str,
    type_: str,
    reason: str,
    message: str,
    component: str,
    host: str = "",
) -> None:
    """Write an Event about `regarding` (an object as read) through `core` (a CoreV1Api)."""
    meta = regarding["metadata"]
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    involved = {
        "kind": kind,
        "namespace": meta["namespace"],
        "name": meta["name"],
        "uid": meta["uid"],
        "apiVersion": api_version,
    }
    if meta.get("resourceVersion"):
        involved["resourceVersion"] = meta["resourceVersion"]
    source = {"component": component, **({"host": host} if host else {})}
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{time.time_ns():x}", "namespace": meta["namespace"]},
        "involvedObject": involved,
        "reason": reason,
        "message": message[:MAX_MESSAGE],
        "type": type_,
        "source": source,
        "reportingComponent": component,
        **({"reportingInstance": host} if host else {}),
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        core.create_namespaced_event(meta["namespace"], body, _preload_content=False, _request_timeout=5)
    except Exception as error:  # noqa: BLE001 - events are best effort, as the event recorder's
        log.debug("%s: event %s on %s %s not written: %s", component, reason, kind, meta["name"], error)
