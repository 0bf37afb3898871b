"""A policy against the fleet: nodes that would publish no MIG profile, and running pods holding a
profile the policy no longer allows (they keep running)."""

from __future__ import annotations

from mig.allowlist import parse_allowlist
from mig.annotations import MIG_ALLOCATIONS, VGPU_NODE, MigAllocation, encode_allocations
from mig.fleetcheck import check_fleet
from tests.webhooks.webhooks_testkit import node

RTX_ONLY, _ = parse_allowlist([{"models": ["RTX PRO 6000"], "profiles": ["1g.24gb", "2g.48gb"]}])
A100_NO_3G, _ = parse_allowlist(
    [
        {"models": ["A100-SXM4-40GB"], "profiles": ["1g.5gb", "7g.40gb"]},
        {"models": ["RTX PRO 6000"], "profiles": ["1g.24gb"]},
    ]
)


def holding(name: str, node_name: str, gpu: str, profile: str, phase: str = "Running") -> dict:
    allocation = MigAllocation.model_validate(
        {
            "containerIndex": 0,
            "deviceIndex": 0,
            "gpuUUID": gpu,
            "profile": profile,
            "placement": {"start": 0, "size": 4},
        }
    )
    annotations = {VGPU_NODE: node_name, MIG_ALLOCATIONS: encode_allocations([allocation])}
    return {
        "metadata": {"name": name, "namespace": "ml", "annotations": annotations},
        "status": {"phase": phase},
    }


NODES = [node("gpu-a100", "A100-SXM4-40GB", 2), node("gpu-rtx", "RTX-PRO-6000", 8)]


def test_a_node_whose_gpus_the_policy_names_no_more_would_publish_no_mig_profile():
    found = check_fleet(RTX_ONLY, NODES, [])

    assert [(b.node, b.gpus) for b in found.bare] == [("gpu-a100", ("NVIDIA A100-SXM4-40GB",) * 2)]
    assert found.lines()[0].startswith(
        "node gpu-a100 (2 × NVIDIA A100-SXM4-40GB) would publish no MIG profile"
    )
    assert found.nodes == 2


def test_a_running_pod_holding_a_profile_no_longer_allowed_is_named_and_keeps_running():
    pods = [
        holding("train", "gpu-a100", "GPU-gpu-a100-0", "3g.20gb"),
        holding("done", "gpu-a100", "GPU-gpu-a100-1", "3g.20gb", phase="Succeeded"),
        holding("fine", "gpu-a100", "GPU-gpu-a100-1", "1g.5gb"),
    ]

    found = check_fleet(A100_NO_3G, NODES, pods)

    assert found.bare == ()
    assert [(h.pod, h.profile) for h in found.held] == [("ml/train", "3g.20gb")]
    assert found.lines() == [
        "pod ml/train holds a 3g.20gb on gpu-a100 (NVIDIA A100-SXM4-40GB) that the policy no longer allows: "
        "it keeps running; new pods cannot get one"
    ]


def test_unreadable_annotations_are_skipped_not_raised():
    broken = {"metadata": {"name": "x", "annotations": {"hami.io/node-nvidia-register": "{not json"}}}
    pod = {"metadata": {"name": "p", "annotations": {VGPU_NODE: "x", MIG_ALLOCATIONS: "[[["}}}

    assert not check_fleet(RTX_ONLY, [broken, {"metadata": None}], [pod, {}])
