"""A cache of nodes and pods fed by list+watch with the official client: no API read per request.

Each resource has a reflector thread (kube.reflector: list, watch from the list's resourceVersion,
bookmarks, resume after a dropped watch, relist on `410 Gone`). Objects stay plain JSON dicts.
Every change is forwarded to the `Fleet`, which keeps occupancy and the placement index in step.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from kube.mirror import object_key
from kube.reflector import Reflector
from webhooks.fleet import Fleet
from webhooks.kube import Kube
from webhooks.nodelock import Blocked, LockTable, LockValue, node_lock_value
from webhooks.started import time_to_running

log = logging.getLogger(__name__)


class ClusterCache:
    """Nodes and pods by name, mirrored from watches into a `Fleet`."""

    def __init__(
        self,
        kube: Kube,
        fleet: Fleet,
        watch_timeout: int = 240,
        locks: LockTable | None = None,
        on_running: Callable[[float], None] = lambda seconds: None,
    ):
        self.kube = kube
        self.fleet = fleet
        self.on_running = on_running  # a MIG pod's time to Running (webhooks/started.py)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self._locks = locks if locks is not None else LockTable()  # nodes carrying hami.io/mutex.lock
        self.nodes_reflector = Reflector(
            "nodes",
            kube.core.list_node,
            self._replace_nodes,
            self._node_event,
            self._stop,
            watch_timeout,
            self._mark_synced,
        )
        self.pods_reflector = Reflector(
            "pods",
            kube.core.list_pod_for_all_namespaces,
            self._replace_pods,
            self._pod_event,
            self._stop,
            watch_timeout,
            self._mark_synced,
        )

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self) -> ClusterCache:
        self.nodes_reflector.start()
        self.pods_reflector.start()
        return self

    def wait_synced(self, timeout: float | None = None) -> bool:
        return bool(self.nodes_reflector.synced.wait(timeout) and self.pods_reflector.synced.wait(timeout))

    @property
    def synced(self) -> bool:
        return self.nodes_reflector.synced.is_set() and self.pods_reflector.synced.is_set()

    def _mark_synced(self) -> None:
        self.fleet.synced = self.synced

    def stop(self) -> None:
        self._stop.set()
        self.nodes_reflector.join(5)
        self.pods_reflector.join(5)

    # ---- lookups -----------------------------------------------------------------------------
    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.pods.get((namespace, name))

    def node(self, name: str) -> dict[str, Any] | None:
        return self.nodes.get(name)

    def cached_pod(self, namespace: str, name: str, uid: str = "") -> dict[str, Any] | None:
        """The pod from the cache, if it is there (with this UID, when one is given)."""
        pod = self.pod(namespace, name)
        if pod is not None and (not uid or (pod.get("metadata") or {}).get("uid") == uid):
            return pod
        return None

    def find_pod(self, namespace: str, name: str, uid: str = "") -> dict[str, Any] | None:
        """The pod from the cache or, when the cache has none (or another pod of that name), the API."""
        pod = self.cached_pod(namespace, name, uid)
        if pod is not None:
            return pod
        return self.kube.pod_or_none(namespace, name)  # the watch may lag the scheduler's own by a moment

    @property
    def locks(self) -> Mapping[str, LockValue]:
        """Every node lock the cache sees, by node."""
        return self._locks.values

    def blocked(self, namespace: str, name: str) -> Blocked:
        """Nodes a bind of pod namespace/name would fail on now because of their node lock."""
        with self._lock:
            return self._locks.blocked(namespace, name)

    def note_lock(self, node: str, value: LockValue) -> None:
        """The node lock this process has just written, before its watch event arrives: the next
        filter must already see the node as locked, or it sends another pod into a failing bind."""
        with self._lock:
            self._locks.set(node, value, self.pod_exists)

    def pod_exists(self, namespace: str, name: str) -> bool:
        return (namespace, name) in self.pods

    def objects(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(nodes, pods) as the cache holds them now: lists copied under the lock, objects shared
        (never modified in place: each watch event replaces a whole object)."""
        with self._lock:
            return list(self.nodes.values()), list(self.pods.values())

    # ---- feed --------------------------------------------------------------------------------
    def _replace_nodes(self, items: list[dict[str, Any]]) -> None:
        with self._lock:
            self.nodes = {object_key(n)[1]: n for n in items}
            values = {name: v for name, n in self.nodes.items() if (v := node_lock_value(n)) is not None}
            self._locks.replace(values, self.pod_exists)
        nodes: list[Mapping[str, Any]] = list(items)
        self.fleet.replace_nodes(nodes)

    def _node_event(self, kind: str, node: dict[str, Any]) -> None:
        name = object_key(node)[1]
        with self._lock:
            value = node_lock_value(node) if kind != "DELETED" else None
            if kind == "DELETED":
                self.nodes.pop(name, None)
            else:
                self.nodes[name] = node
            if value != self._locks.values.get(name):
                self._locks.set(name, value, self.pod_exists)
        if kind == "DELETED":
            self.fleet.delete_node(name)
        else:
            self.fleet.set_node(node)

    def _replace_pods(self, items: list[dict[str, Any]]) -> None:
        with self._lock:
            self.pods = {object_key(p): p for p in items}
            self._locks.replace(dict(self._locks.values), self.pod_exists)
        pods: list[Mapping[str, Any]] = list(items)
        self.fleet.replace_pods(pods)

    def _pod_event(self, kind: str, pod: dict[str, Any]) -> None:
        key = object_key(pod)
        with self._lock:
            before = self.pods.get(key)
            if kind == "DELETED":
                if self.pods.pop(key, None) is not None:
                    self._locks.pod_gone(key)
            elif self.pods.setdefault(key, pod) is pod:  # a pod of this name appeared
                self._locks.pod_appeared(key)
            else:
                self.pods[key] = pod
        if kind == "DELETED":
            self.fleet.delete_pod(pod)
            return
        self.fleet.set_pod(pod)
        seconds = time_to_running(before, pod)
        if seconds is not None:
            self.on_running(seconds)
