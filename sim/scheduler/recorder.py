"""The scheduler's event recorder: events are written off the scheduling and binding paths, by one
writer thread fed through a bounded queue, as client-go's event broadcaster does for kube-scheduler
(a queue of 1,000 that drops events when full: an event is informative, never a reason to wait).

A repeat of the same event (same pod UID, reason and message) bumps the stored one's count instead
of writing a new one, as client-go's recorder aggregates.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any

from kubernetes import client

log = logging.getLogger("sim.scheduler")

MAX_QUEUED = 1000  # client-go's maxQueuedEvents
_STOP = object()


class EventRecorder:
    def __init__(self, core: client.CoreV1Api):
        self.core = core
        self.dropped = 0
        self._queue: queue.Queue[Any] = queue.Queue(MAX_QUEUED)
        self._seen: dict[tuple[str, str, str], tuple[str, int]] = {}
        self._thread = threading.Thread(target=self._run, name="sched-events", daemon=True)
        self._thread.start()

    def record(self, pod: dict[str, Any], type_: str, reason: str, message: str) -> None:
        """Queue an event about `pod` (a snapshot: the caller may not change it afterwards)."""
        try:
            self._queue.put_nowait((pod, type_, reason, message, _now()))
        except queue.Full:
            self.dropped += 1

    def stop(self, timeout: float = 5) -> None:
        """Write what is queued (for up to `timeout` seconds), then stop."""
        try:
            self._queue.put(_STOP, timeout=timeout)
        except queue.Full:
            return
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            try:
                self._write(*item)
            except Exception as exc:  # noqa: BLE001 - events are best effort, as in kube-scheduler
                log.debug("event for %s: %s", item[0].get("metadata", {}).get("name"), exc)

    def _write(self, pod: dict[str, Any], type_: str, reason: str, message: str, now: str) -> None:
        meta = pod["metadata"]
        ns, component = meta.get("namespace", "default"), pod.get("spec", {}).get("schedulerName", "")
        ident = (meta.get("uid", ""), reason, message)
        seen = self._seen.get(ident)
        if seen:
            name, count = seen
            _drain(
                self.core.patch_namespaced_event(
                    name, ns, {"count": count + 1, "lastTimestamp": now}, _preload_content=False
                )
            )
            self._seen[ident] = (name, count + 1)
            return
        name = f"{meta['name']}.{time.time_ns():x}"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": ns},
            "involvedObject": {
                "kind": "Pod",
                "namespace": ns,
                "name": meta["name"],
                "uid": meta.get("uid", ""),
                "apiVersion": "v1",
                "resourceVersion": meta.get("resourceVersion", ""),
            },
            "reason": reason,
            "message": message,
            "type": type_,
            "source": {"component": component},
            "reportingComponent": component,
            "reportingInstance": component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        _drain(self.core.create_namespaced_event(ns, body, _preload_content=False))
        if len(self._seen) > 10_000:
            self._seen.clear()
        self._seen[ident] = (name, 1)


def _drain(resp: Any) -> None:
    _ = resp.data


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
