"""The part of kube-controller-manager the lab needs: the DaemonSet, Deployment and Job controllers
(the Job controller and its TTL-after-finished deletion live in `lab.jobs`) and the garbage
collector, for every namespace, as one polling loop.

- **DaemonSet**: one pod on every node that matches the pod template's nodeSelector: a pod made
  from the template (its labels and annotations, `generateName: <daemonset>-`, an owner reference,
  a node affinity for that one node), and a new pod, with a new name, once the node's pod is gone.
  While the node's pod is still terminating no second one is made, so two device plugins never run
  on a node at once. The lab has no default scheduler, so the pod is created bound to its node
  (`spec.nodeName`), which is what the scheduler would do with that affinity.
- **Deployment** and **ReplicaSet**: a Deployment runs through ReplicaSets, one per pod template
  (`lab.rollout`: revisions, rolling update or Recreate, history, status and
  ScalingReplicaSet events), and each ReplicaSet keeps `spec.replicas` active pods from its
  template (`lab.replicasets`), named `<deployment>-<hash>-xxxxx`. Terminal pods do not
  count.
- **ResourceClaim**: claims from pods' templates, released and deallocated when their pods are done
  (`sim.dra.claims`, in a loop of its own).
- **Garbage collector**: a pod whose controlling owner is gone is deleted, and so is a ReplicaSet
  whose Deployment is (background propagation, what `kubectl delete deployment|daemonset|job`
  asks for by default).
Status is written as the controllers write it, so `kubectl get ds|deploy|rs` and
`kubectl rollout status|history|undo` read the right counts and revisions.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client
from sim import recorder
from sim.dra.claims import ResourceClaimController
from sim.scheduler.nodeselector import NodeSelector

from kube.rest import json_object
from lab import replicasets, rollout
from lab.jobs import MERGE, POD_FAILURE_BACKOFF, JobController
from lab.replicasets import TERMINAL, controller_of

log = logging.getLogger("lab.controllers")
# kinds whose pods the garbage collector deletes once they are gone ("Deployment": pods a lab
# before ReplicaSets made)
OWNER_KINDS = ("DaemonSet", "ReplicaSet", "Job", "Deployment")


def _reason_of(error: client.ApiException) -> str:
    """The API server's message for a refused write (the Status body's), else the HTTP reason."""
    try:
        return str(json.loads(error.body or "{}").get("message") or error.reason)
    except (ValueError, AttributeError):
        return str(error.reason)


def _by_controller(objs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Objects by their controlling owner's uid."""
    out: dict[str, list[dict[str, Any]]] = {}
    for obj in objs:
        ref = controller_of(obj)
        if ref is not None and ref.get("uid"):
            out.setdefault(str(ref["uid"]), []).append(obj)
    return out


def node_matches(node: dict[str, Any], template_spec: dict[str, Any]) -> bool:
    """Whether a DaemonSet's pod belongs on `node`: its nodeSelector and its required node affinity,
    as the DaemonSet controller's `NodeShouldRunDaemonPod` checks them (pkg/controller/daemon)."""
    labels = node["metadata"].get("labels") or {}
    if not all(labels.get(k) == v for k, v in (template_spec.get("nodeSelector") or {}).items()):
        return False
    required = ((template_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not required:
        return True
    try:
        return NodeSelector(required, "affinity.nodeAffinity.required").matches(node)
    except ValueError:
        return False  # a pod the API would have refused runs nowhere


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


def _from_template(
    owner: dict[str, Any], kind: str, generate_name: str, labels: dict[str, str]
) -> dict[str, Any]:
    template = copy.deepcopy(owner["spec"]["template"])
    meta = template.get("metadata") or {}
    replicasets.quantities_as_strings(template.get("spec") or {})
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


def _ready(pod: dict[str, Any]) -> bool:
    return replicasets.ready(pod)


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
        self._refused: dict[str, replicasets.Refusal] = {}  # ReplicaSet uid -> its last refused pod
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="controller-manager", daemon=True)
        # kube-controller-manager's ResourceClaim controller (sim.dra.claims), its own loop
        self.claims = ResourceClaimController(api_client, interval, self.echo)

    def start(self) -> ControllerManager:
        self._thread.start()
        self.claims.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.claims.stop()
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
        replica_sets = self._items(
            self.apps.list_replica_set_for_all_namespaces(_preload_content=False, _request_timeout=5)
        )
        jobs = self.jobs.list_jobs()
        pods = self._items(self.core.list_pod_for_all_namespaces(_preload_content=False, _request_timeout=5))
        nodes = self._items(self.core.list_node(_preload_content=False, _request_timeout=5)) if sets else []
        by_owner = _by_controller(pods)
        for ds in sets:
            self._guarded(
                "DaemonSet", ds, self._daemonset, ds, nodes, by_owner.get(ds["metadata"]["uid"], [])
            )
        changed: dict[str, dict[str, Any]] = {}
        sets_of = _by_controller(replica_sets)
        for deploy in deploys:
            owned = sets_of.get(deploy["metadata"]["uid"], [])
            self._guarded("Deployment", deploy, self._deployment, deploy, owned, pods, changed)
        current = self._after(replica_sets, changed)
        for rs in current:
            self._guarded("ReplicaSet", rs, self._replicaset, rs, by_owner.get(rs["metadata"]["uid"], []))
        for job in jobs:
            self._guarded("Job", job, self.jobs.sync_job, job, by_owner.get(job["metadata"]["uid"], []))
        by_uid = {j["metadata"]["uid"]: j for j in jobs}
        self.jobs.forget(set(by_uid))
        self.jobs.release_orphans(pods, by_uid)
        self._collect_garbage(current, {d["metadata"]["uid"] for d in deploys}, self._delete_replica_set)
        owners = {o["metadata"]["uid"] for o in sets + current + deploys + jobs}
        self._collect_garbage(pods, owners, self._delete)
        self._status = {uid: status for uid, status in self._status.items() if uid in owners}
        self._refused = {uid: r for uid, r in self._refused.items() if uid in owners}

    @staticmethod
    def _after(listed: list[dict[str, Any]], changed: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        """The ReplicaSets once this pass's Deployment writes are in: as written, made or gone."""
        uids = {rs["metadata"]["uid"] for rs in listed}
        kept = [changed.get(rs["metadata"]["uid"], rs) for rs in listed]
        made = [rs for uid, rs in changed.items() if rs and uid not in uids]
        return [rs for rs in kept if rs] + made

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

    # ---- Deployment ---------------------------------------------------------------------------

    def _deployment(
        self,
        deploy: dict[str, Any],
        owned: list[dict[str, Any]],
        pods: list[dict[str, Any]],
        changed: dict[str, dict[str, Any]],
    ) -> None:
        """One rollout step; `changed` gets the ReplicaSets written, by uid ({} once deleted)."""
        _, olds = rollout.split(deploy, owned)
        old_uids = {rs["metadata"]["uid"] for rs in olds}
        old_pods = sum(
            1
            for p in pods
            if (ref := controller_of(p)) is not None
            and ref.get("uid") in old_uids
            and (p.get("status") or {}).get("phase") not in TERMINAL
        )
        plan = rollout.plan(deploy, owned, old_pods, time.time())
        meta = deploy["metadata"]
        for body in plan.create:
            made = self._json(
                self.apps.create_namespaced_replica_set(
                    meta["namespace"], body, _preload_content=False, _request_timeout=5
                )
            )
            changed[made["metadata"]["uid"]] = made
            self.echo(
                f"deployment {meta['name']}: created replica set {meta['namespace']}/{body['metadata']['name']}"
            )
        for rs, replicas, wanted in plan.update:
            if "uid" not in rs["metadata"]:
                continue  # made in this pass, with these already
            changed[rs["metadata"]["uid"]] = self._json(
                self.apps.patch_namespaced_replica_set(
                    rs["metadata"]["name"],
                    meta["namespace"],
                    {"metadata": {"annotations": wanted}, "spec": {"replicas": replicas}},
                    _content_type=MERGE,
                    _preload_content=False,
                    _request_timeout=5,
                )
            )
        for rs in plan.delete:
            self._delete_replica_set(rs)
            changed[rs["metadata"]["uid"]] = {}
        if plan.revision and (meta.get("annotations") or {}).get(rollout.REVISION) != plan.revision:
            self.apps.patch_namespaced_deployment(
                meta["name"],
                meta["namespace"],
                {"metadata": {"annotations": {rollout.REVISION: plan.revision}}},
                _content_type=MERGE,
                _preload_content=False,
                _request_timeout=5,
            )
        for message in plan.events:
            self._event({**deploy, "kind": "Deployment"}, "Normal", "ScalingReplicaSet", message)
        self._write_status(deploy, "deployment", plan.status)

    # ---- ReplicaSet -----------------------------------------------------------------------------

    def _replicaset(self, rs: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        meta = rs["metadata"]
        replicas = rollout.replicas_of(rs)
        live = [p for p in pods if replicasets.active(p)]
        for pod in replicasets.surplus(live, len(live) - replicas):
            self._delete(pod)
            live.remove(pod)
            self._event(
                {**rs, "kind": "ReplicaSet"},
                "Normal",
                "SuccessfulDelete",
                f"Deleted pod: {pod['metadata']['name']}",
            )
        now = time.time()
        refused = self._refused.get(meta["uid"])
        missing = replicas - len(live) if refused is None or refused.retry_at <= now else 0
        for _ in range(min(replicasets.CREATE_BATCH, missing)):  # the rest in the next passes
            try:
                made = self._create(replicasets.pod_for(rs), f"replicaset {meta['name']}")
            except client.ApiException as error:
                refused = self._refuse(rs, refused, _reason_of(error), now)
                break
            live.append(made)
            self._event(
                {**rs, "kind": "ReplicaSet"},
                "Normal",
                "SuccessfulCreate",
                f"Created pod: {made['metadata']['name']}",
            )
            self._refused.pop(meta["uid"], None)
            refused = None
        self._write_status(rs, "replica_set", replicasets.status(rs, live, now, refused))

    def _refuse(
        self, rs: dict[str, Any], last: replicasets.Refusal | None, message: str, now: float
    ) -> replicasets.Refusal:
        """A pod the API server refused (a webhook's denial, a quota): a FailedCreate event once per
        message, the ReplicaFailure condition, and the next try after a doubling back-off."""
        refusal = replicasets.refused(last, message, now)
        self._refused[rs["metadata"]["uid"]] = refusal
        if last is None or last.message != message:
            self._event({**rs, "kind": "ReplicaSet"}, "Warning", "FailedCreate", f"Error creating: {message}")
        return refusal

    # ---- garbage collector ----------------------------------------------------------------------

    @staticmethod
    def _collect_garbage(
        dependents: list[dict[str, Any]], owners: set[str], delete: Callable[[dict[str, Any]], None]
    ) -> None:
        """Delete each pod or ReplicaSet whose controlling owner (of the kinds run here) is gone."""
        for obj in dependents:
            ref = controller_of(obj)
            if (
                ref
                and ref.get("kind") in OWNER_KINDS
                and ref.get("uid") not in owners
                and not obj["metadata"].get("deletionTimestamp")
            ):
                delete(obj)

    # ---- API writes -----------------------------------------------------------------------------

    def _create(self, pod: dict[str, Any], who: str, node: str = "") -> dict[str, Any]:
        resp = self.core.create_namespaced_pod(
            pod["metadata"]["namespace"], pod, _preload_content=False, _request_timeout=5
        )
        made = json_object(f"{who}: create pod", json.loads(resp.data))
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

    @staticmethod
    def _json(resp: Any) -> dict[str, Any]:
        return dict(json.loads(resp.data))

    def _delete_replica_set(self, rs: dict[str, Any]) -> None:
        meta = rs["metadata"]
        try:
            self.apps.delete_namespaced_replica_set(
                meta["name"], meta["namespace"], _preload_content=False, _request_timeout=5
            )
        except client.ApiException as error:
            if error.status != 404:
                raise

    def _event(self, owner: dict[str, Any], kind: str, reason: str, message: str) -> None:
        """An event on a Deployment or ReplicaSet (`owner` as listed: with its kind), as its
        controller's event recorder writes it."""
        owner_kind = str(owner.get("kind") or "ReplicaSet")
        recorder.record(
            self.core,
            owner,
            api_version="apps/v1",
            kind=owner_kind,
            type_=kind,
            reason=reason,
            message=message,
            component=f"{owner_kind.lower()}-controller",
        )

    def _write_status(self, owner: dict[str, Any], kind: str, status: dict[str, Any]) -> None:
        meta = owner["metadata"]
        if self._status.get(meta["uid"]) == status:
            return
        patch = getattr(self.apps, f"patch_namespaced_{'daemon_set' if kind == 'daemonset' else kind}_status")
        # a merge patch: lists (conditions) replaced whole, a null field removed
        patch(
            meta["name"],
            meta["namespace"],
            {"status": status},
            _content_type=MERGE,
            _preload_content=False,
            _request_timeout=5,
        )
        self._status[meta["uid"]] = status
