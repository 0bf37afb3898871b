"""Builders for admission requests and pods used across the webhooks tests."""

from __future__ import annotations

import base64
import contextlib
import json
import uuid
from typing import Any

from registration_testkit import registration

SCHEDULER = "system:serviceaccount:dynmig:dynmig-scheduler"
PLUGIN = "system:serviceaccount:dynmig:dynmig-device-plugin"


def pod(
    name: str = "p",
    limits: dict[str, str] | None = None,
    requests: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    container = {"name": "main", "image": "cuda", "resources": resources}
    meta: dict[str, Any] = {"name": name, "namespace": "team"}
    if annotations is not None:
        meta["annotations"] = annotations
    if labels is not None:
        meta["labels"] = labels
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"schedulerName": "default-scheduler", "containers": [container], **spec},
    }


def review(
    obj: dict[str, Any] | None,
    old: dict[str, Any] | None = None,
    op: str = "CREATE",
    user: str = "alice",
    version: str = "v1",
    kind: str = "Pod",
    resource: str = "pods",
) -> dict[str, Any]:
    return {
        "apiVersion": f"admission.k8s.io/{version}",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": resource},
            "namespace": "team",
            "name": (obj or old or {}).get("metadata", {}).get("name", ""),
            "operation": op,
            "userInfo": {"username": user, "groups": ["system:authenticated"]},
            "object": obj,
            "oldObject": old,
            "dryRun": False,
        },
    }


def decode_patch(response: dict[str, Any]) -> list[dict[str, Any]]:
    if "patch" not in response:
        return []
    assert response["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(response["patch"]))


def apply_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """A minimal RFC 6902 add/replace/remove applier (enough to check our patches land where meant)."""
    out = json.loads(json.dumps(doc))
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent = out
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        last = parts[-1]
        if op["op"] in ("add", "replace"):
            if isinstance(parent, list):
                parent.insert(len(parent) if last == "-" else int(last), op["value"])
            else:
                assert op["op"] == "add" or last in parent
                parent[last] = op["value"]
        elif op["op"] == "remove":
            del parent[int(last) if isinstance(parent, list) else last]
    return out


# ---------------------------------------------------------------- nodes publishing MIG GPUs


def node(name: str, model_key: str = "A100-SXM4-80GB", gpus: int = 1, **kw) -> dict:
    from mig.annotations import NODE_REGISTER

    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "annotations": {NODE_REGISTER: registration(name, model_key, gpus, **kw)}},
        "status": {
            "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"},
            "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def gpu_pod(
    name: str,
    memory: int | None = 8000,
    devices: int = 1,
    namespace: str = "team",
    annotations: dict | None = None,
) -> dict:
    limits = {"nvidia.com/gpu": str(devices)}
    if memory is not None:
        limits["nvidia.com/gpumem"] = str(memory)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
        "spec": {
            "schedulerName": "dynmig-scheduler",
            "containers": [{"name": "main", "image": "cuda", "resources": {"limits": limits}}],
        },
    }


# ---------------------------------------------------------------- a whole cluster half over HTTPS


def scheduler_configuration(url: str, ca_pem: bytes, scheduler: str = "dynmig-scheduler") -> dict:
    """The KubeSchedulerConfiguration the chart renders: dynmig as filter+bind extender over HTTPS."""
    managed = ["nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores", "nvidia.com/gpumem-percentage"]
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},  # one scheduler; test_leadership.py elects
        "profiles": [{"schedulerName": scheduler}],
        "extenders": [
            {
                "urlPrefix": url,
                "filterVerb": "filter",
                "bindVerb": "bind",
                "nodeCacheCapable": True,
                "enableHTTPS": True,
                "tlsConfig": {"caData": base64.b64encode(ca_pem).decode()},
                "httpTimeout": "30s",
                "weight": 1,
                "managedResources": [{"name": n, "ignoredByScheduler": True} for n in managed],
            }
        ],
    }


def webhook_configurations(ca_pem: bytes) -> tuple[dict, dict]:
    """Mutating and validating webhook configurations like the chart's, pointing at service dynmig/dynmig."""
    bundle = base64.b64encode(ca_pem).decode()

    def hook(name: str, path: str, rules: list[dict], **extra) -> dict:
        return {
            "name": name,
            "clientConfig": {
                "service": {"namespace": "dynmig", "name": "dynmig", "path": path, "port": 443},
                "caBundle": bundle,
            },
            "rules": rules,
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1", "v1beta1"],
            "timeoutSeconds": 10,
            **extra,
        }

    ignore = {"matchExpressions": [{"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}]}
    pods = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}
    mutating = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "dynmig"},
        "webhooks": [
            hook(
                "pods.mutate.dynmig.io",
                "/mutate",
                [{**pods, "operations": ["CREATE"]}],
                namespaceSelector=ignore,
                objectSelector=ignore,
            )
        ],
    }
    validating = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "dynmig"},
        "webhooks": [
            hook("pods.validate.dynmig.io", "/validate", [{**pods, "operations": ["CREATE", "UPDATE"]}]),
            hook(
                "device-config.validate.dynmig.io",
                "/validate",
                [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["configmaps"],
                        "operations": ["CREATE", "UPDATE"],
                    }
                ],
                objectSelector={"matchLabels": {"dynmig.io/device-config": "true"}},
            ),
        ],
    }
    return mutating, validating


class PluginStandIn:
    """What the device plugin does for the scheduler after Allocate, for tests of the cluster half
    alone: mark bound pods `bind-phase: success` and release the node lock they hold."""

    def __init__(self, apiserver):
        import threading

        from kubernetes import client

        self.core = client.CoreV1Api(apiserver.api_client("device-plugin"))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> PluginStandIn:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        from kubernetes.client.exceptions import ApiException

        from mig.annotations import BIND_PHASE, NODE_LOCK

        while not self._stop.wait(0.05):
            pods = json.loads(self.core.list_pod_for_all_namespaces(_preload_content=False).data)["items"]
            for pod in pods:
                meta, node = pod["metadata"], pod["spec"].get("nodeName")
                if not node or (meta.get("annotations") or {}).get(BIND_PHASE) != "allocating":
                    continue
                self.core.patch_namespaced_pod(
                    meta["name"],
                    meta["namespace"],
                    {"metadata": {"annotations": {BIND_PHASE: "success"}}},
                    _content_type="application/merge-patch+json",
                    _preload_content=False,
                )
                n = json.loads(self.core.read_node(node, _preload_content=False).data)
                held = (n["metadata"].get("annotations") or {}).get(NODE_LOCK, "")
                if held.endswith(f",{meta['namespace']},{meta['name']}"):
                    patch = {
                        "metadata": {
                            "resourceVersion": n["metadata"]["resourceVersion"],
                            "annotations": {NODE_LOCK: None},
                        }
                    }
                    with contextlib.suppress(ApiException):  # changed meanwhile: next round
                        self.core.patch_node(
                            node, patch, _content_type="application/merge-patch+json", _preload_content=False
                        )
