"""What a person reads from dynmig's CLI and the lab is text for people: no Python repr (a dataclass's
`Name(field=…` or an `<… object at 0x…>`) in any line, and a lab whose node publishes no devices
stops soon after the plugin registers, naming the node, its GPU model and the policy. The lab tour's
output is checked for reprs where the tour runs, tests/e2e/test_e2e_lab_cli.py (one tour for both)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from people_testkit import reprs
from registration_testkit import registration
from sim.apiserver import ApiServer

from mig.annotations import NODE_REGISTER

ROOT = Path(__file__).resolve().parents[2]
DYNMIG = [sys.executable, "-m", "dynmig.cli"]
H100_ONLY = """\
nvidia:
  migProfileAllowlist:
    - models: ["H100 80GB HBM3", "H100 PCIe"]
      profiles: ["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
    - models: ["NVIDIA"]
      migOff: true
"""


def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*DYNMIG, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_the_repr_pattern_finds_dataclass_and_object_reprs_and_nothing_else():
    assert reprs("resources now: {'nvidia.com/gpu': ResourceView(name='nvidia.com/gpu', endpoint=…")
    assert reprs("got <mig.placement.Plan object at 0x7f3a2c1d9e50> back")
    assert not reprs("asks 1 × 20000 MiB (7g.40gb fits on 0 of 2 GPUs); fix: wait for a MIG pod to end")


@pytest.mark.parametrize(
    "args",
    [
        ("--help",),
        ("lab", "--help"),
        ("status", "--help"),
        ("policy", "--help"),
        ("policy", "check", "--help"),
        ("policy", "explain", "--help"),
        ("policy", "diff", "--help"),
        ("policy", "default", "--help"),
    ],
)
def test_help_texts_hold_no_python_repr(args):
    done = run(*args)
    assert done.returncode == 0, done.stderr
    assert not reprs(done.stdout + done.stderr)


def test_policy_subcommands_outputs_hold_no_python_repr(tmp_path):
    default = run("policy", "default")
    assert default.returncode == 0, default.stderr
    policy = tmp_path / "h100.yaml"
    policy.write_text(H100_ONLY)
    typo = tmp_path / "typo.yaml"
    typo.write_text('nvidia:\n  migProfileAllowList:\n    - models: ["A100"]\n      profiles: ["3g.40bg"]\n')
    outputs = [
        default,
        run("policy", "check", str(policy)),
        run("policy", "check", "--strict", str(typo)),
        run("policy", "check", str(tmp_path / "missing.yaml")),
        run("policy", "explain", "--model", "A100-SXM4-40GB", "--memory", "20000"),
        run("policy", "explain", "--model", "A100-SXM4-40GB", "--memory", "20000", "--occupied", "0:4"),
        run("policy", "explain", "--model", "no-such-gpu", "--memory", "1"),
        run("policy", "explain", "--model", "H100-SXM5-80GB", "--memory", "90000", "--policy", str(policy)),
        run("policy", "diff", str(policy)),
    ]
    for done in outputs:
        assert done.stdout or done.stderr, done.args
        assert not reprs(done.stdout + done.stderr), done.args


@pytest.fixture
def api():
    server = ApiServer().start()
    server.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})
    try:
        yield server
    finally:
        server.stop()


def test_dynmig_status_outputs_hold_no_python_repr_even_for_hostile_objects(api):
    labels = {"kubernetes.io/hostname": "gpu-1"}
    good = {"metadata": {"name": "gpu-1", "labels": labels}}
    good["metadata"]["annotations"] = {NODE_REGISTER: registration("gpu-1", "A100-SXM4-40GB", 2)}
    bad = {"metadata": {"name": "gpu-2", "annotations": {NODE_REGISTER: "GPU-x,garbage"}}}
    for n in (good, bad):
        api.create({"apiVersion": "v1", "kind": "Node", **n})
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "80000"}
    for name, spec in {
        "big": {},
        "pinned": {"nodeSelector": {"gpu": "h100"}, "affinity": {"nodeAffinity": {"x": 1}}},
    }.items():
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ml"}}
        pod["spec"] = {"containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}], **spec}
        api.create(pod)
    kubeconfig = str(api.kubeconfig())
    for output in ("text", "wide", "json", "yaml"):
        done = run("status", "--kubeconfig", kubeconfig, "-o", output)
        assert done.returncode == 0, done.stderr
        assert not reprs(done.stdout + done.stderr), output
    pending = json.loads(run("status", "--kubeconfig", kubeconfig, "-o", "json").stdout)["pending"]
    assert {p["pod"] for p in pending} == {"ml/big", "ml/pinned"}
    refused = run("status", "--kubeconfig", kubeconfig, "--node", "nope")
    assert refused.returncode != 0 and not reprs(refused.stdout + refused.stderr)
