"""Kubernetes Events about pods, posted best effort from one background thread, repeats aggregated.

Aggregation follows client-go's events broadcaster (k8s.io/client-go/tools/events, what
kube-scheduler uses): an occurrence is the same series as an earlier one when type, reason,
reporting controller, reporting instance and the object it is about match; the message is not part
of that key. The first occurrence creates a core/v1 Event (count 1); a repeat bumps `count`,
`lastTimestamp` and takes the latest message (what is true now), written as one patch. A series
idle for `FINISH_AFTER` seconds is forgotten, so the next occurrence starts a new Event, as the
broadcaster's finishSeries does.

The caller never waits: `record` only updates the series in memory and marks it dirty; the sender
thread writes each dirty series once, however many repeats came in between (a pod refused on every
scheduling attempt costs one PATCH per send, not one object per attempt). Both the dirty queue and
the series cache are bounded; a dropped occurrence or a failed write is counted through `dropped`.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

log = logging.getLogger(__name__)

MAX_MESSAGE = 1024  # bytes: the API server's limit on an Event's note (NoteLengthLimit)
FINISH_AFTER = 6 * 60.0  # client-go's finishTime
TIMEOUT = (3.0, 10.0)  # (connect, read) seconds for one write

Key = tuple[str, str, str, str, str]  # (object uid or namespace/name, type, reason, kind, distinct)


@dataclass(frozen=True)
class Regarding:
    """The object an event is about (an ObjectReference)."""

    kind: str
    namespace: str
    name: str
    uid: str = ""
    api_version: str = "v1"

    @classmethod
    def pod(cls, obj: Mapping[str, Any]) -> Regarding:
        meta = obj.get("metadata") or {}
        return cls(
            "Pod", str(meta.get("namespace") or "default"), str(meta.get("name") or ""), _s(meta, "uid")
        )

    @property
    def event_namespace(self) -> str:
        """Where its Events go: its namespace; "default" for a cluster-scoped object such as a Node
        (as kubelet posts a Node's events)."""
        return self.namespace or "default"

    def reference(self) -> dict[str, str]:
        ref = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name}
        if self.namespace:
            ref["namespace"] = self.namespace
        if self.uid:
            ref["uid"] = self.uid
        return ref


def _s(meta: Mapping[str, Any], key: str) -> str:
    value = meta.get(key)
    return value if isinstance(value, str) else ""


@dataclass
class _Series:
    regarding: Regarding
    type: str
    reason: str
    message: str
    first: float
    last: float
    count: int = 1
    name: str = ""  # the Event's name once created
    dirty: bool = False  # changed since the last write (queued for the sender)


class EventRecorder:
    """Aggregating, non-blocking event poster for one component (and instance) of dynmig."""

    def __init__(
        self,
        core: Any | None,  # kubernetes.client.CoreV1Api, or None to post nothing
        component: str,
        instance: str = "",
        host: str = "",
        capacity: int = 1000,
        dropped: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self.core = core
        self.component = component
        self.instance = instance or component
        self.host = host  # source.host, as kubelet sets it: the node an event comes from
        self.capacity = capacity
        self._dropped = dropped or (lambda reason: None)
        self._clock = clock
        self._series: OrderedDict[Key, _Series] = OrderedDict()
        self._dirty: deque[Key] = deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=f"{component}-events", daemon=True)

    # ---- the caller's side (never blocks on the API) ------------------------------------------
    def start(self) -> EventRecorder:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Write what is pending (within `timeout`), then stop the sender."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def record(self, pod: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
        """An event about a pod given as its object (only metadata is read)."""
        self.record_about(Regarding.pod(pod), event_type, reason, message)

    def record_about(
        self, regarding: Regarding, event_type: str, reason: str, message: str, distinct: str = ""
    ) -> None:
        """`distinct` splits what would be one series (like the broadcaster's `action` and `related`):
        each MIG instance of a pod gets its own event, not one whose message the next replaces."""
        now = self._clock()
        who = regarding.uid or f"{regarding.namespace}/{regarding.name}"
        key: Key = (who, event_type, reason, regarding.kind, distinct)
        text = cap(message)
        with self._cond:
            series = self._series.get(key)
            if series is not None and now - series.last > FINISH_AFTER:
                del self._series[key]
                series = None
            if series is None:
                if len(self._series) >= self.capacity and not self._evict():
                    self._dropped("queue-full")
                    return
                series = _Series(regarding, event_type, reason, text, now, now)
                self._series[key] = series
            else:
                series.count += 1
                series.last, series.message = now, text
                self._series.move_to_end(key)
            if not series.dirty:
                series.dirty = True
                self._dirty.append(key)
                self._cond.notify()

    def _evict(self) -> bool:
        """Forget the least recently seen series that has nothing left to write (caller holds the lock)."""
        for key, series in self._series.items():
            if not series.dirty:
                del self._series[key]
                return True
        return False

    def pending(self) -> int:
        with self._cond:
            return len(self._dirty)

    # ---- the sender thread ---------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._dirty and not self._stopping:
                    self._cond.wait()
                if not self._dirty:
                    return
                key = self._dirty.popleft()
                series = self._series.get(key)
                if series is None:
                    continue
                series.dirty = False
                snapshot = replace(series)
            name = self._write(snapshot)
            with self._cond:
                series.name = name

    def _write(self, s: _Series) -> str:
        """Create or patch the series' Event; its name, or "" when the write failed (counted)."""
        core = self.core
        if core is None:
            return s.name or "unposted"
        try:
            if s.name:
                try:
                    self._patch(core, s)
                    return s.name
                except Exception as error:
                    if getattr(error, "status", None) != 404:
                        raise
            return self._create(core, s)
        except Exception as error:  # noqa: BLE001 - events are best effort; never fail the caller
            self._dropped("api-error")
            log.warning(
                "could not post event %s about %s/%s: %s",
                s.reason,
                s.regarding.namespace,
                s.regarding.name,
                str(error)[:200],
            )
            return s.name

    def _create(self, core: Any, s: _Series) -> str:
        name = f"{s.regarding.name or s.regarding.kind.lower()}.{uuid.uuid4().hex[:16]}"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": s.regarding.event_namespace},
            "involvedObject": s.regarding.reference(),
            "reason": s.reason,
            "message": s.message,
            "type": s.type,
            "source": {"component": self.component, **({"host": self.host} if self.host else {})},
            "reportingComponent": self.component,
            "reportingInstance": self.instance,
            "firstTimestamp": _stamp(s.first),
            "lastTimestamp": _stamp(s.last),
            "count": s.count,
        }
        _drain(
            core.create_namespaced_event(
                s.regarding.event_namespace, body, _preload_content=False, _request_timeout=TIMEOUT
            )
        )
        return name

    def _patch(self, core: Any, s: _Series) -> None:
        patch = {"count": s.count, "lastTimestamp": _stamp(s.last), "message": s.message}
        _drain(
            core.patch_namespaced_event(
                s.name,
                s.regarding.event_namespace,
                patch,
                _content_type="application/merge-patch+json",
                _preload_content=False,
                _request_timeout=TIMEOUT,
            )
        )


def cap(message: str, limit: int = MAX_MESSAGE) -> str:
    """At most `limit` bytes of UTF-8 (the API server counts bytes), cut with "…" on a character."""
    data = message.encode("utf-8", "replace")
    if len(data) <= limit:
        return message
    return data[: limit - 3].decode("utf-8", "ignore") + "…"


def _stamp(when: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))


def _drain(response: Any) -> None:
    """Read the reply so its connection goes back to the pool."""
    _ = response.data
