"""The few Kubernetes API calls the extender makes, through the official `kubernetes` client.

Every call works on plain JSON and skips the client's model deserialisation (slow, and for
`pods/binding` wrong — the apiserver answers a Binding POST with a `Status`, which the client fails
to turn into a `V1Binding` although the bind succeeded, see kubernetes-client/python#547). The calls
of the bind path (read and patch a node, read a pod, the Binding) go through `kube.rest.JsonRequests`,
the client's own transport and authentication without its generated method layer; the rest pass
`_preload_content=False` to the generated methods. Every failure raises a `kube.errors.KubeError`
(`NotFound`, `Conflict`, `Unavailable`, ...).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from kubernetes import client

from base import events
from kube.client import api_client
from kube.errors import NotFound, translated
from kube.rest import JsonRequests, json_object, segment

log = logging.getLogger(__name__)

MERGE = "application/merge-patch+json"

__all__ = ["EventRecorder", "Kube", "load_api_client"]


def load_api_client(kubeconfig: str = "") -> client.ApiClient:
    """An ApiClient from a kubeconfig file, or in-cluster when none is given."""
    return api_client(kubeconfig or None, in_cluster=not kubeconfig)


def _json(what: str, call: Any, *args: Any, **kwargs: Any) -> Any:
    """Call the client without model deserialisation; the JSON answer, or KubeError."""
    with translated(what):
        data = call(*args, _preload_content=False, **kwargs).data
        return json.loads(data) if data else None


def _drain(what: str, call: Any, *args: Any, **kwargs: Any) -> None:
    """Call and read a reply we do not need: an unread `_preload_content=False` response never goes
    back to the connection pool, so every such call would open (and the server accept) a new connection."""
    with translated(what):
        _ = call(*args, _preload_content=False, **kwargs).data


class Kube:
    """Thin wrapper: JSON in, JSON out, official client underneath."""

    def __init__(self, api_client: client.ApiClient, timeout: float = 10.0):
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        self.timeout = timeout
        self.json = JsonRequests(api_client, timeout)

    def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        what = f"patch pod {namespace}/{name}"
        reply = _json(
            what,
            self.core.patch_namespaced_pod,
            name,
            namespace,
            patch,
            _content_type=MERGE,
            _request_timeout=self.timeout,
        )
        return json_object(what, reply)

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        what = f"read pod {namespace}/{name}"
        path = f"/api/v1/namespaces/{segment(namespace)}/pods/{segment(name)}"
        return json_object(what, self.json.request(what, "GET", path))

    def pod_or_none(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod, or None when the API server has no such pod."""
        try:
            return self.get_pod(namespace, name)
        except NotFound:
            return None

    def get_node(self, name: str) -> dict[str, Any]:
        what = f"read node {name}"
        return json_object(what, self.json.request(what, "GET", f"/api/v1/nodes/{segment(name)}"))

    def patch_node(self, name: str, patch: dict[str, Any], reply: bool = True) -> dict[str, Any] | None:
        """Merge-patch the node; its new state, or None with `reply=False` (the answer is not decoded)."""
        what = f"patch node {name}"
        answer = self.json.request(
            what, "PATCH", f"/api/v1/nodes/{segment(name)}", patch, MERGE, decode=reply
        )
        return json_object(what, answer) if reply else None

    def lease_or_none(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The coordination.k8s.io Lease, or None when the API server has none of that name."""
        try:
            what = f"read lease {namespace}/{name}"
            reply = _json(
                what, self.coordination.read_namespaced_lease, name, namespace, _request_timeout=self.timeout
            )
            return json_object(what, reply)
        except NotFound:
            return None

    def bind(
        self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str] | None = None
    ) -> None:
        """Create the pod's Binding. The API server copies the Binding's annotations onto the pod in
        the same write that sets spec.nodeName (pods/binding storage, setPodHostAndAnnotations)."""
        meta: dict[str, Any] = {"name": name, "namespace": namespace}
        if uid:
            meta["uid"] = uid
        if annotations:
            meta["annotations"] = annotations
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        self.json.request(
            f"bind pod {namespace}/{name} to {node}",
            "POST",
            f"/api/v1/namespaces/{segment(namespace)}/pods/{segment(name)}/binding",
            body,
            decode=False,
        )

    def evict(self, namespace: str, name: str, uid: str) -> None:
        """Ask the API server to evict the pod (policy/v1 Eviction: it deletes the pod gracefully
        unless a PodDisruptionBudget has no disruption left, then 429 with the budget as cause)."""
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": {"preconditions": {"uid": uid}},
        }
        _drain(
            f"evict pod {namespace}/{name}",
            self.core.create_namespaced_pod_eviction,
            name,
            namespace,
            body,
            _request_timeout=self.timeout,
        )

    def list_disruption_budgets(self) -> list[dict[str, Any]]:
        """Every PodDisruptionBudget in the cluster (policy/v1)."""
        reply = _json(
            "list poddisruptionbudgets",
            client.PolicyV1Api(self.api_client).list_pod_disruption_budget_for_all_namespaces,
            _request_timeout=self.timeout,
        )
        items = reply.get("items") if isinstance(reply, dict) else None
        return [i for i in items or () if isinstance(i, dict)]


class EventRecorder(events.EventRecorder):
    """The scheduler's events (base.events: aggregated, posted off the filter and bind path)."""

    def __init__(
        self,
        kube: Kube | None,
        component: str,
        instance: str = "",
        capacity: int = 1000,
        dropped: Callable[[str], None] | None = None,
    ):
        super().__init__(kube.core if kube else None, component, instance, capacity=capacity, dropped=dropped)
        self.kube = kube
