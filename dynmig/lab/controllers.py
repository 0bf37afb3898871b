"""The part of kube-controller-manager the lab needs: the DaemonSet, Deployment and Job controllers
(the Job controller and its TTL-after-finished deletion live in `dynmig.lab.jobs`) and the garbage
collector, for every namespace, as one polling loop.

- **DaemonSet**: one pod on every node that matches the pod template's nodeSelector: a pod made
  from the template (its labels and annotations, `generateName: <daemonset>-`, an owner reference,
  a node affinity for that one node), and a new pod, with a new name, once the node's pod is gone.
  While the node's pod is still terminating no second one is made, so two device plugins never run
  on a node at once. The lab has no default scheduler, so the pod is created bound to its node
  (`spec.nodeName`), which is what the scheduler would do with that affinity.
- **Deployment**: `spec.replicas` active pods from the template, named `<deployment>-<hash>-xxxxx`
  with a `pod-template-hash` label. The simulated API server serves no ReplicaSets, so the pods are
  owned by the Deployment itself (one level less than in a cluster); a changed template replaces
  the pods (no surge). Terminal pods do not count, as in the ReplicaSet controller.
- **Garbage collector**: a pod whose controlling owner is gone is deleted (background propagation,
  what `kubectl delete deployment|daemonset|job` asks for by default).
Status is written as the controllers write it, so `kubectl get ds|deploy` and
`kubectl rollout status` read the right counts.
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

from dynmig.lab.jobs import POD_FAILURE_BACKOFF, JobController

log = logging.getLogger("dynmig.lab.controllers")
TERMINAL = ("Succeeded", "Failed")
OWNER_KINDS = ("DaemonSet", "Deployment", "Job")
MAX_REPLICAS = 1000
CREATE_BATCH = 20  # pods a Deployment gets per pass, as the ReplicaSet controller creates in batches


def controller_of(pod: dict[str, Any]) -> dict[str, Any] | None:
    return next((ref for ref in pod["metadata"].get("ownerReferences") or [] if ref.get("controller")), None)


def owned_by(pod: dict[str, Any], owner: dict[str, Any]) -> bool:
    ref = controller_of(pod)
    return ref is not None and ref.get("uid") == owner["metadata"]["uid"]


def node_matches(node: dict[str, Any], template_spec: dict[str, Any]) -> bool:
    labels = node["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in (template_spec.get("nodeSelector") or {}).items())


def template_hash(template: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]


def _owner_ref(owner: dict[str, Any], kind: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _quantities_as_strings(spec: dict[str, Any]) -> None:
    """Resource quantities as the strings a Quantity serializes to (an API server that stores a
    JSON number as typed would otherwise hand the client a number it refuses to send)."""
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        for kind in ("limits", "requests"):
            values = (c.get("resources") or {}).get(kind)
            if isinstance(values, dict):
                for name, value in values.items():
                    if isinstance(value, int | float) and not isinstance(value, bool):
                        values[name] = str(value)


def _from_template(
    owner: dict[str, Any], kind: str, generate_name: str, labels: dict[str, str]
) -> dict[str, Any]:
    template = copy.deepcopy(owner["spec"]["template"])
    meta = template.get("metadata") or {}
    _quantities_as_strings(template.get("spec") or {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": generate_name,
            "namespace": owner["metadata"]["namespace"],
            "labels": {**(meta.get("labels") or {}), **labels},
            "annotations": meta.get("annotations") or {},
            "ownerReferences": [_owner_ref(owner, kind)],
        },
        "spec": template.get("spec") or {},
    }


def daemon_pod(ds: dict[str, Any], node: str) -> dict[str, Any]:
    """The pod the DaemonSet controller makes for `node` from the DaemonSet's template."""
    pod = _from_template(
        ds,
        "DaemonSet",
        f"{ds['metadata']['name']}-",
        {
            "controller-revision-hash": template_hash(ds["spec"]["template"]),
            "pod-template-generation": str(ds["metadata"].get("generation", 1)),
        },
    )
    spec = pod["spec"]
    spec["affinity"] = {
        **(spec.get("affinity") or {}),
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            }
        },
    }
    spec["nodeName"] = node
    return pod


def deployment_pod(deploy: dict[str, Any]) -> dict[str, Any]:
    digest = template_hash(deploy["spec"]["template"])
    return _from_template(
        deploy, "Deployment", f"{deploy['metadata']['name']}-{digest}-", {"pod-template-hash": digest}
    )


def _ready(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _active(pod: dict[str, Any]) -> bool:
    return (
        not pod["metadata"].get("deletionTimestamp")
        and (pod.get("status") or {}).get("phase") not in TERMINAL
    )


class ControllerManager:
    def __init__(
        self,
        api_client: Any,
        echo: Callable[[str], None] | None = None,
        interval: float = 0.2,
        job_backoff: tuple[float, float] = POD_FAILURE_BACKOFF,
    ) -> None:
        """job_backoff: the Job controller's back-off before replacing a failed pod (initial, cap)."""
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.echo = echo or (lambda text: None)
        self.jobs = JobController(api_client, self.echo, job_backoff)
        self.interval = interval
        self._status: dict[str, dict[str, Any]] = {}
        self._failures: dict[str, tuple[str, str, str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="controller-manager", daemon=True)

    def start(self) -> ControllerManager:
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
                log.debug("controller manager: %s", error)

    @staticmethod
    def _items(resp: Any) -> list[dict[str, Any]]:
        return json.loads(resp.data).get("items") or []

    def sync(self) -> None:
        sets = self._items(
            self.apps.list_daemon_set_for_all_namespaces(_preload_content=False, _request_timeout=5)
        )
        deploys = self._items(
            self.apps.list_deployment_for_all_namespaces(_preload_content=False, _request_timeout=5)
        )
        jobs = self.jobs.list_jobs()
        pods = self._items(self.core.list_pod_for_all_namespaces(_preload_content=False, _request_timeout=5))
        nodes = self._items(self.core.list_node(_preload_content=False, _request_timeout=5)) if sets else []
        for ds in sets:
            self._guarded("DaemonSet", ds, self._daemonset, ds, nodes, [p for p in pods if owned_by(p, ds)])
        for deploy in deploys:
            self._guarded(
                "Deployment", deploy, self._deployment, deploy, [p for p in pods if owned_by(p, deploy)]
            )
        for job in jobs:
            self._guarded("Job", job, self.jobs.sync_job, job, [p for p in pods if owned_by(p, job)])
        by_uid = {j["metadata"]["uid"]: j for j in jobs}
        self.jobs.forget(set(by_uid))
        self.jobs.release_orphans(pods, by_uid)
        self._collect_garbage(pods, {o["metadata"]["uid"] for o in sets + deploys + jobs})

    def _guarded(self, kind: str, owner: dict[str, Any], step: Callable[..., None], *args: Any) -> None:
        """One owner's pass; a malformed object or a refused write is logged and retried next pass,
        and never keeps the other DaemonSets and Deployments from being handled."""
        try:
            step(*args)
        except Exception as error:  # noqa: BLE001 - see above
            meta = owner.get("metadata") or {}
            uid = str(meta.get("uid") or "")
            key = (uid, type(error).__name__, str(error)[:200])
            if self._failures.get(uid) != key:
                self._failures[uid] = key
                self.echo(
                    f"{kind} {meta.get('namespace')}/{meta.get('name')}: "
                    f"not reconciled: {type(error).__name__}: {str(error)[:200]}"
                )

    # ---- DaemonSet ------------------------------------------------------------------------------

    def _daemonset(self, ds: dict[str, Any], nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
        spec = (ds["spec"].get("template") or {}).get("spec") or {}
        wanted = [n["metadata"]["name"] for n in nodes if node_matches(n, spec)]
        on_node: dict[str, list[dict[str, Any]]] = {}
        for pod in pods:
            on_node.setdefault(pod["spec"].get("nodeName"), []).append(pod)
        for node in wanted:
            if node not in on_node:
                on_node[node] = [
                    self._create(daemon_pod(ds, node), f"daemonset {ds['metadata']['name']}", node)
                ]
        live = [
            p for node in wanted for p in on_node.get(node, []) if not p["metadata"].get("deletionTimestamp")
        ]
        ready = sum(1 for p in live if _ready(p))
        self._write_status(
            ds,
            "daemonset",
            {
                "desiredNumberScheduled": len(wanted),
                "currentNumberScheduled": len(live),
                "numberReady": ready,
                "numberAvailable": ready,
                "numberUnavailable": len(wanted) - ready,
                "updatedNumberScheduled": len(live),
                "numberMisscheduled": 0,
                "observedGeneration": ds["metadata"].get("generation", 1),
            },
        )

    # ---- Deployment -----------------------------------------------------------------------------

    def _deployment(self, deploy: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        meta = deploy["metadata"]
        replicas = int(deploy["spec"].get("replicas", 1))
        if not 0 <= replicas <= MAX_REPLICAS:
            raise ValueError(f"spec.replicas {replicas}: the lab runs 0 to {MAX_REPLICAS} replicas")
        digest = template_hash(deploy["spec"]["template"])
        active = [p for p in pods if _active(p)]
        stale = [p for p in active if (p["metadata"].get("labels") or {}).get("pod-template-hash") != digest]
        current = [p for p in active if p not in stale]
        for pod in (
            stale + sorted(current, key=lambda p: p["metadata"].get("creationTimestamp") or "")[replicas:]
        ):
            self._delete(pod)
        current = current[:replicas]
        for _ in range(min(CREATE_BATCH, replicas - len(current))):  # the rest in the next passes
            current.append(self._create(deployment_pod(deploy), f"deployment {meta['name']}"))
        ready = sum(1 for p in current if _ready(p))
        available = ready >= replicas
        self._write_status(
            deploy,
            "deployment",
            {
                "observedGeneration": meta.get("generation", 1),
                "replicas": len(current),
                "updatedReplicas": len(current),
                "readyReplicas": ready,
                "availableReplicas": ready,
                "unavailableReplicas": max(0, replicas - ready),
                "conditions": [
                    {
                        "type": "Available",
                        "status": "True" if available else "False",
                        "reason": "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
                        "message": "Deployment has minimum availability."
                        if available
                        else "Deployment does not have minimum availability.",
                    },
                    {
                        "type": "Progressing",
                        "status": "True",
                        "reason": "NewReplicaSetAvailable" if available else "ReplicaSetUpdated",
                        "message": f"Deployment {meta['name']} is progressing.",
                    },
                ],
            },
        )

    # ---- garbage collector ----------------------------------------------------------------------

    def _collect_garbage(self, pods: list[dict[str, Any]], owners: set[str]) -> None:
        for pod in pods:
            ref = controller_of(pod)
            if (
                ref
                and ref.get("kind") in OWNER_KINDS
                and ref.get("uid") not in owners
                and not pod["metadata"].get("deletionTimestamp")
            ):
                self._delete(pod)

    # ---- API writes -----------------------------------------------------------------------------

    def _create(self, pod: dict[str, Any], who: str, node: str = "") -> dict[str, Any]:
        resp = self.core.create_namespaced_pod(
            pod["metadata"]["namespace"], pod, _preload_content=False, _request_timeout=5
        )
        made = json.loads(resp.data)
        self.echo(
            f"{who}: created pod {made['metadata']['namespace']}/{made['metadata']['name']}"
            + (f" on {node}" if node else "")
        )
        return made

    def _delete(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        try:
            self.core.delete_namespaced_pod(
                meta["name"], meta["namespace"], _preload_content=False, _request_timeout=5
            )
        except client.ApiException as error:
            if error.status != 404:
                raise

    def _write_status(self, owner: dict[str, Any], kind: str, status: dict[str, Any]) -> None:
        meta = owner["metadata"]
        if self._status.get(meta["uid"]) == status:
            return
        patch = getattr(self.apps, f"patch_namespaced_{'daemon_set' if kind == 'daemonset' else kind}_status")
        patch(meta["name"], meta["namespace"], {"status": status}, _preload_content=False, _request_timeout=5)
        self._status[meta["uid"]] = status
