"""The advice `dynmig status` shows: the scheduler's rule over nodes and pods as the cluster has them."""

from __future__ import annotations

import json

from webhooks_testkit import registration

from mig.annotations import DEVICES_ALLOCATED, MIG_ALLOCATIONS, VGPU_NODE
from mig.defrag.advisor import status_advisor
from mig.placement import ContainerRequest, PodRequest
from mig.reconstruct import node_gpus, pod_usage, reconstruct


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


def test_status_says_the_pod_it_would_remove_moves_to_another_node_when_its_controller_recreates_it():
    # n1: 'low' (a ReplicaSet's 1g at 6:1) and 'stays' (3g at 0:4, more important); n2: a 3g and a
    # 2g leave a 1g free. A 3g fits nowhere; removing low frees 4:4 and its replacement goes to n2.
    low = holding("low", 0, priority=1)
    low["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "low-rs", "uid": "rs-1", "controller": True}
    ]
    low["spec"]["containers"] = [
        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"}}}
    ]
    pods = [_at(low, 6, 1, "1g.5gb"), holding("stays", 0, priority=50)]
    pods += [
        holding("n2-job", 0, priority=50, node="n2"),
        _at(holding("n2-svc", 0, 50, "n2"), 4, 2, "2g.10gb"),
    ]
    gpus = [g for n in ("n1", "n2") for g in _states(n, pods)]
    pending = {"metadata": {"namespace": "team", "name": "big"}, "spec": {"priority": 10}}
    text = status_advisor(pods)(pending, PodRequest((ContainerRequest(1, 20000),)), gpus)
    assert text.startswith("defrag: removing 1 pod(s) on n1 (team/low)"), text
    assert text.endswith("; moves team/low to n2 (1g.5gb on GPU-n2-0 at 6:1)"), text


def _at(pod: dict, start: int, size: int, profile: str) -> dict:
    """The pod holding another placement (and profile) on its GPU."""
    meta = pod["metadata"]["annotations"]
    alloc = json.loads(meta[MIG_ALLOCATIONS])
    alloc[0].update({"profile": profile, "placement": {"start": start, "size": size}})
    meta[MIG_ALLOCATIONS] = json.dumps(alloc)
    return pod


def _states(node: str, pods: list[dict]):
    published = node_gpus(node, registration(node, "A100-SXM4-40GB", 1))
    return reconstruct(published, [u for p in pods if (u := pod_usage(p)) and u.node == node]).gpus
