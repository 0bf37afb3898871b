"""DRA nodes for the live page: dynmig's ResourceSlices and the cluster's ResourceClaims mirrored by
list+watch (`kube.reflector`), drawn with `mig.dra.view` only when something changed.

Started by `dynmig serve --dra-driver NAME` (the chart sets it when `draPlugin.enabled`); without it
serve watches no resource.k8s.io objects and needs no permission on them. The page shows what this
cache holds. The extender's `prioritize` verb (webhooks/prioritize.py) reads it too: a pod's claims by
namespace and name, and the nodes' GPUs with what the claims hold (kube-scheduler allocates on DRA
nodes, dynmig only scores them), so serve starts it whenever `--dra-driver` is set.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from kubernetes import client

from kube.reflector import Reflector
from mig.dra.view import DraView, dra_view
from mig.pods import object_key
from mig.slicemap import NodeMap

Key = tuple[str, str]
T = TypeVar("T")


class _Mirror:
    """One kind's objects by (namespace, name), with a change counter."""

    def __init__(self) -> None:
        self.objects: dict[Key, dict[str, Any]] = {}
        self.version = 0

    def replace(self, items: list[dict[str, Any]]) -> None:
        self.objects = {object_key(o): o for o in items if isinstance(o, dict)}
        self.version += 1

    def event(self, kind: str, obj: dict[str, Any]) -> None:
        if not isinstance(obj, dict):
            return
        if kind == "DELETED":
            self.objects.pop(object_key(obj), None)
        else:
            self.objects[object_key(obj)] = obj
        self.version += 1


class DraCache:
    """ResourceSlices and ResourceClaims from watches; `nodes()` the DRA nodes' maps now."""

    def __init__(self, api_client: client.ApiClient, driver: str, watch_timeout: int = 240):
        self.driver = driver
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._slices, self._claims = _Mirror(), _Mirror()
        self._drawn: tuple[tuple[int, int], DraView] = ((-1, -1), DraView())
        self._derived: dict[str, tuple[tuple[int, int], Any]] = {}
        api = client.ResourceV1Api(api_client)
        self.reflectors = [
            self._reflector("resourceslices", api.list_resource_slice, self._slices, watch_timeout),
            self._reflector(
                "resourceclaims", api.list_resource_claim_for_all_namespaces, self._claims, watch_timeout
            ),
        ]

    def _reflector(self, name: str, call: Any, mirror: _Mirror, timeout: int) -> Reflector:
        def replace(items: list[dict[str, Any]]) -> None:
            with self._lock:
                mirror.replace(items)

        def event(kind: str, obj: dict[str, Any]) -> None:
            with self._lock:
                mirror.event(kind, obj)

        return Reflector(name, call, replace, event, self._stop, timeout)

    def start(self) -> DraCache:
        for r in self.reflectors:
            r.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for r in self.reflectors:
            r.join(5)

    def view(self) -> DraView:
        """The DRA map, redrawn only after a slice or claim changed."""
        with self._lock:
            version = (self._slices.version, self._claims.version)
            if version == self._drawn[0]:
                return self._drawn[1]
            slices, claims = list(self._slices.objects.values()), list(self._claims.objects.values())
        drawn = dra_view(slices, claims, self.driver)
        with self._lock:
            self._drawn = (version, drawn)
        return drawn

    def nodes(self) -> list[NodeMap]:
        return self.view().nodes

    def claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The mirrored ResourceClaim `namespace/name` (None when not seen)."""
        with self._lock:
            return self._claims.objects.get((namespace, name))

    def derived(self, name: str, build: Callable[[list[dict[str, Any]], list[dict[str, Any]]], T]) -> T:
        """`build(slices, claims)`, recomputed only after a slice or claim changed (one memo per name)."""
        with self._lock:
            version = (self._slices.version, self._claims.version)
            hit = self._derived.get(name)
            if hit is not None and hit[0] == version:
                return hit[1]
            slices, claims = list(self._slices.objects.values()), list(self._claims.objects.values())
        value = build(slices, claims)
        with self._lock:
            self._derived[name] = (version, value)
        return value
