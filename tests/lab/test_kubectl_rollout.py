"""kubectl 1.35's Deployment verbs against the simulated API server and the lab's controller
manager: what a user sees of `kubectl create deployment`, `set image`, `rollout
status|history|undo|restart`, `scale` and `get rs`. The kubelet's part (a pod starts and becomes
Ready; a deleted pod's containers stop) is played over the API, as a kubelet writes it."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client
from lab.controllers import ControllerManager
from sim.apiserver import ApiServer


@pytest.fixture
def api(tmp_path: Path) -> Iterator[ApiServer]:
    server = ApiServer(workdir=tmp_path / "api").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def kubectl_lab(api: ApiServer, tmp_path: Path, kubectl: str) -> Iterator[Callable[..., str]]:
    api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    manager = ControllerManager(api.api_client(), interval=0.05).start()
    core = client.CoreV1Api(api.api_client("kubelet"))
    done = threading.Event()

    def kubelet() -> None:
        while not done.wait(0.05):
            for pod in core.list_pod_for_all_namespaces().items:
                meta = pod.metadata
                if meta.deletion_timestamp:
                    core.delete_namespaced_pod(meta.name, meta.namespace, grace_period_seconds=0)
                elif pod.status.phase == "Pending":
                    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                    ready = {"type": "Ready", "status": "True", "lastTransitionTime": now}
                    core.patch_namespaced_pod_status(
                        meta.name, meta.namespace, {"status": {"phase": "Running", "conditions": [ready]}}
                    )

    thread = threading.Thread(target=kubelet, daemon=True)
    thread.start()
    kubeconfig = str(api.kubeconfig("admin"))

    def run(*args: str) -> str:
        out = subprocess.run(
            [kubectl, "--kubeconfig", kubeconfig, "--cache-dir", str(tmp_path / "cache"), *args],
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
        assert out.returncode == 0, out.stderr
        return out.stdout

    try:
        yield run
    finally:
        done.set()
        thread.join(5)
        manager.stop()


def _table(text: str) -> list[list[str]]:
    return [line.split() for line in text.strip().splitlines()[1:]]


def _replica_sets(run: Callable[..., str]) -> dict[str, dict]:
    items = json.loads(run("get", "rs", "-o", "json"))["items"]
    return {rs["metadata"]["name"]: rs for rs in items}


def _image(rs: dict) -> str:
    return str(rs["spec"]["template"]["spec"]["containers"][0]["image"])


def test_a_deployment_rolls_out_and_back_through_replica_sets_as_kubectl_shows(kubectl_lab):
    run = kubectl_lab
    run("create", "deployment", "web", "--image=nginx:1.25", "--replicas=2")
    assert 'deployment "web" successfully rolled out' in run(
        "rollout", "status", "deployment/web", "--timeout=60s"
    )
    [first] = _replica_sets(run).values()
    name = first["metadata"]["name"]
    digest = first["metadata"]["labels"]["pod-template-hash"]
    assert name == f"web-{digest}"
    pods = _table(run("get", "pods"))
    assert len(pods) == 2 and all(row[0].startswith(f"{name}-") for row in pods)

    run("set", "image", "deployment/web", "nginx=nginx:1.26")
    assert "successfully rolled out" in run("rollout", "status", "deployment/web", "--timeout=60s")
    sets = _replica_sets(run)
    assert {_image(rs): rs["spec"]["replicas"] for rs in sets.values()} == {"nginx:1.25": 0, "nginx:1.26": 2}
    history = _table(run("rollout", "history", "deployment/web"))
    assert [row[0] for row in history[1:]] == ["1", "2"]

    assert "rolled back" in run("rollout", "undo", "deployment/web")
    assert "successfully rolled out" in run("rollout", "status", "deployment/web", "--timeout=60s")
    after = _replica_sets(run)
    assert set(after) == set(sets), "a rollback reuses the old ReplicaSet"
    assert after[name]["spec"]["replicas"] == 2
    assert after[name]["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "3"
    assert [row[0] for row in _table(run("rollout", "history", "deployment/web"))[1:]] == ["2", "3"]

    rows = {row[0]: row[1:4] for row in _table(run("get", "rs"))}
    assert rows[name] == ["2", "2", "2"]
    assert [v for k, v in rows.items() if k != name] == [["0", "0", "0"]]
    describe = run("describe", "deployment", "web")
    assert f"NewReplicaSet:   {name} (2/2 replicas created)" in describe
    assert f"Scaled up replica set {name} to 2 from 0" in describe
    assert "Progressing    True    NewReplicaSetAvailable" in describe


def test_rollout_restart_and_scale_make_and_size_replica_sets(kubectl_lab):
    run = kubectl_lab
    run("create", "deployment", "web", "--image=nginx:1.25", "--replicas=1")
    run("rollout", "status", "deployment/web", "--timeout=60s")
    run("rollout", "restart", "deployment/web")
    assert "successfully rolled out" in run("rollout", "status", "deployment/web", "--timeout=60s")
    run("scale", "deployment/web", "--replicas=3")
    assert "successfully rolled out" in run("rollout", "status", "deployment/web", "--timeout=60s")
    sets = _replica_sets(run)
    restarted = [rs for rs in sets.values() if rs["spec"]["replicas"] == 3]
    assert len(sets) == 2 and len(restarted) == 1
    assert "kubectl.kubernetes.io/restartedAt" in restarted[0]["spec"]["template"]["metadata"]["annotations"]
    deploy = _table(run("get", "deployment", "web"))
    assert deploy[0][1:4] == ["3/3", "3", "3"]


def test_deleting_a_deployment_deletes_its_replica_sets_and_their_pods(kubectl_lab):
    run = kubectl_lab
    run("create", "deployment", "web", "--image=nginx:1.25", "--replicas=2")
    run("rollout", "status", "deployment/web", "--timeout=60s")
    run("delete", "deployment", "web")
    deadline = time.monotonic() + 30
    while run("get", "rs,pods", "-o", "name").strip():
        assert time.monotonic() < deadline, "the ReplicaSet and its pods were not collected"
        time.sleep(0.1)


def test_a_refused_pod_shows_as_failed_create_and_replica_failure_until_the_server_accepts_it(
    kubectl_lab, api
):
    run = kubectl_lab
    denial = 'admission webhook "pods.dynmig.io" denied the request: no GPU fits'
    api.faults.fail_next(2, verb="create", resource="pods", code=400, message=denial)
    run("create", "deployment", "web", "--image=nginx:1.25")
    deadline = time.monotonic() + 30
    while "ReplicaFailure" not in (
        conditions := run("get", "deployment", "web", "-o", "jsonpath={.status.conditions}")
    ):
        assert time.monotonic() < deadline, "no ReplicaFailure condition"
        time.sleep(0.1)
    assert "FailedCreate" in conditions and "no GPU fits" in conditions
    assert f"Error creating: {denial}" in run("describe", "rs")
    assert "successfully rolled out" in run("rollout", "status", "deployment/web", "--timeout=60s")
    while "ReplicaFailure" in run("get", "deployment", "web", "-o", "jsonpath={.status.conditions}"):
        assert time.monotonic() < deadline, "the ReplicaFailure condition stayed after the pods were made"
        time.sleep(0.1)
    assert "SuccessfulCreate" in run("describe", "rs")
