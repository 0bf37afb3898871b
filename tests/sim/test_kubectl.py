"""kubectl 1.35 against the simulated API server: the verbs operators and the lab use."""

from __future__ import annotations

import json
import subprocess
import threading

import pytest
from kubernetes import client

POD = """apiVersion: v1
kind: Pod
metadata:
  name: trainer
  labels: {app: train}
spec:
  containers: [{name: c, image: busybox, resources: {limits: {nvidia.com/gpumem: "8000"}}}]
"""


@pytest.fixture
def run(apiserver, kubectl, tmp_path):
    kubeconfig = str(apiserver.kubeconfig("admin"))

    def kubectl_run(*args: str) -> str:
        out = subprocess.run([kubectl, "--kubeconfig", kubeconfig, "--cache-dir", str(tmp_path / "cache"),
                              *args], capture_output=True, text=True, timeout=60, check=False)
        assert out.returncode == 0, out.stderr
        return out.stdout

    return kubectl_run


@pytest.fixture
def start(apiserver, kubectl, tmp_path):
    """start(*args) -> a running kubectl (stdout/stderr to pipes); killed at teardown if still running."""
    kubeconfig = str(apiserver.kubeconfig("admin"))
    procs: list[subprocess.Popen] = []

    def kubectl_start(*args: str) -> subprocess.Popen:
        proc = subprocess.Popen([kubectl, "--kubeconfig", kubeconfig, "--cache-dir", str(tmp_path / "cache"),
                                 *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(proc)
        return proc

    yield kubectl_start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


@pytest.fixture
def fake_kubelet(apiserver):
    """Plays the kubelet's part of a graceful deletion: a pod with a deletionTimestamp is deleted
    with grace period 0 (its containers have stopped)."""
    core = client.CoreV1Api(apiserver.api_client("kubelet"))
    done = threading.Event()

    def run() -> None:
        while not done.wait(0.1):
            for p in core.list_pod_for_all_namespaces().items:
                if p.metadata.deletion_timestamp:
                    core.delete_namespaced_pod(p.metadata.name, p.metadata.namespace, grace_period_seconds=0)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield
    done.set()
    thread.join(5)


def _ready(apiserver, name: str) -> None:
    core = client.CoreV1Api(apiserver.api_client("kubelet"))
    core.patch_namespaced_pod_status(name, "default", {"status": {
        "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})


BOUND_POD = """apiVersion: v1
kind: Pod
metadata: {name: worker}
spec:
  nodeName: gpu-node-1
  terminationGracePeriodSeconds: 3600
  containers: [{name: c, image: busybox}]
"""


def test_kubectl_wait_for_ready_returns_when_the_pod_turns_ready(run, start, apiserver, tmp_path):
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(BOUND_POD)
    run("create", "-f", str(manifest), "--validate=false")
    waiting = start("wait", "--for=condition=Ready", "pod/worker", "--timeout=50s")
    _ready(apiserver, "worker")
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, err
    assert "pod/worker condition met" in out


def test_kubectl_get_watch_shows_the_phase_change(run, start, apiserver, tmp_path):
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(BOUND_POD)
    run("create", "-f", str(manifest), "--validate=false")
    watching = start("get", "pod", "worker", "-w")
    killer = threading.Timer(60, watching.kill)  # a watch that never shows it fails, not hangs
    killer.start()
    try:
        header, first = watching.stdout.readline(), watching.stdout.readline()
        assert header.split()[:2] == ["NAME", "STATUS"] and first.split()[:2] == ["worker", "Pending"]
        # kubectl watches from the version it listed, so the change is seen whenever it lands.
        _ready(apiserver, "worker")
        assert watching.stdout.readline().split()[:2] == ["worker", "Running"]
    finally:
        killer.cancel()


def test_kubectl_delete_of_a_bound_pod_returns_once_the_kubelet_confirms(run, fake_kubelet, apiserver, tmp_path):
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(BOUND_POD)
    run("create", "-f", str(manifest), "--validate=false")
    # The grace period is an hour: only the kubelet's grace-0 delete can end this within the timeout.
    assert 'pod "worker" deleted' in run("delete", "pod", "worker")
    assert apiserver.get("pods", "worker", "default") is None


def test_kubectl_creates_annotates_labels_reads_and_deletes_a_pod(run, tmp_path, apiserver):
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(POD)
    assert "pod/trainer created" in run("create", "-f", str(manifest), "--validate=false")
    run("annotate", "pod", "trainer", "nvidia.com/mig-profile-preference=1g.24gb")
    run("label", "pod", "trainer", "tier=gpu")
    pod = json.loads(run("get", "pod", "trainer", "-o", "json"))
    assert pod["metadata"]["annotations"] == {"nvidia.com/mig-profile-preference": "1g.24gb"}
    assert pod["metadata"]["labels"] == {"app": "train", "tier": "gpu"}
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpumem": "8000"}
    table = run("get", "pods", "-l", "tier=gpu")
    assert table.split("\n")[0].split()[0] == "NAME" and "trainer" in table
    run("delete", "pod", "trainer")
    assert apiserver.get("pods", "trainer", "default") is None


def test_kubectl_lists_nodes_and_namespaces_as_tables(run, apiserver):
    apiserver.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-node-1"},
                      "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    nodes = run("get", "nodes")
    assert "gpu-node-1" in nodes and "Ready" in nodes
    listed = json.loads(run("get", "namespaces", "-o", "json"))
    assert {"default", "kube-system"} <= {n["metadata"]["name"] for n in listed["items"]}


def test_kubectl_creates_a_namespace_configmap_secret_and_serviceaccount_with_its_protobuf_bodies(run, apiserver):
    assert "namespace/ml created" in run("create", "namespace", "ml")
    assert apiserver.get("namespaces", "ml")["status"]["phase"] == "Active"
    run("create", "configmap", "settings", "-n", "ml", "--from-literal=profile=1g.10gb")
    run("create", "secret", "generic", "token", "-n", "ml", "--from-literal=key=s3cret")
    run("create", "serviceaccount", "trainer", "-n", "ml")
    assert apiserver.get("configmaps", "settings", "ml")["data"] == {"profile": "1g.10gb"}
    assert apiserver.get("secrets", "token", "ml")["data"] == {"key": "czNjcmV0"}
    assert apiserver.get("serviceaccounts", "trainer", "ml") is not None
