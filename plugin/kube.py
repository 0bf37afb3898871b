"""The Kubernetes API as the device plugin needs it, over the official `kubernetes` client.

Pods and nodes are read as raw JSON (`_preload_content=False`) into small frozen views: the plugin
reads a handful of fields, and skipping the client's model deserialization keeps a reconcile pass
over a full node cheap. Every failure becomes a `kube.errors.KubeError` (a 409 is `Conflict`), so
callers can tell "the API said no" from "we know the answer".
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from kubernetes import client as k8s

from kube import client as kube_client
from kube.errors import Conflict, KubeError, NotFound, translated
from kube.reflector import list_objects
from mig.annotations import VGPU_NODE
from mig.pods import PodRecord, active_for_plugin

VGPU_NODE_LABEL = VGPU_NODE  # HAMi writes the node as a pod label of the same key (its monitor lists by it)
TIMEOUT = kube_client.REQUEST_TIMEOUT  # an unreachable API must not hang Allocate

__all__ = ["Conflict", "Kube", "KubeError", "NodeAnnotationWriter", "NodeView", "PodView", "api_client"]


log = logging.getLogger("dynmig.plugin.kube")


@dataclass(frozen=True)
class PodView:
    namespace: str
    name: str
    uid: str = ""
    phase: str = "Pending"
    deleting: bool = False
    node_name: str = ""
    resource_version: str = ""
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    init_containers: tuple[str, ...] = ()
    containers: tuple[str, ...] = ()

    @property
    def active(self) -> bool:
        """Still owns its reservations and instances: not being deleted and not terminal (the
        plugin's rule, stricter than the scheduler's: see mig/pods.py)."""
        return active_for_plugin(self.phase, self.deleting)

    @cached_property
    def reservation(self) -> PodRecord:
        """Its reservation annotations, decoded at most once for this copy of the pod."""
        return PodRecord(self.annotations)

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> PodView:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        return cls(
            namespace=meta.get("namespace", ""),
            name=meta.get("name", ""),
            uid=meta.get("uid", ""),
            phase=status.get("phase") or "Pending",
            deleting=bool(meta.get("deletionTimestamp")),
            node_name=spec.get("nodeName") or "",
            resource_version=str(meta.get("resourceVersion") or ""),
            annotations=dict(meta.get("annotations") or {}),
            labels=dict(meta.get("labels") or {}),
            init_containers=tuple(c.get("name", "") for c in spec.get("initContainers") or ()),
            containers=tuple(c.get("name", "") for c in spec.get("containers") or ()),
        )


def vgpu_label(pod: PodView) -> dict[str, str]:
    """The `hami.io/vgpu-node` label to add so the pod carries it as HAMi's scheduler writes it (the
    node its record names), or nothing when it has it already or names no node. dynmig's reservation
    rides on the Binding, whose annotations the API server copies onto the pod but not its labels:
    the plugin's first patch of the pod adds it, with no write of its own."""
    node = pod.reservation.node
    return {VGPU_NODE_LABEL: node} if node and pod.labels.get(VGPU_NODE_LABEL) != node else {}


@dataclass(frozen=True)
class NodeView:
    name: str
    resource_version: str
    annotations: Mapping[str, str]
    labels: Mapping[str, str] = field(default_factory=dict)


def api_client(kubeconfig: str | None) -> k8s.ApiClient:
    """A client from a kubeconfig file, or the in-cluster service account when none is given; no
    urllib3 retries (Allocate and the reconcile loop retry on their own schedule)."""
    return kube_client.api_client(kubeconfig or None, in_cluster=not kubeconfig, retries=0)


class Kube:
    def __init__(self, api: k8s.ApiClient, node_name: str):
        self.core = k8s.CoreV1Api(api)
        self.node_name = node_name

    def _raw(self, call: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        with translated(call.__name__):
            response = call(*args, _preload_content=False, _request_timeout=TIMEOUT, **kwargs)
            body = json.loads(response.data)
        if not isinstance(body, dict):
            raise KubeError(f"{call.__name__}: unreadable answer (not an object)")
        return body

    # ---- pods

    def list_node_pods(self) -> list[PodView]:
        """Every pod bound to this node; raises KubeError on any error or a partial (continued) list."""
        items, _ = list_objects(
            "list pods",
            self.core.list_pod_for_all_namespaces,
            field_selector=f"spec.nodeName={self.node_name}",
            _request_timeout=TIMEOUT,
        )
        return [PodView.from_dict(item) for item in items]

    def get_pod(self, namespace: str, name: str) -> PodView | None:
        try:
            return PodView.from_dict(self._raw(self.core.read_namespaced_pod, name, namespace))
        except NotFound:
            return None

    def patch_pod_annotations(
        self, pod: PodView, annotations: Mapping[str, str | None], resource_version: str | None = None
    ) -> PodView:
        """Merge-patch annotations (None deletes); with a resourceVersion, a 409 raises Conflict.

        The same patch writes HAMi's `hami.io/vgpu-node` pod label when the pod lacks it (`vgpu_label`)."""
        metadata: dict[str, Any] = {"annotations": dict(annotations)}
        labels = vgpu_label(pod)
        if labels:
            metadata["labels"] = labels
        if resource_version:
            metadata["resourceVersion"] = resource_version
        body = self._raw(
            self.core.patch_namespaced_pod,
            pod.name,
            pod.namespace,
            {"metadata": metadata},
            _content_type="application/merge-patch+json",
        )
        return PodView.from_dict(body)

    # ---- this node

    def get_node(self) -> NodeView:
        body = self._raw(self.core.read_node, self.node_name)
        meta = body.get("metadata") or {}
        return NodeView(
            self.node_name,
            str(meta.get("resourceVersion") or ""),
            dict(meta.get("annotations") or {}),
            dict(meta.get("labels") or {}),
        )

    def patch_node_annotations(
        self, annotations: Mapping[str, str | None], resource_version: str | None = None
    ) -> None:
        metadata: dict[str, Any] = {"annotations": dict(annotations)}
        if resource_version:
            metadata["resourceVersion"] = resource_version
        self._raw(
            self.core.patch_node,
            self.node_name,
            {"metadata": metadata},
            _content_type="application/merge-patch+json",
        )

    # ---- events

    def node_event(self, reason: str, message: str, type_: str = "Warning") -> None:
        """A core/v1 Event about this node (in `default`, where kubelet puts node events)."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{self.node_name}.{time.time_ns():x}", "namespace": "default"},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": self.node_name},
            "reason": reason,
            "message": message[:1024],
            "type": type_,
            "source": {"component": "dynmig-device-plugin", "host": self.node_name},
            "reportingComponent": "dynmig-device-plugin",
            "reportingInstance": self.node_name,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self._raw(self.core.create_namespaced_event, "default", body)


class NodeAnnotationWriter:
    """One annotation of this plugin's node, written only when it changed (None removes it).

    Remembers the last text written, so an unchanged value costs no API call; after a failed write it
    reads the node again next time. `write` is True when it patched the node."""

    def __init__(self, kube: Kube, key: str) -> None:
        self.kube = kube
        self.key = key
        self.last: str | None = None  # "" once it knows the annotation is absent

    def write(self, text: str | None) -> bool:
        if self.last is not None and text == (self.last or None):
            return False
        try:
            written = self.kube.get_node().annotations.get(self.key) != text
            if written:
                self.kube.patch_node_annotations({self.key: text})
        except KubeError as error:
            log.warning("could not publish %s: %s", self.key, error)
            return False
        self.last = text or ""
        return written
