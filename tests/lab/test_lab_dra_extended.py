"""DRA extended resources (KEP-5004) on the lab: a pod written for GPU Operator's MIG Manager asks
`nvidia.com/mig-1g.10gb: 1` with no ResourceClaim; the chart's DeviceClass for that resource lets
kube-scheduler (simulated) write the claim itself, the DRA plugin creates the instance, and deleting
the pod destroys it. Everything through kubectl, as a user would."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from lab.cluster import Lab
from lab.kit import Kit

from tests import lab_testkit

NODES = "gpu-h100=1xH100-SXM5-80GB@dra"
VALUES = ("draPlugin.extendedResources.profiles={1g.10gb}",)
TOOLS = Path(os.environ.get("DYNMIG_TOOLS", Path(__file__).resolve().parents[2] / ".cache" / "tools"))


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    if not (TOOLS / "kubectl").exists():
        pytest.skip(f"kubectl not found in {TOOLS} (run `make tools`)")
    yield from lab_testkit.started(tmp_path_factory, "dra-ext-lab", NODES, values=VALUES)


def kubectl(lab: Lab, *args: str) -> str:
    argv = [str(TOOLS / "kubectl"), "--kubeconfig", str(lab.kubeconfig("admin")), "-n", "default", *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"kubectl {' '.join(args)} exited {done.returncode}:\n{done.stderr}"
    return done.stdout


POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "mig-1g"},
    "spec": {
        "terminationGracePeriodSeconds": 2,
        "containers": [
            {
                "name": "main",
                "image": "nvcr.io/nvidia/cuda:12.8.0-base-ubuntu24.04",
                "command": ["sleep", "infinity"],
                "resources": {"limits": {"nvidia.com/mig-1g.10gb": 1}},
            }
        ],
    },
}


def test_a_pod_asking_mig_1g_10gb_with_no_claim_runs_on_a_dra_node_and_its_instance_goes_with_it(
    lab, tmp_path
):
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(POD))
    kubectl(lab, "create", "-f", str(manifest))
    kubectl(lab, "wait", "--for=condition=Ready", "pod/mig-1g", "--timeout=120s")
    pod = json.loads(kubectl(lab, "get", "pod", "mig-1g", "-o", "json"))
    status = pod["status"]["extendedResourceClaimStatus"]
    assert status["requestMappings"] == [
        {
            "containerName": "main",
            "resourceName": "nvidia.com/mig-1g.10gb",
            "requestName": "container-0-request-0",
        }
    ]
    claim = json.loads(kubectl(lab, "get", "resourceclaim", status["resourceClaimName"], "-o", "json"))
    assert claim["metadata"]["annotations"]["resource.kubernetes.io/extended-resource-claim"] == "true"
    assert claim["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"], result["request"]) == (
        "mig.dynmig.io",
        "gpu-h100",
        "container-0-request-0",
    )
    assert "-mig-1g10gb-" in result["device"]
    kit = Kit(lab)
    (instance,) = kit.instances("gpu-h100")
    assert instance.profile == "1g.10gb"
    agent = lab.nodes["gpu-h100"].agent
    env = {v for r in list(agent.pods.values()) if r.name == "mig-1g" for v in r.env.values()}
    assert instance.mig_uuid in env  # the container was started on that MIG device (CDI)

    kubectl(lab, "delete", "pod", "mig-1g", "--wait=true", "--timeout=60s")
    kit.wait(lambda: not kit.instances("gpu-h100"), 60, "the pod's MIG instance is destroyed")
    kit.wait(
        lambda: status["resourceClaimName"] not in kubectl(lab, "get", "resourceclaims", "-o", "name"),
        60,
        "the claim kube-scheduler made is deleted with its pod",
    )
