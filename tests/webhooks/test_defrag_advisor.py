"""The advice `dynmig status` shows: the scheduler's rule over nodes and pods as the cluster has them."""

from __future__ import annotations

import json

from webhooks_testkit import registration

from mig.annotations import DEVICES_ALLOCATED, MIG_ALLOCATIONS, VGPU_NODE
from mig.placement import ContainerRequest, PodRequest
from webhooks.defrag import status_advisor
from webhooks.occupancy import node_gpus, pod_usage, reconstruct


def holding(name: str, start: int, priority: int = 0, node: str = "n1") -> dict:
    uuid = f"GPU-{node}-0"
    alloc = [
        {
            "containerIndex": 0,
            "deviceIndex": 0,
            "gpuUUID": uuid,
            "profile": "3g.20gb",
            "placement": {"start": start, "size": 4},
        }
    ]
    return {
        "metadata": {
            "namespace": "team",
            "name": name,
            "uid": f"uid-{name}",
            "annotations": {
                VGPU_NODE: node,
                MIG_ALLOCATIONS: json.dumps(alloc),
                DEVICES_ALLOCATED: f"{uuid},NVIDIA,20096,42:;",
            },
        },
        "spec": {"nodeName": node, "priority": priority},
        "status": {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"},
    }


def states(pods: list[dict]):
    published = node_gpus("n1", registration("n1", "A100-SXM4-40GB", 1))
    return reconstruct(published, [u for p in pods if (u := pod_usage(p))]).gpus


def test_status_names_the_cheapest_running_pod_of_no_higher_priority_to_remove():
    pods = [holding("low", 0, priority=1), holding("high", 4, priority=50)]
    advice = status_advisor(pods)
    pending = {"metadata": {"namespace": "team", "name": "big"}, "spec": {"priority": 10}}
    text = advice(pending, PodRequest((ContainerRequest(1, 20000),)), states(pods))
    assert text.startswith("defrag: removing 1 pod(s) on n1 (team/low)")


def test_status_gives_no_advice_when_only_more_important_pods_could_make_room():
    pods = [holding("a", 0, priority=50), holding("b", 4, priority=50)]
    pending = {"metadata": {"namespace": "team", "name": "big"}, "spec": {"priority": 10}}
    text = status_advisor(pods)(pending, PodRequest((ContainerRequest(1, 20000),)), states(pods))
    assert text == "defrag: no set of running MIG pods that may be removed would place it"


def test_status_respects_the_budgets_it_is_given():
    pods = [holding("low", 0), holding("other", 4)]
    pods[0]["metadata"]["labels"] = {"app": "web"}
    pdb = {
        "metadata": {"namespace": "team", "name": "web", "generation": 1},
        "spec": {"selector": {"matchLabels": {"app": "web"}}},
        "status": {"disruptionsAllowed": 0, "observedGeneration": 1},
    }
    pending = {"metadata": {"namespace": "team", "name": "big"}, "spec": {}}
    text = status_advisor(pods, [pdb])(pending, PodRequest((ContainerRequest(1, 20000),)), states(pods))
    assert "(team/other)" in text
