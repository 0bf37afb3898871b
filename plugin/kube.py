"""The Kubernetes API as the device plugin needs it, over the official `kubernetes` client.

Pods and nodes are read as raw JSON (`_preload_content=False`) into small frozen views: the plugin
reads a handful of fields, and skipping the client's model deserialization keeps a reconcile pass
over a full node cheap. Every failure becomes `KubeError` (a 409 becomes `Conflict`), so callers
can tell "the API said no" from "we know the answer".
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config

from mig.pods import PodReservation, active_for_plugin

TIMEOUT = (3.0, 10.0)  # (connect, read) seconds: an unreachable API must not hang Allocate


class KubeError(RuntimeError):
    def __init__(self, message: str, status: int | None = None):
        self.status = status
        super().__init__(message)


class Conflict(KubeError):
    """The object changed since we read it (HTTP 409): re-read and retry."""


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
    init_containers: tuple[str, ...] = ()
    containers: tuple[str, ...] = ()

    @property
    def active(self) -> bool:
        """Still owns its reservations and instances: not being deleted and not terminal (the
        plugin's rule, stricter than the scheduler's: see mig/pods.py)."""
        return active_for_plugin(self.phase, self.deleting)

    @cached_property
    def reservation(self) -> PodReservation:
        """Its reservation annotations, decoded at most once for this copy of the pod."""
        return PodReservation(self.annotations)

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
            init_containers=tuple(c.get("name", "") for c in spec.get("initContainers") or ()),
            containers=tuple(c.get("name", "") for c in spec.get("containers") or ()),
        )


@dataclass(frozen=True)
class NodeView:
    name: str
    resource_version: str
    annotations: Mapping[str, str]


def api_client(kubeconfig: str | None) -> k8s.ApiClient:
    """A client from a kubeconfig file, or the in-cluster service account when none is given."""
    configuration = k8s.Configuration()
    if kubeconfig:
        k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    else:
        k8s_config.load_incluster_config(client_configuration=configuration)
    configuration.retries = 0
    return k8s.ApiClient(configuration)


class Kube:
    def __init__(self, api: k8s.ApiClient, node_name: str):
        self.core = k8s.CoreV1Api(api)
        self.node_name = node_name

    def _raw(self, call: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            response = call(*args, _preload_content=False, _request_timeout=TIMEOUT, **kwargs)
            return json.loads(response.data)
        except k8s.exceptions.ApiException as error:
            status = getattr(error, "status", None)
            kind = Conflict if status == 409 else KubeError
            raise kind(
                f"{call.__name__}: HTTP {status} {getattr(error, 'reason', '')}".strip(), status
            ) from None
        except (ValueError, TypeError) as error:
            raise KubeError(f"{call.__name__}: unreadable answer ({error})") from None
        except Exception as error:  # noqa: BLE001 - connection refused, timeouts, TLS: all "API down"
            raise KubeError(f"{call.__name__}: {type(error).__name__}: {error}") from None

    # ---- pods

    def list_node_pods(self) -> list[PodView]:
        """Every pod bound to this node; raises KubeError on any error or a partial (continued) list."""
        body = self._raw(
            self.core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={self.node_name}"
        )
        if (body.get("metadata") or {}).get("continue"):
            raise KubeError("list pods: partial list (continue token)")
        items = body.get("items")
        if not isinstance(items, list):
            raise KubeError("list pods: answer has no items")
        return [PodView.from_dict(item) for item in items]

    def get_pod(self, namespace: str, name: str) -> PodView | None:
        try:
            return PodView.from_dict(self._raw(self.core.read_namespaced_pod, name, namespace))
        except KubeError as error:
            if error.status == 404:
                return None
            raise

    def patch_pod_annotations(
        self, pod: PodView, annotations: Mapping[str, str | None], resource_version: str | None = None
    ) -> PodView:
        """Merge-patch annotations (None deletes); with a resourceVersion, a 409 raises Conflict."""
        metadata: dict[str, Any] = {"annotations": dict(annotations)}
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
            self.node_name, str(meta.get("resourceVersion") or ""), dict(meta.get("annotations") or {})
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
