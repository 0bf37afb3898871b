"""`dynmig status` against a simulated API server over HTTP (the official client, unchanged): what it
reads from node and pod annotations, how it treats hostile ones, RBAC refusals and its output forms."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from registration_testkit import registration
from sim.apiserver import ApiServer

from dynmig.status.main import ctrl_c_noted, main, watch
from mig.annotations import (
    DEVICES_ALLOCATED,
    MIG_ALLOCATIONS,
    NODE_REGISTER,
    VGPU_NODE,
)
from mig.fleetview import fleet_view
from mig.leftovers import LEFTOVERS

NAMES = ("1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb")


def register(*uuids: str) -> str:
    """The registration of one A100-40GB per uuid, offering NAMES."""
    return registration("", "A100-SXM4-40GB", len(uuids), names=NAMES, ids=uuids)


def node(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": annotations}}


def holder(
    name: str, node_name: str, gpu: str, profile: str, start: int, size: int, **extra: Any
) -> dict[str, Any]:
    entry = {
        "containerIndex": 0,
        "deviceIndex": 0,
        "gpuUUID": gpu,
        "profile": profile,
        "placement": {"start": start, "size": size},
        **extra,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "annotations": {
                VGPU_NODE: node_name,
                MIG_ALLOCATIONS: json.dumps([entry]),
                DEVICES_ALLOCATED: f"{gpu},NVIDIA,4864,14:;",
            },
        },
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
    }


def waiting(name: str, memory: str, namespace: str = "ml") -> dict[str, Any]:
    """A MIG pod as admitted: dynmig's webhook set its scheduler (else status says whose it is)."""
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": memory}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedulerName": "dynmig-scheduler",
            "containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}],
        },
    }


@pytest.fixture
def api() -> Iterator[ApiServer]:
    server = ApiServer().start()
    for ns in ("ml", "web"):
        server.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    try:
        yield server
    finally:
        server.stop()


def status(api: ApiServer, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["--kubeconfig", str(api.kubeconfig()), *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_status_shows_each_gpu_its_segments_and_what_still_fits(api, capsys):
    api.create(node("gpu-1", {NODE_REGISTER: register("GPU-a", "GPU-b")}))
    api.create(
        holder(
            "train", "gpu-1", "GPU-a", "3g.20gb", 4, 4, migUUID="MIG-1", gpuInstanceID=1, computeInstanceID=0
        )
    )
    api.create(waiting("big", "80000"))
    code, out, _ = status(api, capsys)
    assert code == 0
    assert "NODE gpu-1  2 MIG GPUs  still fits: 1g.5gb 11  2g.10gb 5  3g.20gb 3  7g.40gb 1" in out
    assert "    4:4   3g.20gb     realized   ml/train" in out
    assert "[#3g.20gb ml/train" in out
    assert "Pending MIG pods: 1" in out
    assert "ml/big  asks 1 × 80000 MiB  not tried by the scheduler yet" in out
    assert "fix: ask for less GPU memory" in out


def test_json_and_yaml_carry_the_same_map(api, capsys):
    api.create(node("gpu-1", {NODE_REGISTER: register("GPU-a")}))
    api.create(holder("wait", "gpu-1", "GPU-a", "1g.5gb", 0, 1))
    _, as_json, _ = status(api, capsys, "-o", "json")
    _, as_yaml, _ = status(api, capsys, "-o", "yaml")
    parsed = json.loads(as_json)
    assert parsed == yaml.safe_load(as_yaml)
    gpu = parsed["nodes"][0]["gpus"][0]
    assert gpu["segments"] == [
        {
            "start": 0,
            "size": 1,
            "profile": "1g.5gb",
            "phase": "reserved",
            "pod": "ml/wait",
            "migUUID": None,
            "idleSince": None,
        }
    ]
    assert parsed["fits"] == {"1g.5gb": 6, "2g.10gb": 2, "3g.20gb": 1, "7g.40gb": 0}


def test_malformed_annotations_are_shown_as_unreadable_never_a_crash(api, capsys):
    api.create(node("bad-register", {NODE_REGISTER: '[{"id": 7}]'}))
    api.create(node("bad-leftovers", {NODE_REGISTER: register("GPU-c"), LEFTOVERS: "{not json"}))
    api.create(node("gpu-1", {NODE_REGISTER: register("GPU-a")}))
    broken = holder("broken", "gpu-1", "GPU-a", "1g.5gb", 0, 1)
    broken["metadata"]["annotations"][MIG_ALLOCATIONS] = '[{"gpuUUID": 3}]'
    api.create(broken)
    deep = waiting("deep", "1")
    deep["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] = "1e60"
    api.create(deep)
    code, out, err = status(api, capsys)
    assert code == 0, err
    assert "NODE bad-register  unreadable: hami.io/node-nvidia-register[0].id" in out
    assert "    closed: unreadable: dynmig.io/node-leftover-instances: not JSON" in out
    assert "    closed: unreadable: pod ml/broken" in out
    assert "ml/broken  unreadable: hami.io/vgpu-mig-allocations[0]" in out
    assert "ml/deep  asks unreadable: container c: nvidia.com/gpumem" in out


def test_a_403_names_the_permission_that_is_missing(api, capsys):
    api.faults.fail_next(verb="list", resource="nodes", code=403, message='nodes is forbidden: User "alice"')
    code, out, err = status(api, capsys)
    assert code == 1 and out == ""
    assert "forbidden: you may not list nodes in the cluster" in err
    assert "resources: [nodes, pods], verbs: [get, list, watch]" in err


def test_an_unreachable_api_server_and_a_missing_kubeconfig_are_one_line_each(api, capsys, tmp_path):
    api.stop()
    code, _, err = status(api, capsys)
    assert (
        code == 1
        and err.startswith("dynmig status: cannot reach the API server at http")
        and err.count("\n") == 1
    )
    code = main(["--kubeconfig", str(tmp_path / "none")])
    assert code == 1 and "kubeconfig" in capsys.readouterr().err


def test_node_and_namespace_narrow_what_is_shown(api, capsys):
    api.create(node("gpu-1", {NODE_REGISTER: register("GPU-a")}))
    api.create(node("gpu-2", {NODE_REGISTER: register("GPU-b")}))
    api.create(waiting("big", "80000"))
    api.create(waiting("other", "80000", namespace="web"))
    _, out, _ = status(api, capsys, "--node", "gpu-2", "-n", "web")
    assert "NODE gpu-2" in out and "NODE gpu-1" not in out
    assert "web/other" in out and "ml/big" not in out
    code, _, err = status(api, capsys, "--node", "nope")
    assert code == 1 and "--node: no node named nope" in err


def test_watch_redraws_only_when_something_changed_and_stops_when_bounded(api, capsys):
    api.create(node("gpu-1", {NODE_REGISTER: register("GPU-a")}))
    code, out, _ = status(api, capsys, "--watch", "--interval", "0.2", "--watch-for", "0.6")
    assert code == 0
    assert out.count("NODE gpu-1") == 1  # nothing changed: drawn once


def test_an_advisor_hook_gives_advice_only_to_pods_that_do_not_fit():
    nodes = [node("gpu-1", {NODE_REGISTER: register("GPU-a")})]
    pods = [waiting("big", "80000"), waiting("ok", "4000")]
    seen: list[int] = []

    def advisor(pod: dict[str, Any], request: Any, states: Any, nodes: Any) -> str:
        seen.append(len(states))
        return f"advice for {pod['metadata']['name']}"

    fleet = fleet_view(nodes, pods, advisor=advisor)
    assert {p.name: p.advice for p in fleet.pending} == {"big": "advice for big", "ok": ""}
    assert seen == [1]
    assert {p.name: p.fix for p in fleet.pending}["ok"] == "fits now: the scheduler places it at its next try"


def test_ctrl_c_ends_a_watch_with_exit_status_0(api):
    api.create(node("gpu-1", {NODE_REGISTER: register("GPU-a")}))
    watch = subprocess.Popen(
        [sys.executable, "-m", "dynmig.cli", "status", "--kubeconfig", str(api.kubeconfig()), "--watch"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert watch.stdout is not None
        first = watch.stdout.readline()  # the legend: the first drawing has started
        assert first.startswith("slices:")
        watch.send_signal(signal.SIGINT)
        _, err = watch.communicate(timeout=30)
    finally:
        watch.kill()
    assert watch.returncode == 0, err
    assert "Traceback" not in err


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the swallowed one
def test_a_watch_ends_after_ctrl_c_even_when_the_interrupt_is_swallowed_by_a_finalizer():
    # Python drops an exception raised inside __del__; the noted press still ends the watch
    class Finalized:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)  # its KeyboardInterrupt is "ignored" by Python

    drawn: list[int] = []

    def draw() -> str:
        drawn.append(1)
        if len(drawn) > 5:
            raise AssertionError("the watch went on drawing after Ctrl-C")
        if len(drawn) == 2:
            Finalized()  # collected at once: Ctrl-C lands while it is finalized
        return str(len(drawn))

    out = io.StringIO()
    with ctrl_c_noted() as pressed:
        watch(draw, out, 0.0, None, clear=False, sleep=lambda _: None, stopped=pressed.is_set)
    assert pressed.is_set()
    assert len(drawn) == 2, "the watch went on drawing after Ctrl-C"


def test_a_pod_that_does_not_fit_gets_the_defrag_advice_the_scheduler_would_give(api, capsys):
    api.create(node("gpu-1", {NODE_REGISTER: register("GPU-a")}))
    api.create(
        holder(
            "train", "gpu-1", "GPU-a", "7g.40gb", 0, 8, migUUID="MIG-1", gpuInstanceID=1, computeInstanceID=0
        )
    )
    whole = waiting("whole", "40000")
    api.create(whole)
    code, out, err = status(api, capsys)
    assert code == 0, err
    advice = next(line for line in out.splitlines() if "advice:" in line)
    assert "defrag: removing 1 pod(s) on gpu-1 (ml/train) would let it be placed" in advice
    assert json.loads(status(api, capsys, "-o", "json")[1])["pending"][0]["advice"].startswith(
        "defrag: removing"
    )


def test_advice_says_so_when_disruption_budgets_cannot_be_read(api, capsys):
    api.create(node("gpu-1", {NODE_REGISTER: register("GPU-a")}))
    api.create(
        holder(
            "train", "gpu-1", "GPU-a", "7g.40gb", 0, 8, migUUID="MIG-1", gpuInstanceID=1, computeInstanceID=0
        )
    )
    api.create(waiting("whole", "40000"))
    api.faults.fail_next(verb="list", resource="poddisruptionbudgets", code=403)
    code, out, err = status(api, capsys)
    assert code == 0, err
    advice = next(line for line in out.splitlines() if "advice:" in line)
    assert advice.endswith("(PodDisruptionBudgets could not be listed, so they were not checked)")


def test_status_shows_the_drivers_profile_beside_a_name_hami_resolved_by_slice_key(api, capsys):
    hami_names = ("1g.10gb", "2g.20gb", "3g.40gb", "7g.79gb")  # HAMi v2.10's chart default, A100-80GB
    api.create(
        node(
            "gpu-80", {NODE_REGISTER: registration("", "A100-SXM4-80GB", 1, names=hami_names, ids=["GPU-z"])}
        )
    )
    api.create(
        holder(
            "whole", "gpu-80", "GPU-z", "7g.79gb", 0, 8, migUUID="MIG-9", gpuInstanceID=0, computeInstanceID=0
        )
    )

    code, out, _ = status(api, capsys)

    assert code == 0
    assert "    0:8   7g.79gb (7g.80gb) realized   ml/whole" in out
    code, out, _ = status(api, capsys, "-o", "json")
    (gpu,) = json.loads(out)["nodes"][0]["gpus"]
    assert gpu["driverNames"] == {"7g.79gb": "7g.80gb"}
