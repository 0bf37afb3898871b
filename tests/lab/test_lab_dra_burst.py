"""A burst of DRA claims created at once packs, on the lab through kubectl (issue: five 1g.5gb pods of
one ResourceClaimTemplate landed on both GPUs of a 2 × A100-40GB DRA node, so a 7g.40gb claim stayed
Pending). Each burst is one `kubectl create -f` of a template and its pods, as a Job or a scale-up
creates them; kube-scheduler (simulated) allocates them one per cycle from the slices the plugin
published, and the plugin republishes as it sees the allocations and prepares.

Judged per burst: the GPUs its claims landed on are as few as a packing needs (no GPU broken while
another has room), and whole-GPU claims created after it fit on every GPU a packing leaves whole.
The mixed bursts are mixes the engine packs in any order of arrival (tests/mig/test_dra_burst.py).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from lab.cluster import Lab
from lab.dra_scenario import claim_pod, claim_template

from tests import lab_testkit

pytestmark = pytest.mark.timeout(300)  # a burst of up to 14 pods, then deleting them

NODES = "gpu-a100=2xA100-SXM4-40GB@dra;gpu-h100=4xH100-SXM5-80GB@dra"
DRIVER = "mig.dynmig.io"
TOOLS = Path(os.environ.get("DYNMIG_TOOLS", Path(__file__).resolve().parents[2] / ".cache" / "tools"))


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    if not (TOOLS / "kubectl").exists():
        pytest.skip(f"kubectl not found in {TOOLS} (run `make tools`)")
    yield from lab_testkit.started(tmp_path_factory, "dra-burst-lab", NODES)


class Kubectl:
    def __init__(self, lab: Lab, workdir: Path):
        self.argv = [str(TOOLS / "kubectl"), "--kubeconfig", str(lab.kubeconfig("admin")), "-n", "default"]
        self.workdir = workdir
        self.made = 0

    def __call__(self, *args: str, timeout: float = 180.0) -> str:
        done = subprocess.run([*self.argv, *args], capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, f"kubectl {' '.join(args)} exited {done.returncode}:\n{done.stderr}"
        return done.stdout

    def burst(self, name: str, node: str, profiles: list[str]) -> list[str]:
        """One `kubectl create -f` of a template per profile and one pod per entry (label
        `burst=<name>`), pinned to `node`; waits until all are Ready; the pods' names."""
        docs, pods = [], []
        for profile in dict.fromkeys(profiles):
            docs.append(claim_template(f"{name}-{profile.replace('.', '-')}", profile))
        for i, profile in enumerate(profiles):
            pod = claim_pod(f"{name}-{i}", f"{name}-{profile.replace('.', '-')}")
            pod["metadata"]["labels"] = {"burst": name}
            pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
            docs.append(pod)
            pods.append(pod["metadata"]["name"])
        self.made += 1
        path = self.workdir / f"{self.made}-{name}.yaml"
        path.write_text(yaml.safe_dump_all(docs))
        self("create", "-f", str(path))
        self("wait", "--for=condition=Ready", "pod", "-l", f"burst={name}", "--timeout=150s")
        return pods

    def gpus_of(self, pods: list[str]) -> dict[str, str]:
        """Pod -> the GPU (`gpu-<minor>`) its claim's device is on, from the claims' allocations."""
        claims = json.loads(self("get", "resourceclaims", "-o", "json"))["items"]
        out = {}
        for c in claims:
            owner = next(iter(c["metadata"].get("ownerReferences") or []), {}).get("name")
            if owner in pods:
                (result,) = c["status"]["allocation"]["devices"]["results"]
                assert result["driver"] == DRIVER
                out[owner] = result["device"].split("-mig-")[0]
        assert sorted(out) == sorted(pods)
        return out


@pytest.fixture
def kubectl(lab: Lab, tmp_path: Path) -> Iterator[Kubectl]:
    k = Kubectl(lab, tmp_path)
    yield k
    k("delete", "pods", "--all", "--wait=true")
    k("delete", "resourceclaimtemplates", "--all")


@pytest.mark.parametrize(
    ("node", "gpus", "profiles", "whole", "full"),
    [
        ("gpu-a100", 2, ["2g.10gb", "1g.5gb", "2g.10gb", "1g.5gb", "1g.5gb"], "7g.40gb", 1),
        ("gpu-a100", 2, ["1g.5gb"] * 7, "7g.40gb", 1),
        ("gpu-h100", 4, ["1g.10gb"] * 14, "7g.80gb", 2),
    ],
    # the sizes the lab checks end to end (5 mixed, 7 and 14); tests/mig/test_dra_burst.py holds
    # the allocator to the same rule on every mix without a lab
    ids=["a100-5-mixed", "a100-7x1g", "h100-14x1g"],
)
def test_a_burst_created_at_once_packs_its_gpus_and_whole_gpu_claims_after_it_fit(
    kubectl, node, gpus, profiles, whole, full
):
    pods = kubectl.burst("burst", node, profiles)
    used = set(kubectl.gpus_of(pods).values())
    assert len(used) == full, f"the burst broke {sorted(used)}, a packing needs {full}"
    after = kubectl.burst("whole", node, [whole] * (gpus - full))
    assert set(kubectl.gpus_of(after).values()).isdisjoint(used)
