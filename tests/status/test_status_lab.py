"""`kubectl dynmig status` against the whole lab (simulated GPUs and cluster, `dynmig serve` and the
device plugins as real processes): the real kubectl finds the plugin on PATH, the map shows every GPU
with its pods, and what it says still fits is what the scheduler then places: all of it, not one more."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lab.chart import ChartError, helm_binary
from lab.cluster import Lab
from lab.kit import Kit, gpu_pod
from lab.nodes import DEFAULT_NODES, parse_nodes

from mig.annotations import PROFILE_PREFERENCE, USE_GPU_TYPE, USE_GPU_UUID
from tests import lab_testkit

ROOT = Path(__file__).resolve().parents[2]
KUBECTL = ROOT / ".cache" / "tools" / "kubectl"
BIN = Path(sys.executable).parent  # where the venv installed the kubectl-dynmig console script
A100 = {USE_GPU_TYPE: "A100"}
RTX = {USE_GPU_TYPE: "RTX PRO 6000"}


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    try:
        helm_binary()
    except ChartError as error:
        pytest.skip(str(error))
    if not KUBECTL.exists():
        pytest.skip(f"kubectl not found at {KUBECTL} (run `make tools`)")
    if not (BIN / "kubectl-dynmig").exists():
        pytest.skip(f"kubectl-dynmig is not installed in {BIN} (run `make .venv/.installed`)")
    started = Lab(parse_nodes(DEFAULT_NODES), tmp_path_factory.mktemp("status-lab")).start()
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
def kit(lab: Lab) -> Iterator[Kit]:
    yield from lab_testkit.emptied(lab)


def kubectl_dynmig(lab: Lab, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBECTL_")}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.pop("NO_COLOR", None)
    done = subprocess.run(
        [str(KUBECTL), "dynmig", "status", "--kubeconfig", str(lab.kubeconfig()), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def fleet(lab: Lab) -> dict[str, Any]:
    return json.loads(kubectl_dynmig(lab, "-o", "json"))


def node_named(out: dict[str, Any], name: str) -> dict[str, Any]:
    return next(n for n in out["nodes"] if n["name"] == name)


def test_kubectl_dynmig_status_shows_every_gpu_its_pods_and_why_a_pod_waits(lab, kit):
    kit.create(gpu_pod("small", 4000, annotations=A100))
    kit.create(gpu_pod("mid", 30000, annotations=RTX))
    for name in ("small", "mid"):
        kit.wait_phase(name, "Running", 60)
    kit.create(gpu_pod("huge", 200000))
    kit.wait_event("huge", "FailedScheduling", 60)
    out = kubectl_dynmig(lab)  # a pipe: no colour
    assert "\x1b[" not in out
    gpus = [g for n in fleet(lab)["nodes"] for g in n["gpus"]]
    assert len(gpus) == 10
    for g in gpus:
        assert f"  {g['uuid']}  " in out
    small, mid = (kit.allocations(n)[0] for n in ("small", "mid"))
    assert f"    {small.placement_value!s:<6}1g.5gb      realized   default/small" in out
    assert f"    {mid.placement_value!s:<6}2g.48gb     realized   default/mid" in out
    assert "[#2g.48gb default/mid" in out
    line = next(line for line in out.splitlines() if "default/huge" in line)
    assert "asks 1 × 200000 MiB" in line and "not tried by the scheduler yet" not in line
    assert "fix: ask for less GPU memory" in out


def test_what_status_says_fits_is_placed_by_the_scheduler_and_one_more_is_not(lab, kit):
    kit.create(gpu_pod("small", 4000, annotations=A100))
    kit.wait_phase("small", "Running", 60)
    before = node_named(fleet(lab), "gpu-a100")
    fits = before["fits"]["3g.20gb"]
    assert fits == 3  # one 1g.5gb takes half of one A100 for 3g.20gb: 1 there, 2 on the other
    wanted = {**A100, PROFILE_PREFERENCE: "3g.20gb"}
    names = [f"big-{i}" for i in range(fits)]
    for name in names:
        kit.create(gpu_pod(name, 20000, annotations=wanted))
    for name in names:
        kit.wait_phase(name, "Running", 60)
        assert [a.profile for a in kit.allocations(name)] == ["3g.20gb"]
    kit.create(gpu_pod("one-more", 20000, annotations=wanted))
    kit.wait_event("one-more", "FailedScheduling", 60)
    assert kit.phase("one-more") == "Pending" and not kit.allocations("one-more")
    after = fleet(lab)
    assert node_named(after, "gpu-a100")["fits"]["3g.20gb"] == 0
    assert [p["pod"] for p in after["pending"]] == ["default/one-more"]


def test_a_whole_gpu_pod_pinned_to_a_partly_used_node_is_told_no_node_it_may_run_on_has_room(lab, kit):
    # each A100 of gpu-a100 holds a 1g.5gb; the RTX node is free, but the pod's nodeSelector
    # keeps it off: kube-scheduler never offers it, so "fits now" would be wrong advice.
    a100s = [g.uuid for _, g in kit.gpus_of_model("A100")]
    assert len(a100s) == 2
    for name, uuid in zip(("small-a", "small-b"), a100s, strict=True):
        kit.create(gpu_pod(name, 4000, annotations={USE_GPU_UUID: uuid}, node="gpu-a100"))
    for name in ("small-a", "small-b"):
        kit.wait_phase(name, "Running", 60)
    kit.create(gpu_pod("whole", None, node="gpu-a100"))
    kit.wait_event("whole", "FailedScheduling", 60)
    (pending,) = fleet(lab)["pending"]
    assert pending["pod"] == "default/whole" and pending["code"], pending
    assert pending["fix"].startswith(
        "no node this pod may run on has room for it (1 of 2 nodes refuse it: 1 not matching its nodeSelector; "
        "it would fit now on a node that refuses it): "
    ), pending["fix"]
    assert (pending["advice"] or "").startswith("defrag: removing 1 pod(s) on gpu-a100 (default/small-"), (
        pending
    )
    assert "fits now: the scheduler places it" not in kubectl_dynmig(lab)
