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
from typing import Any, TypeVar, cast

from kubernetes import client

from kube.mirror import Mirror
from kube.reflector import Reflector
from mig.dra.pending import pending_claim_pods
from mig.dra.view import DraView, dra_view
from mig.slicemap import NodeMap, PendingPod

Key = tuple[str, str]
T = TypeVar("T")


class DraCache:
    """ResourceSlices and ResourceClaims from watches; `nodes()` the DRA nodes' maps now."""

    def __init__(self, api_client: client.ApiClient, driver: str, watch_timeout: int = 240):
        self.driver = driver
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._slices, self._claims = Mirror(), Mirror()
        self._derived: dict[str, tuple[tuple[int, int], object]] = {}  # name: (version, what build made)
        api = client.ResourceV1Api(api_client)
        self.reflectors = [
            self._reflector("resourceslices", api.list_resource_slice, self._slices, watch_timeout),
            self._reflector(
                "resourceclaims", api.list_resource_claim_for_all_namespaces, self._claims, watch_timeout
            ),
        ]

    def _reflector(self, name: str, call: Any, mirror: Mirror, timeout: int) -> Reflector:
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
        return self.derived("view", lambda slices, claims: dra_view(slices, claims, self.driver))

    def nodes(self) -> list[NodeMap]:
        return self.view().nodes

    def pending(self, pods: list[dict[str, Any]]) -> list[PendingPod]:
        """The pods waiting for claims of the driver, with kube-scheduler's reason (mig.dra.pending)."""
        with self._lock:
            claims = self._claims.items()
        return pending_claim_pods(pods, claims, self.driver)

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
                return cast(T, hit[1])  # a name is always built by the same build, so its T
            slices, claims = self._slices.items(), self._claims.items()
        value = build(slices, claims)
        with self._lock:
            self._derived[name] = (version, value)
        return value
