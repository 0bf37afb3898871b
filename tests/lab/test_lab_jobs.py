"""Jobs on a running lab: a Job pod of the dynmig image runs its args as a real `dynmig` process,
its exit ends the pod by its restartPolicy, and the Job controller counts it against backoffLimit,
with nothing in the test writing a pod's or a Job's status."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from lab.cluster import Lab
from lab.kit import gpu_pod
from sim.kubelet.pods import restarted_after
from waiting_testkit import wait_for

from mig.annotations import MIG_ALLOCATIONS
from tests import lab_testkit

NS = "default"
IMAGE = "ghcr.io/dynmig/dynmig:0.1.0"
# a dynmig command that fails at once: argparse refuses the key type (exit code 2)
FAILING = ["certs", "init", "--in-cluster", f"--namespace={NS}", "--service=web", "--key-type=bogus"]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    yield from lab_testkit.started(tmp_path_factory, "jobs-lab", "gpu-a=1xA100-SXM4-40GB")


def _job(name: str, restart: str, args: list[str], backoff_limit: int) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": backoff_limit,
            "template": {
                "spec": {
                    "restartPolicy": restart,
                    "containers": [{"name": "certs", "image": IMAGE, "args": args}],
                }
            },
        },
    }


def _failed(batch: client.BatchV1Api, name: str) -> Any:
    job = batch.read_namespaced_job(name, NS)
    reasons = [c.reason for c in job.status.conditions or [] if c.type == "Failed" and c.status == "True"]
    return job if reasons else None


def test_a_dynmig_job_pod_that_exits_non_zero_is_retried_until_backoff_limit_then_the_job_fails(lab):
    batch, core = client.BatchV1Api(lab.api_client()), lab.core()
    batch.create_namespaced_job(NS, _job("bad-never", "Never", FAILING, backoff_limit=1))
    job = wait_for(lambda: _failed(batch, "bad-never"), "the Job to fail")
    assert [(c.type, c.reason) for c in job.status.conditions] == [
        ("FailureTarget", "BackoffLimitExceeded"),
        ("Failed", "BackoffLimitExceeded"),
    ]
    assert (job.status.failed, job.status.active) == (2, 0)  # backoffLimit 1: a second pod, then no more
    pods = core.list_namespaced_pod(NS, label_selector="job-name=bad-never").items
    assert [p.status.phase for p in pods] == ["Failed", "Failed"]
    assert {p.status.container_statuses[0].state.terminated.exit_code for p in pods} == {2}
    log = core.read_namespaced_pod_log(pods[0].metadata.name, NS)
    assert "argument --key-type: invalid choice: 'bogus'" in log


def test_a_dynmig_job_pod_with_restart_on_failure_is_restarted_in_place_until_backoff_limit(lab):
    batch, core = client.BatchV1Api(lab.api_client()), lab.core()
    batch.create_namespaced_job(NS, _job("bad-onfailure", "OnFailure", FAILING, backoff_limit=1))
    first = wait_for(
        lambda: core.list_namespaced_pod(NS, label_selector="job-name=bad-onfailure").items, "the pod"
    )[0]
    job = wait_for(lambda: _failed(batch, "bad-onfailure"), "the Job to fail")
    assert [(c.type, c.reason) for c in job.status.conditions] == [
        ("FailureTarget", "BackoffLimitExceeded"),
        ("Failed", "BackoffLimitExceeded"),
    ]
    assert job.status.failed == 1  # one pod, restarted in place, deleted once its restarts reached the limit
    wait_for(
        lambda: not core.list_namespaced_pod(NS, label_selector="job-name=bad-onfailure").items,
        "the restarted pod deleted",
    )
    assert first.metadata.finalizers == ["batch.kubernetes.io/job-tracking"]


@pytest.mark.parametrize(
    ("policy", "code", "restarted"),
    [
        (None, 0, True),  # Always, the API default
        ("Always", 1, True),
        ("OnFailure", 0, False),
        ("OnFailure", 2, True),
        ("OnFailure", -9, True),  # killed by SIGKILL: exit code 137
        ("Never", 1, False),
        ("Never", 0, False),
    ],
)
def test_kubelet_restarts_an_exited_container_only_as_the_pods_restart_policy_says(policy, code, restarted):
    pod = {"spec": {"restartPolicy": policy} if policy else {}}
    assert restarted_after(pod, code) is restarted


def test_a_gpu_job_runs_its_pods_on_mig_slices_and_completes_when_they_finish_leaving_no_instance(lab):
    batch, core = client.BatchV1Api(lab.api_client()), lab.core()
    pod = gpu_pod("train", memory_mib=5000)
    template = {"spec": {**pod["spec"], "restartPolicy": "Never"}}
    batch.create_namespaced_job(
        NS,
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "train"},
            "spec": {"completions": 3, "parallelism": 2, "template": template},
        },
    )
    finished: set[str] = set()

    def step() -> bool:
        for p in core.list_namespaced_pod(NS, label_selector="job-name=train").items:
            placed = (p.metadata.annotations or {}).get(MIG_ALLOCATIONS)
            if p.status.phase == "Running" and placed and p.metadata.name not in finished:
                finished.add(p.metadata.name)  # the workload ran on its MIG device: let it end
                lab.finish(p.metadata.name, NS)
        return _complete(batch, "train")

    wait_for(step, "the GPU Job to complete")
    job = batch.read_namespaced_job("train", NS)
    assert (job.status.succeeded, job.status.failed, len(finished)) == (3, 0, 3)
    nvml = lab.nodes["gpu-a"].nvml
    wait_for(
        lambda: not [gi for gpu in nvml.gpus() for gi in gpu.gpu_instances], "every MIG instance destroyed"
    )


def _complete(batch: client.BatchV1Api, name: str) -> bool:
    job = batch.read_namespaced_job(name, NS)
    return any(c.type == "Complete" and c.status == "True" for c in job.status.conditions or [])
