"""The slice map's fix and advice for a waiting pod count only the nodes the pod may run on (its
nodeSelector, required node affinity and tolerations against the nodes' labels and taints), from
the same Kubernetes objects `dynmig status` reads."""

from __future__ import annotations

import json
from typing import Any

from registration_testkit import registration

from mig.annotations import DEVICES_ALLOCATED, MIG_ALLOCATIONS, NODE_REGISTER, VGPU_NODE
from mig.defrag.advisor import status_advisor
from mig.fleetview import FITS_NOW, fleet_view
from mig.slicemap import NO_ELIGIBLE_NODE


def gpu_node(name: str, gpus: int, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, **(labels or {})},
            "annotations": {NODE_REGISTER: registration(name, "A100-SXM4-40GB", gpus)},
        },
        "spec": spec,
    }


def running(name: str, node: str, gpu: int, profile: str = "4g.20gb", size: int = 4) -> dict[str, Any]:
    """A running pod holding `profile` at slice 0 of the node's GPU number `gpu`."""
    uuid = f"GPU-{node}-{gpu}"
    entry = {
        "containerIndex": 0,
        "deviceIndex": 0,
        "gpuUUID": uuid,
        "profile": profile,
        "placement": {"start": 0, "size": size},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-{name}",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": {
                VGPU_NODE: node,
                MIG_ALLOCATIONS: json.dumps([entry]),
                DEVICES_ALLOCATED: f"{uuid},NVIDIA,20000,0:;",
            },
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
        "status": {"phase": "Running"},
    }


def whole_gpu_pod(name: str = "whole", **spec: Any) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "1"}  # no gpumem: a whole GPU (7g.40gb on an A100-40GB)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}], **spec},
    }


def busy_n1_free_n2(**n2: Any) -> list[dict[str, Any]]:
    """n1: two A100s, each holding a 4g.20gb; n2: one free A100."""
    return [gpu_node("n1", 2, {"pool": "train"}), gpu_node("n2", 1, **n2)]


HOLDERS = [running("a", "n1", 0), running("b", "n1", 1)]


def pending(nodes: list[dict[str, Any]], pod: dict[str, Any], advice: bool = False) -> Any:
    pods = [*HOLDERS, pod]
    (only,) = fleet_view(nodes, pods, advisor=status_advisor(pods) if advice else None).pending
    return only


def test_a_pod_pinned_by_node_selector_to_a_busy_node_is_not_told_it_fits_now():
    view = pending(busy_n1_free_n2(), whole_gpu_pod(nodeSelector={"kubernetes.io/hostname": "n1"}))
    assert view.code and view.fix != FITS_NOW
    assert view.fix.startswith(
        "no node this pod may run on has room for it (1 of 2 nodes refuse it: 1 not matching its "
        "nodeSelector; it would fit now on a node that refuses it): "
    ), view.fix


def test_a_pod_pinned_to_a_busy_node_gets_defrag_advice_on_that_node():
    view = pending(busy_n1_free_n2(), whole_gpu_pod(nodeSelector={"pool": "train"}), advice=True)
    assert view.advice.startswith("defrag: removing 1 pod(s) on n1 ("), view.advice


def test_the_same_pod_without_constraints_fits_now_on_the_free_node():
    view = pending(busy_n1_free_n2(), whole_gpu_pod(), advice=True)
    assert (view.code, view.fix, view.advice) == ("", FITS_NOW, "")


def test_required_node_affinity_match_fields_pins_the_pod_like_a_node_selector():
    by_name = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    affinity = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [by_name]}}
    }
    view = pending(busy_n1_free_n2(), whole_gpu_pod(affinity=affinity))
    assert "1 not matching its required node affinity" in view.fix and view.fix != FITS_NOW


def test_an_untolerated_taint_on_the_free_node_leaves_only_the_busy_one():
    tainted = busy_n1_free_n2(taints=[{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}])
    view = pending(tainted, whole_gpu_pod())
    assert "1 with taint dedicated=infer:NoSchedule, not tolerated" in view.fix
    tolerates = [{"key": "dedicated", "operator": "Exists"}]
    assert pending(tainted, whole_gpu_pod(tolerations=tolerates)).fix == FITS_NOW


def test_when_every_gpu_node_refuses_the_pod_the_fix_says_no_node_it_may_run_on_has_mig_gpus():
    view = pending(busy_n1_free_n2(), whole_gpu_pod(nodeSelector={"gpu": "h100"}), advice=True)
    assert view.code == NO_ELIGIBLE_NODE and view.advice == ""
    assert view.fix == (
        "no node this pod may run on has MIG GPUs (2 of 2 nodes refuse it: 2 not matching its nodeSelector): "
        "change its nodeSelector, node affinity or tolerations, or the nodes' labels, taints or cordon"
    )


def test_a_pod_that_fits_nowhere_says_it_fits_on_no_node_it_may_run_on_without_claiming_it_fits_elsewhere():
    pods = [*HOLDERS, running("c", "n2", 0)]
    nodes = busy_n1_free_n2()
    pod = whole_gpu_pod(nodeSelector={"pool": "train"})
    (view,) = fleet_view(nodes, [*pods, pod]).pending
    assert view.fix.startswith("no node this pod may run on has room for it (1 of 2 nodes refuse it: ")
    assert "it would fit now" not in view.fix


def test_garbage_affinity_and_a_huge_toleration_list_are_read_without_raising():
    many = [{"key": f"k{i}", "operator": "Exists"} for i in range(20_000)]
    view = pending(busy_n1_free_n2(), whole_gpu_pod(affinity={"nodeAffinity": [1, 2]}, tolerations=many))
    assert view.code == NO_ELIGIBLE_NODE and "required node affinity" in view.fix
