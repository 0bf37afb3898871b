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
from typing import Any

from kube.errors import Conflict
from mig.annotations import NODE_LOCK, NodeLockValue, decode_node_lock, encode_node_lock
from webhooks.kube import Kube


class NodeLocked(RuntimeError):
    """Another pod holds the node lock and it is neither expired nor orphaned."""


LockValue = NodeLockValue  # the decoded lock (mig/annotations.py holds its codec)


def _lock_of(node: Mapping[str, Any]) -> str | None:
    ann = (node.get("metadata") or {}).get("annotations") or {}
    return ann.get(NODE_LOCK)


def node_lock_value(node: Mapping[str, Any]) -> LockValue | None:
    held = _lock_of(node)
    return decode_node_lock(held) if held else None


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
                value = decode_node_lock(held)
                if value.owner == (namespace, name):
                    return
                if not self._takeable(value, owner_exists):
                    raise NodeLocked(
                        f"node {node} has been locked within {self._expiry_text()} by "
                        f"{value.namespace}/{value.name}: node lock contention"
                    )
            if self._write(node, current, encode_node_lock(self.clock(), namespace, name)):
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
            if value is None or value.owner != (namespace, name):
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
        return value.owner is not None and not owner_exists(*value.owner)

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
            owner = value.owner
            if taken is None or taken < cutoff or owner == (namespace, name):
                continue
            if owner is not None and not owner_exists(*owner):
                continue
            out[node] = (
                f"node lock held by {value.namespace}/{value.name} (a bind is in progress; the device "
                f"plugin releases it after Allocate, or it expires after {expiry})"
            )
        return out

    def _expiry_text(self) -> str:
        minutes, seconds = divmod(int(self.expiry), 60)
        return f"{minutes}m{seconds}s"
