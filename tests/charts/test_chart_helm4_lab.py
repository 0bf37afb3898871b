"""helm 4 with its default flags (server-side apply, hooks waited on) installs, upgrades and uninstalls
charts/dynmig against the lab's simulated API server, through the admin kubeconfig the lab writes.

No controller runs Jobs in the lab: the test stands in for the Job controller and the kubelet, as
test_chart_cluster does, by running each hook Job's `dynmig certs ...` command against the API server
and then writing the Job's status as the Job controller writes it when its pod succeeds."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator

import kubernetes
import pytest
from chart_testkit import CHART, container, helm_binary

from certs.main import main as certs_main
from sim.apiserver.objects import now

NAMESPACE = "dynmig"
RELEASE = "lab"


def _run_job(apiserver, job) -> int:
    args = [a for a in container(job, "certs")["args"][1:] if a != "--in-cluster"]
    return certs_main([*args, "--kubeconfig", str(apiserver.kubeconfig("certs"))])


def _complete(batch: kubernetes.client.BatchV1Api, job) -> None:
    """The Job controller's status for a Job whose one pod succeeded."""
    stamp = now()
    status = {
        "startTime": stamp,
        "completionTime": stamp,
        "succeeded": 1,
        "ready": 0,
        "terminating": 0,
        "uncountedTerminatedPods": {},
        "conditions": [
            {"type": t, "status": "True", "lastProbeTime": stamp, "lastTransitionTime": stamp}
            for t in ("SuccessCriteriaMet", "Complete")
        ],
    }
    batch.patch_namespaced_job_status(job["metadata"]["name"], NAMESPACE, {"status": status})


@pytest.fixture
def job_runner(apiserver) -> Iterator[list[str]]:
    """Runs each new Job's command once and marks it Complete; yields the names of the Jobs run."""
    batch = kubernetes.client.BatchV1Api(apiserver.api_client("admin"))
    done: list[str] = []
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(0.1):
            for job in apiserver.registry.list(_jobs_request(apiserver))["items"]:
                uid = job["metadata"]["uid"]
                if uid in done or job.get("status", {}).get("conditions"):
                    continue
                done.append(uid)
                assert _run_job(apiserver, job) == 0
                _complete(batch, job)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield done
    stop.set()
    thread.join(timeout=5)


def _jobs_request(apiserver):
    from sim.apiserver.registry import Request
    from sim.apiserver.resources import BY_KEY

    return Request(apiserver.identity("admin"), BY_KEY[("batch", "jobs")], NAMESPACE)


def _helm(apiserver, tmp_path, *args: str) -> str:
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(tmp_path / "helm-cache"),
        "HELM_CONFIG_HOME": str(tmp_path / "helm-config"),
        "HELM_DATA_HOME": str(tmp_path / "helm-data"),
        "KUBECONFIG": str(apiserver.kubeconfig("admin")),
    }
    done = subprocess.run(
        [helm_binary(), *args, "--namespace", NAMESPACE],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_helm4_installs_upgrades_and_uninstalls_the_chart_on_the_lab_api_server(
    apiserver, job_runner, tmp_path
):
    apiserver.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    out = _helm(apiserver, tmp_path, "install", RELEASE, str(CHART))
    assert "STATUS: deployed" in out
    assert len(job_runner) == 2  # the pre-install and post-install certificate hooks ran
    role = apiserver.get("clusterroles", f"{RELEASE}-dynmig-server")
    assert role is not None, [
        r["metadata"]["name"] for r in apiserver.registry.list(_cluster_roles(apiserver))["items"]
    ]
    assert [(e["manager"], e["operation"]) for e in role["metadata"]["managedFields"]] == [("helm", "Apply")]
    deployment = apiserver.get("deployments", f"{RELEASE}-dynmig-scheduler", NAMESPACE)
    assert deployment["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"

    _helm(
        apiserver,
        tmp_path,
        "upgrade",
        RELEASE,
        str(CHART),
        "--set",
        "server.replicas=2",
        "--set",
        "networkPolicy.enabled=true",
    )
    assert apiserver.get("deployments", f"{RELEASE}-dynmig-scheduler", NAMESPACE)["spec"]["replicas"] == 2
    assert len(job_runner) == 4  # pre-upgrade and post-upgrade hooks, recreated
    assert apiserver.get("networkpolicies", f"{RELEASE}-dynmig-scheduler", NAMESPACE) is not None

    _helm(apiserver, tmp_path, "uninstall", RELEASE)
    assert apiserver.get("clusterroles", f"{RELEASE}-dynmig-server") is None
    assert apiserver.get("deployments", f"{RELEASE}-dynmig-scheduler", NAMESPACE) is None


def _cluster_roles(apiserver):
    from sim.apiserver.registry import Request
    from sim.apiserver.resources import BY_KEY

    return Request(apiserver.identity("admin"), BY_KEY[("rbac.authorization.k8s.io", "clusterroles")])
