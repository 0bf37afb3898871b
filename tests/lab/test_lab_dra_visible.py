"""DRA mode as visible as extender mode, on the lab through kubectl and `dynmig status`: the example
claim (asking by memory) gets the smallest profile that holds 9 GiB on each model, a prepared DRA pod
shows as created with its MIG UUID on an 8-slice A100-40GB, and a claim pod that cannot be placed is
listed as pending with kube-scheduler's reason."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from lab.cluster import Lab
from lab.dra_scenario import claim_pod, claim_template
from lab.kit import Kit

from tests import lab_testkit

pytestmark = pytest.mark.timeout(600)  # generous: on a loaded machine the lab is slow, never wrong

NODES = "gpu-a100=2xA100-SXM4-40GB@dra;gpu-h100=1xH100-SXM5-80GB@dra"
ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "dra-claim.yaml"
TOOLS = Path(os.environ.get("DYNMIG_TOOLS", ROOT / ".cache" / "tools"))


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    if not (TOOLS / "kubectl").exists():
        pytest.skip(f"kubectl not found in {TOOLS} (run `make tools`)")
    yield from lab_testkit.started(tmp_path_factory, "dra-visible-lab", NODES)


def kubectl(lab: Lab, *args: str) -> str:
    argv = [str(TOOLS / "kubectl"), "--kubeconfig", str(lab.kubeconfig("admin")), "-n", "default", *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"kubectl {' '.join(args)} exited {done.returncode}:\n{done.stderr}"
    return done.stdout


def status(lab: Lab, *args: str) -> str:
    argv = [sys.executable, "-m", "dynmig.cli", "status", "--kubeconfig", str(lab.kubeconfig()), *args]
    # generous: on a machine loaded many times over its cores, starting Python alone takes seconds;
    # a wide terminal, so a row keeps the scheduler's whole reason (at 100 columns it ends in "…")
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "400"}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def create(lab: Lab, tmp: Path, docs: list[dict]) -> None:
    path = tmp / f"{docs[-1]['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    kubectl(lab, "create", "-f", str(path))


def example_on(node: str) -> list[dict]:
    """examples/dra-claim.yaml as written, its pod pinned to `node` and named after it."""
    template, pod = (copy.deepcopy(d) for d in yaml.safe_load_all(EXAMPLE.read_text()) if d)
    template["metadata"]["name"] = f"mig-9gi-{node}"
    pod["metadata"]["name"] = f"by-memory-{node}"
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = template["metadata"]["name"]
    pod["spec"]["terminationGracePeriodSeconds"] = 2
    return [template, pod]


def device_of(lab: Lab, pod: str) -> tuple[str, dict]:
    """The pod's claim's allocated device name and the claim."""
    claims = json.loads(kubectl(lab, "get", "resourceclaims", "-o", "json"))["items"]
    (claim,) = [c for c in claims if c["metadata"]["ownerReferences"][0]["name"] == pod]
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    return result["device"], claim


def test_the_example_claim_gets_the_smallest_profile_holding_9gi_on_each_model_and_shows_as_created(
    lab, tmp_path
):
    for node in ("gpu-a100", "gpu-h100"):
        create(lab, tmp_path, example_on(node))
    kubectl(
        lab,
        "wait",
        "--for=condition=Ready",
        "pod/by-memory-gpu-a100",
        "pod/by-memory-gpu-h100",
        "--timeout=240s",
    )
    a100, _ = device_of(lab, "by-memory-gpu-a100")
    h100, _ = device_of(lab, "by-memory-gpu-h100")
    assert "-mig-2g10gb-" in a100 and "-mig-1g10gb-" in h100
    (instance,) = Kit(lab).instances("gpu-a100")
    kit = Kit(lab)
    kit.wait(
        lambda: device_of(lab, "by-memory-gpu-a100")[1]["status"].get("devices"), 30, "the device status"
    )
    text = status(lab, "--node", "gpu-a100", "-o", "wide")
    row = next(line for line in text.splitlines() if "by-memory-gpu-a100" in line)
    assert "realized" in row and instance.mig_uuid in row and "reserved" not in row
    assert text.count("8 slices") == 2  # both A100-40GBs on the same 8-slice axis as extender mode


def unschedulable_conditions(lab: Lab, names: list[str]) -> dict[str, dict]:
    """The pods' PodScheduled=False conditions as kubectl shows them, once every pod has one."""
    pods = json.loads(kubectl(lab, "get", "pods", "-o", "json"))["items"]
    found = {}
    for pod in pods:
        for cond in pod["status"].get("conditions") or []:
            if cond["type"] == "PodScheduled" and cond["status"] == "False":
                found[pod["metadata"]["name"]] = cond
    return found if all(n in found for n in names) else {}


def test_claim_pods_that_fit_nowhere_are_pending_with_the_allocators_reason_in_status_and_their_condition(
    lab, tmp_path
):
    # three whole GPUs on a node of two fit nowhere, whatever other tests left running; several pods
    # created at once, as a Job does: each claim is made by the ResourceClaim controller after its pod
    template = claim_template("three-7g", "7g.40gb")
    template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 3
    pods = [claim_pod(f"three-whole-{i}", "three-7g") for i in range(4)]
    for pod in pods:
        pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "gpu-a100"}
    create(lab, tmp_path, [template, *pods])
    names = [p["metadata"]["name"] for p in pods]
    conditions = Kit(lab).wait(
        lambda: unschedulable_conditions(lab, names), 240, "every pod's PodScheduled=False condition"
    )
    for name in names:
        assert conditions[name]["reason"] == "Unschedulable"
        assert "cannot allocate all claims" in conditions[name]["message"]
    text = status(lab)
    for name in names:
        row = next(line for line in text.splitlines() if f"default/{name}" in line)
        assert "cannot allocate all claims" in row and "3 × 7g.40gb" in row
    assert "Pending MIG pods: none" not in text
