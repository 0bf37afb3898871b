"""In-memory object storage with one global resourceVersion counter (as etcd has) and a bounded
watch history per resource type.

Objects are stored as plain dicts and never mutated once stored, so watch events and readers can
share them without copying, and a new version shares every part a write did not change with the
version before it. Pods (and every namespaced type) are indexed by namespace and name, so
get and namespaced list are not proportional to the whole cluster.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sim.apiserver.resources import STORED, ResourceType


class Frame(dict[str, Any]):
    """One watch event as sent ({"type", "object"}), shared by every watcher it is sent to, with
    its encoded line once the first watcher has encoded it: the object is a stored one and never
    changes, so each event is encoded once, not once per watcher."""

    __slots__ = ("line",)

    def __init__(self, kind: str, obj: dict[str, Any]):
        super().__init__(type=kind, object=obj)
        self.line: bytes | None = None


@dataclass(frozen=True)
class WatchEvent:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    obj: dict[str, Any]
    old: dict[str, Any] | None
    frames: dict[tuple[str, str], Frame] = field(default_factory=dict, compare=False, repr=False)

    def frame(
        self, kind: str, version: str = "", serve: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    ) -> Frame:
        """The event as watchers see it when it reports `obj` as `kind` (the store's own event, or
        ADDED for a watcher whose selector the object just entered), in the API `version` it is
        served through (`serve` converts the stored object to it)."""
        got = self.frames.get((kind, version))
        if got is None:
            obj = serve(self.obj) if serve else self.obj
            got = self.frames.setdefault((kind, version), Frame(kind, obj))
        return got


class Table:
    """All objects of one resource type plus its recent change history."""

    def __init__(self, rt: ResourceType, lock: threading.RLock, history: int):
        self.rt = rt
        self.objects: dict[str, dict[str, dict[str, Any]]] = {}
        self.history: deque[WatchEvent] = deque(maxlen=history)
        self.compacted_rv = 0
        self.changed = threading.Condition(lock)

    def get(self, ns: str, name: str) -> dict[str, Any] | None:
        return self.objects.get(ns, {}).get(name)

    def items(self, ns: str | None) -> list[dict[str, Any]]:
        if ns is not None:
            bucket = self.objects.get(ns, {})
            return [bucket[k] for k in sorted(bucket)]
        return [self.objects[n][k] for n in sorted(self.objects) for k in sorted(self.objects[n])]

    def events_after(self, rv: int) -> list[WatchEvent]:
        """Events newer than rv, oldest first (caller holds the lock)."""
        out = []
        for ev in reversed(self.history):
            if ev.rv <= rv:
                break
            out.append(ev)
        out.reverse()
        return out


class Store:
    def __init__(self, history: int = 50_000):
        self.lock = threading.RLock()
        self.rv = 0
        self.tables: dict[tuple[str, str], Table] = {rt.key: Table(rt, self.lock, history) for rt in STORED}

    def table(self, rt: ResourceType) -> Table:
        return self.tables[rt.storage_key]

    def next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def commit(
        self, rt: ResourceType, ns: str, name: str, obj: dict[str, Any] | None, event: str
    ) -> dict[str, Any] | None:
        """Store (or remove, obj None) an object, stamp a fresh resourceVersion, record the event.

        Caller holds `self.lock` and has already checked preconditions.
        """
        table = self.tables[rt.storage_key]
        old = table.get(ns, name)
        rv = self.next_rv()
        if obj is None:
            if old is None:
                return None
            del table.objects[ns][name]
            if not table.objects[ns]:
                del table.objects[ns]
            gone = {**old, "metadata": {**old["metadata"], "resourceVersion": str(rv)}}
            self._record(table, WatchEvent(rv, "DELETED", gone, old))
            return gone
        obj["metadata"]["resourceVersion"] = str(rv)
        table.objects.setdefault(ns, {})[name] = obj
        self._record(table, WatchEvent(rv, event, obj, old))
        return obj

    def _record(self, table: Table, ev: WatchEvent) -> None:
        if table.history.maxlen and len(table.history) == table.history.maxlen:
            table.compacted_rv = table.history[0].rv
        table.history.append(ev)
        table.changed.notify_all()

    def compact(self) -> None:
        """Forget all watch history, as etcd compaction does: older resourceVersions get 410 Gone."""
        with self.lock:
            for table in self.tables.values():
                table.history.clear()
                table.compacted_rv = self.rv
                table.changed.notify_all()

    def wake_all(self) -> None:
        with self.lock:
            for table in self.tables.values():
                table.changed.notify_all()
