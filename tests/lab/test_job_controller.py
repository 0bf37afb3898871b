"""The lab's Job controller against the simulated API server, the test standing in for the kubelet
(it writes each pod's phase as a kubelet does when the container exits): pods made from the
template, counts, back-off limit, deadline, suspend, TTL and the tracking finalizer."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client
from lab.controllers import ControllerManager
from lab.jobs import TRACKING_FINALIZER
from sim.apiserver import ApiServer
from waiting_testkit import wait_for

NS = "default"


@dataclass
class Cluster:
    api: ApiServer
    core: client.CoreV1Api
    batch: client.BatchV1Api
    lines: list[str] = field(default_factory=list)

    def create_job(self, name: str, restart: str = "Never", **spec: Any) -> dict[str, Any]:
        body = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name},
            "spec": {
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "restartPolicy": restart,
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "work", "image": "busybox"}],
                    },
                },
                **spec,
            },
        }
        return self.batch.create_namespaced_job(NS, body).to_dict()

    def job(self, name: str) -> dict[str, Any]:
        return self.api.get("jobs", name, NS) or {}

    def pods(self, name: str) -> list[dict[str, Any]]:
        """The Job's pods, oldest first."""
        items = [
            p
            for p in self.api.registry.list(_pods_request(self.api))["items"]
            if (p["metadata"].get("labels") or {}).get("job-name") == name
        ]
        return sorted(items, key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]))

    def live(self, name: str) -> list[dict[str, Any]]:
        return [
            p
            for p in self.pods(name)
            if not p["metadata"].get("deletionTimestamp")
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]

    def run(self, pod: dict[str, Any], ready: bool = True, restarts: int = 0) -> None:
        now = _now()
        self.core.patch_namespaced_pod_status(
            pod["metadata"]["name"],
            NS,
            {
                "status": {
                    "phase": "Running",
                    "conditions": [{"type": "Ready", "status": str(ready), "lastTransitionTime": now}],
                    "containerStatuses": [
                        {
                            "name": "work",
                            "image": "busybox",
                            "imageID": "",
                            "ready": ready,
                            "restartCount": restarts,
                            "state": {"running": {"startedAt": now}},
                        }
                    ],
                }
            },
        )

    def end(self, pod: dict[str, Any], phase: str) -> None:
        """What kubelet writes when the pod's container exits (restartPolicy Never)."""
        now = _now()
        code = 0 if phase == "Succeeded" else 1
        self.core.patch_namespaced_pod_status(
            pod["metadata"]["name"],
            NS,
            {
                "status": {
                    "phase": phase,
                    "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": now}],
                    "containerStatuses": [
                        {
                            "name": "work",
                            "image": "busybox",
                            "imageID": "",
                            "ready": False,
                            "restartCount": 0,
                            "state": {
                                "terminated": {
                                    "exitCode": code,
                                    "reason": "Completed" if code == 0 else "Error",
                                    "finishedAt": now,
                                }
                            },
                        }
                    ],
                }
            },
        )

    def events(self, name: str) -> list[str]:
        return [e.reason for e in self.core.list_namespaced_event(NS).items if e.involved_object.name == name]


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _pods_request(api: ApiServer):
    from sim.apiserver.registry import Request
    from sim.apiserver.resources import BY_KEY

    return Request(api.identity("admin"), BY_KEY[("", "pods")], NS)


@pytest.fixture
def cluster(tmp_path):
    api = ApiServer(workdir=tmp_path / "api").start()
    found = Cluster(api, client.CoreV1Api(api.api_client()), client.BatchV1Api(api.api_client()))
    manager = ControllerManager(
        api.api_client(), echo=found.lines.append, interval=0.05, job_backoff=(0.05, 0.2)
    ).start()
    yield found
    manager.stop()
    api.stop()


def _conditions(job: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (c["type"], c.get("reason") or "")
        for c in (job.get("status") or {}).get("conditions") or []
        if c["status"] == "True"
    ]


def _finished(job: dict[str, Any]) -> bool:
    return any(t in ("Complete", "Failed") for t, _ in _conditions(job))


S, F = "Succeeded", "Failed"
DONE = [("SuccessCriteriaMet", "CompletionsReached"), ("Complete", "CompletionsReached")]
BACKOFF = [("FailureTarget", "BackoffLimitExceeded"), ("Failed", "BackoffLimitExceeded")]
CASES = {
    "a Job with no counts runs one pod to Complete": ({}, [S], DONE, (1, 0), 1),
    "completions 3 run two at a time with parallelism 2": (
        {"completions": 3, "parallelism": 2},
        [S] * 3,
        DONE,
        (3, 0),
        2,
    ),
    "a failed pod is replaced and the Job completes": ({"backoffLimit": 2}, [F, S], DONE, (1, 1), 1),
    "a failure past backoffLimit 1 fails the Job": ({"backoffLimit": 1}, [F, F], BACKOFF, (0, 2), 1),
    "backoffLimit 0 fails the Job at its first failure": ({"backoffLimit": 0}, [F], BACKOFF, (0, 1), 1),
    "a work queue completes once one pod succeeded and the others ended": (
        {"parallelism": 2},
        [S, S],
        DONE,
        (2, 0),
        2,
    ),
}


@pytest.mark.parametrize(
    ("spec", "outcomes", "conditions", "counts", "most_active"), CASES.values(), ids=list(CASES)
)
def test_a_job_ends_as_kube_controller_manager_ends_it(
    cluster, spec, outcomes, conditions, counts, most_active
):
    cluster.create_job("work", **spec)
    todo = list(outcomes)
    seen: set[str] = set()
    busiest = 0

    def step() -> bool:
        nonlocal busiest
        live = cluster.live("work")
        busiest = max(busiest, len(live))
        fresh = [p for p in live if p["metadata"]["uid"] not in seen]
        if len(fresh) < min(most_active, len(todo)):
            return False  # the controller is still making this round's pods
        for pod in live:
            if pod["metadata"]["uid"] not in seen and todo:
                seen.add(pod["metadata"]["uid"])
                cluster.end(pod, todo.pop(0))
        return _finished(cluster.job("work"))

    wait_for(step, "the Job to finish")
    job = cluster.job("work")
    assert _conditions(job) == conditions
    assert (job["status"]["succeeded"], job["status"]["failed"]) == counts
    assert job["status"]["active"] == 0
    assert len(cluster.pods("work")) == len(outcomes)  # one pod per outcome, none spare
    assert busiest == most_active
    assert ("completionTime" in job["status"]) == (conditions == DONE)
    assert job["status"]["uncountedTerminatedPods"] == {"succeeded": [], "failed": []}
    assert not [
        p for p in cluster.pods("work") if TRACKING_FINALIZER in (p["metadata"].get("finalizers") or [])
    ]
    reason = "Completed" if conditions == DONE else "BackoffLimitExceeded"
    wait_for(lambda: reason in cluster.events("work"), f"the {reason} event")


def test_a_job_pod_carries_the_job_labels_an_owner_reference_and_the_tracking_finalizer(cluster):
    job = cluster.create_job("shape")
    pod = wait_for(lambda: cluster.pods("shape"), "the Job's pod")[0]
    meta = pod["metadata"]
    assert meta["name"].startswith("shape-")
    uid = job["metadata"]["uid"]
    assert {k: meta["labels"][k] for k in meta["labels"]} == {
        "app": "shape",
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": "shape",
        "controller-uid": uid,
        "job-name": "shape",
    }
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "shape",
            "uid": uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert meta["finalizers"] == [TRACKING_FINALIZER]
    assert pod["spec"]["restartPolicy"] == "Never"
    status = wait_for(lambda: cluster.job("shape").get("status"), "the Job's status")
    assert status["active"] == 1 and status["ready"] == 0 and status["startTime"]
    cluster.run(pod)
    wait_for(lambda: cluster.job("shape")["status"].get("ready") == 1, "the ready count")
    wait_for(lambda: "SuccessfulCreate" in cluster.events("shape"), "the SuccessfulCreate event")


def test_a_job_whose_restarts_reach_the_backoff_limit_fails_and_its_pod_is_deleted(cluster):
    cluster.create_job("flaky", restart="OnFailure", backoffLimit=2)
    pod = wait_for(lambda: cluster.live("flaky"), "the Job's pod")[0]
    cluster.run(pod, ready=False, restarts=1)
    time.sleep(0.3)
    assert not _finished(cluster.job("flaky")), "one restart is below backoffLimit 2"
    cluster.run(pod, ready=False, restarts=2)
    wait_for(lambda: _finished(cluster.job("flaky")), "the Job to fail")
    assert _conditions(cluster.job("flaky")) == BACKOFF
    assert cluster.pods("flaky") == []  # deleted (grace 0), counted, finalizer removed
    assert cluster.job("flaky")["status"]["failed"] == 1


def test_a_job_past_its_active_deadline_fails_and_its_running_pod_is_deleted(cluster):
    cluster.create_job("slow", activeDeadlineSeconds=1)
    pod = wait_for(lambda: cluster.live("slow"), "the Job's pod")[0]
    cluster.run(pod)
    wait_for(lambda: _finished(cluster.job("slow")), "the deadline")
    assert _conditions(cluster.job("slow")) == [
        ("FailureTarget", "DeadlineExceeded"),
        ("Failed", "DeadlineExceeded"),
    ]
    assert cluster.pods("slow") == []
    assert cluster.job("slow")["status"]["failed"] == 1
    wait_for(lambda: "DeadlineExceeded" in cluster.events("slow"), "the DeadlineExceeded event")


def test_a_suspended_job_runs_no_pod_until_it_is_resumed(cluster):
    cluster.create_job("held", suspend=True)
    wait_for(lambda: ("Suspended", "JobSuspended") in _conditions(cluster.job("held")), "Suspended")
    assert cluster.pods("held") == []
    assert "startTime" not in cluster.job("held")["status"]
    cluster.batch.patch_namespaced_job("held", NS, {"spec": {"suspend": False}})
    pod = wait_for(lambda: cluster.live("held"), "a pod once resumed")[0]
    job = wait_for(lambda: (j := cluster.job("held"))["status"].get("startTime") and j, "startTime")
    suspended = next(c for c in job["status"]["conditions"] if c["type"] == "Suspended")
    assert (suspended["status"], suspended["reason"]) == ("False", "JobResumed")
    cluster.batch.patch_namespaced_job("held", NS, {"spec": {"suspend": True}})
    wait_for(lambda: not cluster.pods("held"), "the running pod deleted on suspend")
    job = wait_for(lambda: (j := cluster.job("held"))["status"]["active"] == 0 and j, "active 0")
    assert job["status"]["failed"] == 0, "a pod deleted by a suspend is not a failure"
    assert pod["metadata"]["uid"]
    wait_for(lambda: {"Suspended", "Resumed"} <= set(cluster.events("held")), "the events")


def test_a_running_pod_that_is_deleted_counts_as_failed_and_is_replaced(cluster):
    cluster.create_job("lost", backoffLimit=3)
    first = wait_for(lambda: cluster.live("lost"), "the Job's pod")[0]
    cluster.run(first)
    cluster.core.delete_namespaced_pod(first["metadata"]["name"], NS)
    second = wait_for(
        lambda: [p for p in cluster.live("lost") if p["metadata"]["uid"] != first["metadata"]["uid"]],
        "a replacement",
    )[0]
    wait_for(lambda: cluster.job("lost")["status"]["failed"] == 1, "the deleted pod counted as failed")
    cluster.end(second, S)
    wait_for(lambda: _finished(cluster.job("lost")), "the Job to complete")
    assert _conditions(cluster.job("lost")) == DONE


def test_a_finished_job_with_a_ttl_is_deleted_with_its_pods(cluster):
    cluster.create_job("brief", ttlSecondsAfterFinished=0)
    pod = wait_for(lambda: cluster.live("brief"), "the Job's pod")[0]
    cluster.end(pod, S)
    wait_for(lambda: not cluster.job("brief"), "the TTL to delete the Job")
    wait_for(lambda: not cluster.pods("brief"), "the garbage collector to delete its pod")


def test_a_job_the_lab_cannot_run_is_named_and_the_others_still_run(cluster):
    cluster.create_job("indexed", completionMode="Indexed", completions=2)
    cluster.create_job("plain")
    pod = wait_for(lambda: cluster.live("plain"), "plain's pod")[0]
    cluster.end(pod, S)
    wait_for(lambda: _finished(cluster.job("plain")), "plain to complete")
    assert cluster.pods("indexed") == []
    assert any(
        "Job default/indexed: not reconciled: ValueError: spec.completionMode 'Indexed'" in line
        for line in cluster.lines
    ), cluster.lines


def test_a_deleted_running_job_takes_its_pods_with_it_despite_their_tracking_finalizer(cluster):
    cluster.create_job("gone", parallelism=2)
    pods = wait_for(lambda: len(p := cluster.live("gone")) == 2 and p, "two pods")
    for pod in pods:
        cluster.run(pod)
    cluster.batch.delete_namespaced_job("gone", NS)  # background propagation, kubectl's default
    wait_for(lambda: not cluster.pods("gone"), "the garbage collector and the finalizer release")


def test_a_job_with_a_manual_selector_gets_pods_with_only_its_template_labels(cluster):
    cluster.create_job("manual", manualSelector=True, selector={"matchLabels": {"app": "manual"}})
    pod = wait_for(lambda: cluster.api.registry.list(_pods_request(cluster.api))["items"], "the Job's pod")[0]
    assert pod["metadata"]["labels"] == {"app": "manual"}
    assert pod["metadata"]["ownerReferences"][0]["name"] == "manual"
