"""`dynmig status` shows the instances the device plugin keeps idle (`dynmig.io/node-idle-instances`)
as their own segment, free for any pod, read from a simulated API server over HTTP; a hostile idle
list is said to be unreadable on its node and changes nothing else."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from registration_testkit import registration
from sim.apiserver import ApiServer

from dynmig.status.main import main
from mig.annotations import MIG_ALLOCATIONS, NODE_REGISTER, VGPU_NODE
from mig.idle import IDLE, MAX_TEXT, IdleInstance, encode_idle
from mig.types import Placement

NAMES = ("1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb")
SINCE = 1767225600  # 2026-01-01T00:00:00Z


def node(name: str, annotations: dict[str, str], *uuids: str) -> dict[str, Any]:
    register = registration("", "A100-SXM4-40GB", len(uuids), names=NAMES, ids=uuids)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "annotations": {NODE_REGISTER: register, **annotations}},
    }


def idle(*entries: tuple[str, str, int, int]) -> str:
    return encode_idle([IdleInstance.of(g, p, Placement(s, n), SINCE) for g, p, s, n in entries])


def holder(name: str, node_name: str, gpu: str, profile: str, start: int, size: int) -> dict[str, Any]:
    entry = {
        "containerIndex": 0,
        "deviceIndex": 0,
        "gpuUUID": gpu,
        "profile": profile,
        "placement": {"start": start, "size": size},
        "migUUID": f"MIG-{name}",
        "gpuInstanceID": 1,
        "computeInstanceID": 0,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "annotations": {VGPU_NODE: node_name, MIG_ALLOCATIONS: json.dumps([entry])},
        },
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
    }


@pytest.fixture
def api() -> Iterator[ApiServer]:
    server = ApiServer().start()
    server.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})
    try:
        yield server
    finally:
        server.stop()


def status(api: ApiServer, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["--kubeconfig", str(api.kubeconfig()), *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_an_idle_instance_is_its_own_segment_free_for_any_pod_and_the_legend_says_so(api, capsys):
    api.create(node("gpu-1", {IDLE: idle(("GPU-a", "1g.5gb", 0, 1), ("GPU-a", "2g.10gb", 2, 2))}, "GPU-a"))
    code, out, err = status(api, capsys)
    assert code == 0, err
    assert "- idle (free for any pod; reused by a matching one)" in out.splitlines()[0]
    # idle slices stay free: everything still fits as on an empty A100
    assert (
        "NODE gpu-1  1 MIG GPU  2 idle instances  still fits: 1g.5gb 7  2g.10gb 3  3g.20gb 2  7g.40gb 1"
        in out
    )
    assert (
        "    0:1   1g.5gb      idle       (no pod: free for any pod; reused by a matching one; "
        "idle since 2026-01-01T00:00:00Z)"
    ) in out
    assert "    2:2   2g.10gb     idle       (no pod:" in out
    assert "[-2g.10gb idle---" in out  # drawn on the bar with the idle mark
    assert "    free slices 0,1,2,3,4,5,6,7   still fits:" in out


def test_json_and_yaml_carry_idle_segments_with_the_time_they_went_idle(api, capsys):
    api.create(node("gpu-1", {IDLE: idle(("GPU-a", "1g.5gb", 6, 1))}, "GPU-a"))
    _, as_json, _ = status(api, capsys, "-o", "json")
    _, as_yaml, _ = status(api, capsys, "-o", "yaml")
    parsed = json.loads(as_json)
    assert parsed == yaml.safe_load(as_yaml)
    n = parsed["nodes"][0]
    assert n["idleUnreadable"] is None
    assert n["gpus"][0]["segments"] == [
        {
            "start": 6,
            "size": 1,
            "profile": "1g.5gb",
            "phase": "idle",
            "pod": None,
            "migUUID": None,
            "idleSince": SINCE,
        }
    ]
    assert 6 in n["gpus"][0]["free"]
    assert parsed["fits"]["7g.40gb"] == 1


def test_an_idle_entry_under_a_pods_reservation_is_not_drawn_the_reservation_is(api, capsys):
    # the annotation lags a hand-over: the pod now holds the placement the plugin kept idle
    api.create(node("gpu-1", {IDLE: idle(("GPU-a", "1g.5gb", 0, 1), ("GPU-a", "1g.5gb", 1, 1))}, "GPU-a"))
    api.create(holder("next", "gpu-1", "GPU-a", "1g.5gb", 0, 1))
    _, as_json, _ = status(api, capsys, "-o", "json")
    segments = json.loads(as_json)["nodes"][0]["gpus"][0]["segments"]
    assert [(s["start"], s["phase"], s["pod"]) for s in segments] == [
        (0, "realized", "ml/next"),
        (1, "idle", None),
    ]


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("{not json", "not JSON"),
        ('{"gpuUUID": "GPU-a"}', "must be a JSON array"),
        ('[{"gpuUUID": "GPU-a", "profile": "1g.5gb", "placement": {"start": -1, "size": 1}, "idleSince": 0}]',
         "[0].placement.start"),
        ('[{"gpuUUID": "GPU-a", "profile": "1g.5gb", "placement": {"start": 0, "size": 1}, "idleSince": 0, '
         '"x": 1}]', "[0].x"),
        ("[" * 5000 + "]" * 5000, "not JSON"),
        ("[" + ",".join(["{}"] * (MAX_TEXT // 3 + 10)) + "]", "longer than"),
        ('[{"gpuUUID": "\\u001b[2J", "profile": "1g.5gb", "placement": {"start": 0, "size": 1}, '
         '"idleSince": 1e99}]', "[0].idleSince"),
    ],
)  # fmt: skip
def test_a_hostile_idle_list_is_shown_as_unreadable_and_changes_nothing_else(api, capsys, value, said):
    api.create(node("gpu-1", {IDLE: value}, "GPU-a"))
    code, out, err = status(api, capsys)
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("  idle instances"))
    assert line.startswith("  idle instances unreadable: dynmig.io/node-idle-instances") and said in line
    assert "\x1b" not in out
    assert "still fits: 1g.5gb 7  2g.10gb 3  3g.20gb 2  7g.40gb 1" in out  # the GPU is open as before
    assert "[-" not in out and "(no pod: free for any pod" not in out  # no idle segment is drawn
    _, as_json, _ = status(api, capsys, "-o", "json")
    n = json.loads(as_json)["nodes"][0]
    assert n["idleUnreadable"].startswith("unreadable: dynmig.io/node-idle-instances")
    assert n["gpus"][0]["segments"] == [] and n["gpus"][0]["closed"] is None
