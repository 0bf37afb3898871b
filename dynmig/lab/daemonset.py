"""The DaemonSet controller of kube-controller-manager, for the lab's own DaemonSets.

For each DaemonSet in the namespace it keeps one pod on every node that matches the pod
template's nodeSelector, as the real controller does: a pod made from the template (its labels
and annotations, `generateName: <daemonset>-`, an owner reference to the DaemonSet, a node
affinity for that one node), and a new pod, with a new name, once the node's pod is gone. While
the node's pod is still terminating no second one is made, so two device plugins never run on a
node at once. The lab has no default scheduler, so the pod is created bound to its node
(`spec.nodeName`), which is what the scheduler would do with that affinity. The DaemonSet's status
counts its pods (`kubectl get ds` shows DESIRED / CURRENT / READY).
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from kubernetes import client

log = logging.getLogger("dynmig.lab.daemonset")


def owned_by(pod: dict[str, Any], owner: dict[str, Any]) -> bool:
    return any(ref.get("uid") == owner["metadata"]["uid"] and ref.get("controller")
               for ref in pod["metadata"].get("ownerReferences") or [])


def node_matches(node: dict[str, Any], template_spec: dict[str, Any]) -> bool:
    labels = node["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in (template_spec.get("nodeSelector") or {}).items())


def revision_hash(template: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]


def daemon_pod(ds: dict[str, Any], node: str) -> dict[str, Any]:
    """The pod the controller makes for `node` from the DaemonSet's template."""
    template = copy.deepcopy(ds["spec"]["template"])
    meta, spec = template.get("metadata") or {}, template.get("spec") or {}
    labels = {**(meta.get("labels") or {}), "controller-revision-hash": revision_hash(ds["spec"]["template"]),
              "pod-template-generation": str(ds["metadata"].get("generation", 1))}
    spec["affinity"] = {**(spec.get("affinity") or {}), "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}
    spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "generateName": f"{ds['metadata']['name']}-", "namespace": ds["metadata"]["namespace"], "labels": labels,
        "annotations": meta.get("annotations") or {},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": ds["metadata"]["name"],
                             "uid": ds["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]},
        "spec": spec}


def _ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


class DaemonSetController:
    def __init__(self, api_client: Any, namespace: str, echo: Callable[[str], None] | None = None,
                 interval: float = 0.2) -> None:
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.namespace = namespace
        self.echo = echo or (lambda text: None)
        self.interval = interval
        self._status: dict[str, dict[str, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="daemonset-controller", daemon=True)

    def start(self) -> DaemonSetController:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sync()
            except Exception as error:  # noqa: BLE001 - an unavailable API: try again next tick
                log.debug("daemonset controller: %s", error)

    def _items(self, resp: Any) -> list[dict[str, Any]]:
        return json.loads(resp.data).get("items") or []

    def sync(self) -> None:
        sets = self._items(self.apps.list_namespaced_daemon_set(self.namespace, _preload_content=False,
                                                                _request_timeout=5))
        if not sets:
            return
        nodes = self._items(self.core.list_node(_preload_content=False, _request_timeout=5))
        pods = self._items(self.core.list_namespaced_pod(self.namespace, _preload_content=False, _request_timeout=5))
        for ds in sets:
            self._sync_one(ds, nodes, [p for p in pods if owned_by(p, ds)])

    def _sync_one(self, ds: dict[str, Any], nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
        spec = (ds["spec"].get("template") or {}).get("spec") or {}
        wanted = [n["metadata"]["name"] for n in nodes if node_matches(n, spec)]
        on_node = {}
        for pod in pods:
            on_node.setdefault(pod["spec"].get("nodeName"), []).append(pod)
        for node in wanted:
            if node not in on_node:
                created = self.core.create_namespaced_pod(self.namespace, daemon_pod(ds, node), _preload_content=False,
                                                          _request_timeout=5)
                name = json.loads(created.data)["metadata"]["name"]
                on_node[node] = [json.loads(created.data)]
                self.echo(f"daemonset {ds['metadata']['name']}: created pod {self.namespace}/{name} on {node}")
        live = [p for node in wanted for p in on_node.get(node, []) if not p["metadata"].get("deletionTimestamp")]
        status = {"desiredNumberScheduled": len(wanted), "currentNumberScheduled": len(live),
                  "numberReady": sum(1 for p in live if _ready(p)), "numberAvailable": sum(1 for p in live if _ready(p)),
                  "updatedNumberScheduled": len(live), "numberMisscheduled": 0,
                  "observedGeneration": ds["metadata"].get("generation", 1)}
        status["numberUnavailable"] = status["desiredNumberScheduled"] - status["numberAvailable"]
        if self._status.get(ds["metadata"]["uid"]) != status:
            self.apps.patch_namespaced_daemon_set_status(ds["metadata"]["name"], self.namespace, {"status": status},
                                                         _request_timeout=5)
            self._status[ds["metadata"]["uid"]] = status
