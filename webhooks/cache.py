"""A cache of nodes and pods fed by list+watch with the official client; no API read per request.

Each resource has a reflector thread: list (remember the resourceVersion), then watch from it; a
dropped watch resumes from the last resourceVersion seen (bookmarks keep it fresh); `410 Gone`
(the version is too old) relists. Objects stay plain JSON dicts. Every change is forwarded to the
`Fleet`, which keeps occupancy and the placement index in step.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from webhooks.fleet import Fleet
from webhooks.kube import GONE, Kube
from webhooks.nodelock import LockValue, node_lock_value

log = logging.getLogger(__name__)


class Gone(Exception):
    """The watch's resourceVersion is too old: relist."""


def _lines(response) -> Iterator[bytes]:
    buffer = b""
    for chunk in response.stream(amt=None, decode_content=True):
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                yield line
    if buffer.strip():
        yield buffer


class Reflector:
    """List then watch one resource; calls `on_replace(items)` after each list and `on_event(type, obj)`."""

    def __init__(
        self,
        name: str,
        call: Callable[..., Any],
        on_replace: Callable[[list[dict]], None],
        on_event: Callable[[str, dict], None],
        stop: threading.Event,
        watch_timeout: int = 240,
        on_synced: Callable[[], None] = lambda: None,
    ):
        self.name = name
        self._call = call
        self._on_replace = on_replace
        self._on_event = on_event
        self._stop = stop
        self._timeout = watch_timeout
        self._on_synced = on_synced
        self._response = None
        self.synced = threading.Event()
        self.resource_version = ""
        self.relists = 0
        self._thread = threading.Thread(target=self._run, name=f"dynmig-watch-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float = 5.0) -> None:
        """Stop reading: close the open watch (again, if a new one was opening) until the thread ends."""
        deadline = time.monotonic() + timeout
        while self._thread.is_alive() and time.monotonic() < deadline:
            response = self._response
            if response is not None:
                try:
                    response.shutdown()
                except Exception as error:  # noqa: BLE001 - closing from another thread may race the reader
                    log.debug("closing the %s watch: %s", self.name, error)
            self._thread.join(0.05)

    def _run(self) -> None:
        backoff = 0.2
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                self._watch()
                backoff = 0.2
            except Gone:
                log.info(
                    "watch of %s expired at resourceVersion %s; relisting", self.name, self.resource_version
                )
                need_list = True
            except Exception as error:  # noqa: BLE001 - a watch must survive any failure and resume
                if self._stop.is_set():
                    return
                log.warning("watch of %s failed (%s); retrying", self.name, error)
                self._stop.wait(backoff * (1 + random.random()))
                backoff = min(backoff * 2, 5.0)

    def _list(self) -> None:
        response = self._call(_preload_content=False, _request_timeout=60)
        doc = json.loads(response.data)
        self.resource_version = (doc.get("metadata") or {}).get("resourceVersion") or ""
        self._on_replace(doc.get("items") or [])
        self.relists += 1
        self.synced.set()
        self._on_synced()

    def _watch(self) -> None:
        response = self._call(
            watch=True,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=self._timeout,
            _preload_content=False,
            _request_timeout=(10, self._timeout + 30),
        )
        self._response = response
        if self._stop.is_set():
            response.shutdown()
        try:
            for line in _lines(response):
                if self._stop.is_set():
                    return
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == GONE:
                        raise Gone()
                    raise RuntimeError(f"watch error: {obj.get('message')}")
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if rv:
                    self.resource_version = rv
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self._on_event(kind, obj)
        finally:
            self._response = None
            response.release_conn()


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


class ClusterCache:
    """Nodes and pods by name, mirrored from watches into a `Fleet`."""

    def __init__(self, kube: Kube, fleet: Fleet, watch_timeout: int = 240):
        self.kube = kube
        self.fleet = fleet
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.locks: dict[str, LockValue] = {}  # nodes carrying hami.io/mutex.lock
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

    def find_pod(self, namespace: str, name: str, uid: str = "") -> dict[str, Any] | None:
        """The pod from the cache or, when the cache has none (or another pod of that name), the API."""
        pod = self.pod(namespace, name)
        if pod is not None and (not uid or (pod.get("metadata") or {}).get("uid") == uid):
            return pod
        return self.kube.pod_or_none(namespace, name)  # the watch may lag the scheduler's own by a moment

    def pod_exists(self, namespace: str, name: str) -> bool:
        return (namespace, name) in self.pods

    def objects(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(nodes, pods) as the cache holds them now: lists copied under the lock, objects shared
        (never modified in place: each watch event replaces a whole object)."""
        with self._lock:
            return list(self.nodes.values()), list(self.pods.values())

    # ---- feed --------------------------------------------------------------------------------
    def _replace_nodes(self, items: list[dict]) -> None:
        with self._lock:
            self.nodes = {_key(n)[1]: n for n in items}
            self.locks = {name: v for name, n in self.nodes.items() if (v := node_lock_value(n)) is not None}
        self.fleet.replace_nodes(items)

    def _node_event(self, kind: str, node: dict) -> None:
        name = _key(node)[1]
        with self._lock:
            value = node_lock_value(node) if kind != "DELETED" else None
            if kind == "DELETED":
                self.nodes.pop(name, None)
            else:
                self.nodes[name] = node
            if value is None:
                self.locks.pop(name, None)
            else:
                self.locks[name] = value
        if kind == "DELETED":
            self.fleet.delete_node(name)
        else:
            self.fleet.set_node(node)

    def _replace_pods(self, items: list[dict]) -> None:
        with self._lock:
            self.pods = {_key(p): p for p in items}
        self.fleet.replace_pods(items)

    def _pod_event(self, kind: str, pod: dict) -> None:
        key = _key(pod)
        with self._lock:
            if kind == "DELETED":
                self.pods.pop(key, None)
            else:
                self.pods[key] = pod
        if kind == "DELETED":
            self.fleet.delete_pod(pod)
        else:
            self.fleet.set_pod(pod)
