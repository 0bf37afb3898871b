"""The scheduler's event recorder: events.k8s.io/v1 Events, written off the scheduling and binding
paths by one writer thread fed through a bounded queue, as kube-scheduler's event broadcaster
(k8s.io/client-go/tools/events) does.

What we checked (client-go tools/events, v1.35):
- an event is `<object name>.<unix nanoseconds in hex>` in the object's namespace, with eventTime
  (microseconds), reportingController (the profile's schedulerName), reportingInstance
  (`<controller>-<hostname>`), action, reason, regarding (the pod's ObjectReference, its
  resourceVersion included), note and type; the queue holds 1,000 and drops when full;
- repeats are keyed by type, action, reason, reporting controller and instance, regarding and
  related (not by note): the first is created; the second turns the cached event into a series of
  count 2 and writes it as a strategic merge patch of `series` (created instead when the patch
  finds no event); later repeats only count in memory, written when the series is refreshed (every
  30 minutes) or finished (idle for 6 minutes, then forgotten); a singleton is forgotten 6 minutes
  after it happened. So the API shows count 2 for a pod refused ten times in a minute, as a real
  cluster does.

Not simulated: the broadcaster's retries of a failed write (up to 12, 10 s apart): a write that
fails is logged and dropped. The series cache is bounded (MAX_CACHED, oldest forgotten first)
where client-go's is not.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from kubernetes import client

from sim.scheduler.api import ApiWriter

log = logging.getLogger("sim.scheduler")

MAX_QUEUED = 1000  # client-go's maxQueuedEvents
FINISH_TIME = 6 * 60.0  # client-go's finishTime
REFRESH_TIME = 30 * 60.0  # client-go's refreshTime
MAX_CACHED = 50_000
_STOP = object()

Key = tuple[str, str, str, str, str, tuple[str, ...]]


class EventRecorder:
    def __init__(
        self,
        api: ApiWriter,
        hostname: str,
        finish_time: float = FINISH_TIME,
        refresh_time: float = REFRESH_TIME,
        clock: Callable[[], float] = time.time,
    ):
        self.api = api
        self.hostname = hostname
        self.dropped = 0
        self.finish_time, self.refresh_time, self.clock = finish_time, refresh_time, clock
        self._queue: queue.Queue[Any] = queue.Queue(MAX_QUEUED)
        self._cache: OrderedDict[Key, dict[str, Any]] = OrderedDict()
        self._thread = threading.Thread(target=self._run, name="sched-events", daemon=True)
        self._thread.start()

    def record(self, pod: dict[str, Any], type_: str, reason: str, action: str, note: str) -> None:
        """Queue an event about `pod` (a snapshot: the caller may not change it afterwards)."""
        try:
            self._queue.put_nowait((pod, type_, reason, action, note, time.time_ns()))
        except queue.Full:
            self.dropped += 1

    def stop(self, timeout: float = 5) -> None:
        """Write what is queued (for up to `timeout` seconds), then stop. Series counted since their
        last write are not written, as the broadcaster's Shutdown does not write them."""
        try:
            self._queue.put(_STOP, timeout=timeout)
        except queue.Full:
            return
        self._thread.join(timeout)

    def _run(self) -> None:
        next_finish = self.clock() + self.finish_time
        next_refresh = self.clock() + self.refresh_time
        while True:
            try:
                item = self._queue.get(timeout=max(0.0, min(next_finish, next_refresh) - self.clock()))
            except queue.Empty:
                item = None
            if item is _STOP:
                return
            if item is not None:
                self._guard(self._record, *item)
            now = self.clock()
            if now >= next_finish:
                self._guard(self._finish_series, now)
                next_finish = now + self.finish_time
            if now >= next_refresh:
                self._guard(self._refresh_series)
                next_refresh = now + self.refresh_time

    @staticmethod
    def _guard(step: Callable[..., None], *args: Any) -> None:
        try:
            step(*args)
        except Exception as exc:  # noqa: BLE001 - events are best effort, as in kube-scheduler
            log.debug("event %s: %s", step.__name__, exc)

    def _record(
        self, pod: dict[str, Any], type_: str, reason: str, action: str, note: str, ns_time: int
    ) -> None:
        event = self._event(pod, type_, reason, action, note, ns_time)
        key = _key(event)
        cached = self._cache.get(key)
        if cached is None:
            self._cache[key] = event
            if len(self._cache) > MAX_CACHED:
                self._cache.popitem(last=False)
            self._write(event)
            return
        observed = micro_time(ns_time / 1e9)
        if cached.get("series"):
            cached["series"] = {"count": cached["series"]["count"] + 1, "lastObservedTime": observed}
            return
        cached["series"] = {"count": 2, "lastObservedTime": observed}
        self._write(cached)

    def _event(
        self, pod: dict[str, Any], type_: str, reason: str, action: str, note: str, ns_time: int
    ) -> dict[str, Any]:
        meta = pod["metadata"]
        ns = meta.get("namespace") or "default"
        controller = (pod.get("spec") or {}).get("schedulerName") or "default-scheduler"
        regarding = {
            k: v
            for k, v in (
                ("kind", "Pod"),
                ("namespace", meta.get("namespace", "")),
                ("name", meta["name"]),
                ("uid", meta.get("uid", "")),
                ("apiVersion", "v1"),
                ("resourceVersion", meta.get("resourceVersion", "")),
            )
            if v
        }
        return {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{ns_time:x}", "namespace": ns},
            "eventTime": micro_time(ns_time / 1e9),
            "reportingController": controller,
            "reportingInstance": f"{controller}-{self.hostname}",
            "action": action,
            "reason": reason,
            "regarding": regarding,
            "note": note,
            "type": type_,
            # Go writes these struct-valued fields even when unset.
            "deprecatedSource": {},
            "deprecatedFirstTimestamp": None,
            "deprecatedLastTimestamp": None,
        }

    def _write(self, event: dict[str, Any]) -> bool:
        """Record `event` (patch its series, or create it when there is nothing to patch); False
        when it is worth trying again (the server was not reached, or a series' create found the
        event there after all), True when written or refused for good."""
        ns, name = event["metadata"]["namespace"], event["metadata"]["name"]
        try:
            if event.get("series"):
                try:
                    self.api.patch_event(ns, name, {"series": dict(event["series"])})
                    return True
                except client.ApiException as exc:
                    if exc.status != 404:
                        raise
            self.api.create_event(ns, event)
        except client.ApiException as exc:
            if exc.status == 409 and event.get("series"):
                return False
            log.debug("event %s refused (dropped): %s", name, str(exc.body)[:200])
        except Exception as exc:  # noqa: BLE001 - not reached: a later refresh may write it
            log.debug("event %s not written: %s", name, exc)
            return False
        return True

    def _refresh_series(self) -> None:
        for event in list(self._cache.values()):
            if event.get("series"):
                self._write(event)

    def _finish_series(self, now: float) -> None:
        cutoff = micro_time(now - self.finish_time)
        for key, event in list(self._cache.items()):
            series = event.get("series")
            if series:
                if series["lastObservedTime"] < cutoff and self._write(event):
                    del self._cache[key]
            elif event["eventTime"] < cutoff:
                del self._cache[key]


def _key(event: dict[str, Any]) -> Key:
    ref = event["regarding"]
    regarding = tuple(
        str(ref.get(k, "")) for k in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion")
    )
    return (
        event["type"],
        event["action"],
        event["reason"],
        event["reportingController"],
        event["reportingInstance"],
        regarding,
    )


def micro_time(when: float) -> str:
    """metav1.MicroTime as it is written: RFC 3339 in UTC with six fractional digits."""
    micros = round(when * 1e6)
    return (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(micros // 1_000_000)) + f".{micros % 1_000_000:06d}Z"
    )
