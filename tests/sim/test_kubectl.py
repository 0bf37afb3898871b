"""kubectl 1.35 against the simulated API server: the verbs operators and the lab use."""

from __future__ import annotations

import json
import subprocess

import pytest

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
