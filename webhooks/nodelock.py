"""HAMi's node lock: node annotation `hami.io/mutex.lock` = `<RFC3339>,<pod namespace>,<pod name>`.

It serializes binds (and the device plugin's Allocate) per node: the extender takes it before the
Binding, the device plugin releases it after Allocate. Semantics (reference §3.3): absent → take;
held by the same pod → fine; older than the expiry (default 5 minutes) or held by a pod that no
longer exists → take over; otherwise the bind fails with "node lock contention". Every write is a
merge patch carrying the node's resourceVersion, so two takers cannot both win; a conflict
re-reads the node and retries after a jittered backoff.
"""

from __future__ import annotations

import datetime as dt
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kube.errors import Conflict
from mig.annotations import NODE_LOCK
from webhooks.kube import Kube


class NodeLocked(RuntimeError):
    """Another pod holds the node lock and it is neither expired nor orphaned."""


@dataclass(frozen=True)
class LockValue:
    taken: dt.datetime | None
    namespace: str
    name: str


def format_lock(now: dt.datetime, namespace: str, name: str) -> str:
    return f"{now.astimezone(dt.UTC).strftime('%Y-%m-%dT%H:%M:%SZ')},{namespace},{name}"


def parse_lock(value: str) -> LockValue:
    """`<time>,<ns>,<name>` or HAMi's legacy bare timestamp; an unreadable time counts as expired."""
    parts = value.split(",")
    try:
        taken = dt.datetime.fromisoformat(parts[0].strip())
        if taken.tzinfo is None:
            taken = taken.replace(tzinfo=dt.UTC)
    except ValueError:
        taken = None
    if len(parts) >= 3:
        return LockValue(taken, parts[1], ",".join(parts[2:]))
    return LockValue(taken, "", "")


def _lock_of(node: Mapping[str, Any]) -> str | None:
    ann = (node.get("metadata") or {}).get("annotations") or {}
    return ann.get(NODE_LOCK)


def node_lock_value(node: Mapping[str, Any]) -> LockValue | None:
    held = _lock_of(node)
    return parse_lock(held) if held else None


def _version(node: Mapping[str, Any]) -> str:
    return (node.get("metadata") or {}).get("resourceVersion") or ""


class NodeLock:
    def __init__(
        self,
        kube: Kube,
        expiry: float = 300.0,
        retries: int = 5,
        base_delay: float = 0.05,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.kube = kube
        self.expiry = expiry
        self.retries = retries
        self.base_delay = base_delay
        self.clock = clock
        self.sleep = sleep

    def acquire(
        self,
        node: str,
        namespace: str,
        name: str,
        owner_exists: Callable[[str, str], bool],
        cached: Mapping[str, Any] | None = None,
    ) -> None:
        """Take the lock for pod namespace/name (idempotent for the same pod); raise NodeLocked."""
        current = cached
        for attempt in range(self.retries):
            if current is None:
                current = self.kube.get_node(node)
            held = _lock_of(current)
            if held:
                value = parse_lock(held)
                if (value.namespace, value.name) == (namespace, name):
                    return
                if not self._takeable(value, owner_exists):
                    raise NodeLocked(
                        f"node {node} has been locked within {self._expiry_text()} by "
                        f"{value.namespace}/{value.name}: node lock contention"
                    )
            if self._write(node, current, format_lock(self.clock(), namespace, name)):
                return
            current = None
            self.sleep(self.base_delay * (2**attempt) * (0.5 + random.random()))
        raise NodeLocked(
            f"node {node}: could not take the node lock after {self.retries} attempts (concurrent updates)"
        )

    def release(self, node: str, namespace: str, name: str) -> None:
        """Remove the lock if this pod holds it (never someone else's)."""
        for _ in range(self.retries):
            current = self.kube.get_node(node)
            value = node_lock_value(current)
            if value is None or (value.namespace, value.name) != (namespace, name):
                return
            if self._write(node, current, None):
                return

    def _write(self, node: str, current: Mapping[str, Any], value: str | None) -> bool:
        """Set (or with None remove) the lock on the node as it was read; False when someone wrote
        the node meanwhile (409 Conflict on its resourceVersion), so the caller re-reads and decides again."""
        patch = {"metadata": {"resourceVersion": _version(current), "annotations": {NODE_LOCK: value}}}
        try:
            self.kube.patch_node(node, patch)
            return True
        except Conflict:
            return False

    def _takeable(self, value: LockValue, owner_exists: Callable[[str, str], bool]) -> bool:
        if value.taken is None or (self.clock() - value.taken).total_seconds() > self.expiry:
            return True
        return bool(value.name) and not owner_exists(value.namespace, value.name)

    def blocked(
        self,
        locks: Mapping[str, LockValue],
        namespace: str,
        name: str,
        owner_exists: Callable[[str, str], bool],
    ) -> dict[str, str]:
        """Nodes a bind of pod namespace/name would fail on right now, with the reason (for filter).

        Runs on every filter over every locked node, so the clock is read once and the expiry is
        one comparison per lock (the same rule as `_takeable`)."""
        cutoff = self.clock() - dt.timedelta(seconds=self.expiry)
        expiry = self._expiry_text()
        out = {}
        for node, value in list(locks.items()):  # a copy: the node watch updates `locks` meanwhile
            taken = value.taken
            if taken is None or taken < cutoff or (value.namespace, value.name) == (namespace, name):
                continue
            if value.name and not owner_exists(value.namespace, value.name):
                continue
            out[node] = (
                f"node lock held by {value.namespace}/{value.name} (a bind is in progress; the device "
                f"plugin releases it after Allocate, or it expires after {expiry})"
            )
        return out

    def _expiry_text(self) -> str:
        minutes, seconds = divmod(int(self.expiry), 60)
        return f"{minutes}m{seconds}s"
