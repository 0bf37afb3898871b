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
import heapq
import itertools
import random
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from kube.errors import Conflict
from mig.annotations import (
    NODE_LOCK,
    PLUGIN_CLAIMS,
    PLUGIN_CLAIMS_PODRESOURCES,
    NodeLockValue,
    decode_node_lock,
    encode_node_lock,
)
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


def lock_free(node: Mapping[str, Any] | None) -> bool:
    """The node's device plugin says it is dynmig's and finds Allocate's pod through kubelet's
    PodResources API (`dynmig.io/plugin-claims: podresources-v1`, plugin/podfinder.py): binds there
    need not take HAMi's node lock, and several pods may be bound at once. Any other node (no
    annotation, another value: a HAMi plugin, an older dynmig) keeps HAMi's lock exactly."""
    if not node:
        return False
    ann = (node.get("metadata") or {}).get("annotations") or {}
    return ann.get(PLUGIN_CLAIMS) == PLUGIN_CLAIMS_PODRESOURCES


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
            self.kube.patch_node(node, patch, reply=False)
            return True
        except Conflict:
            return False

    def _takeable(self, value: LockValue, owner_exists: Callable[[str, str], bool]) -> bool:
        if value.taken is None or (self.clock() - value.taken).total_seconds() > self.expiry:
            return True
        return value.owner is not None and not owner_exists(*value.owner)

    def table(self) -> LockTable:
        """An empty table of the node locks, judged by this lock's expiry and clock (the cache fills it)."""
        return LockTable(self.expiry, self.clock)

    def _expiry_text(self) -> str:
        return _expiry_text(self.expiry)


def _expiry_text(expiry: float) -> str:
    minutes, seconds = divmod(int(expiry), 60)
    return f"{minutes}m{seconds}s"


Owner = tuple[str, str]


class LockTable:
    """The node locks the cache sees, and which of them a bind of another pod would fail on now.

    The same rule as `NodeLock._takeable`, kept in step with the node and pod watches instead of
    judged lock by lock on every filter: a lock blocks every pod but its owner unless its time is
    unreadable or older than the expiry, or the pod it names no longer exists. So a filter judges
    and words no lock: it takes one copy of the blocking nodes' dict (a C-level copy, linear but
    small next to judging each lock) and drops its own pod's nodes. During a burst of binds most of
    a fleet can be locked, until each device plugin releases its node after Allocate.

    Not thread-safe: the cache calls every method under its own lock."""

    def __init__(
        self, expiry: float = 300.0, clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)
    ):
        self.expiry = expiry
        self.clock = clock
        self.values: dict[str, LockValue] = {}  # every node carrying hami.io/mutex.lock
        self._blocking: dict[
            str, LockValue
        ] = {}  # readable, not yet seen expired, owner present or none named
        self._owned: dict[Owner, set[str]] = {}  # pod -> nodes whose lock names it
        self._deadlines: list[tuple[dt.datetime, int, str, LockValue]] = []  # by time taken
        self._seq = itertools.count()

    def set(self, node: str, value: LockValue | None, exists: Callable[[str, str], bool]) -> None:
        """The node's lock is now `value` (None: it carries none); `exists` tells whether a pod exists."""
        old = self.values.pop(node, None)
        if old is not None:
            self._blocking.pop(node, None)
            owned = self._owned.get(old.owner) if old.owner else None
            if owned is not None:
                owned.discard(node)
                if not owned:
                    del self._owned[old.owner]  # type: ignore[arg-type]
        if value is None:
            return
        self.values[node] = value
        owner = value.owner
        if owner is not None:
            self._owned.setdefault(owner, set()).add(node)
        if owner is None or exists(*owner):
            self._block(node, value)

    def replace(self, values: Mapping[str, LockValue], exists: Callable[[str, str], bool]) -> None:
        """After a relist of the nodes (or the pods): every lock judged again."""
        self.values, self._blocking, self._owned, self._deadlines = {}, {}, {}, []
        for node, value in values.items():
            self.set(node, value, exists)

    def pod_appeared(self, owner: Owner) -> None:
        """A pod of this namespace/name exists again: locks naming it block again (unless expired)."""
        for node in self._owned.get(owner, ()):
            self._block(node, self.values[node])

    def pod_gone(self, owner: Owner) -> None:
        """No pod of this namespace/name exists: locks naming it are orphaned, takeable by any bind."""
        for node in self._owned.get(owner, ()):
            self._blocking.pop(node, None)

    def blocked(self, namespace: str, name: str) -> Blocked:
        """Nodes a bind of pod namespace/name would fail on right now, with the reason."""
        self._expire()
        locks = self._blocking.copy()
        for node in self._owned.get((namespace, name), ()):
            locks.pop(node, None)
        return Blocked(locks, _expiry_text(self.expiry))

    def _block(self, node: str, value: LockValue) -> None:
        taken = value.taken
        if taken is None or taken < self.clock() - dt.timedelta(seconds=self.expiry):
            return  # unreadable or expired: takeable by any bind
        self._blocking[node] = value
        heapq.heappush(self._deadlines, (taken, next(self._seq), node, value))
        self._expire()  # also here: the heap stays bounded by the locks taken within the expiry

    def _expire(self) -> None:
        """Forget locks past the expiry (the oldest first)."""
        cutoff = self.clock() - dt.timedelta(seconds=self.expiry)
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] < cutoff:
            _, _, node, value = heapq.heappop(deadlines)
            if self._blocking.get(node) is value:
                del self._blocking[node]


class Blocked(Mapping[str, str]):
    """Nodes a bind would fail on because of their lock, each with its reason (worded when read:
    a filter that places the pod reads none)."""

    def __init__(self, locks: Mapping[str, LockValue], expiry: str):
        self.locks = locks
        self._expiry = expiry

    def __getitem__(self, node: str) -> str:
        value = self.locks[node]
        return (
            f"node lock held by {value.namespace}/{value.name} (a bind is in progress; the device "
            f"plugin releases it after Allocate, or it expires after {self._expiry})"
        )

    def __iter__(self) -> Iterator[str]:
        return iter(self.locks)

    def __len__(self) -> int:
        return len(self.locks)
