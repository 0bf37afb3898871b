"""What a person reads about a pod that fits nowhere: a short headline first, then capped detail."""

from __future__ import annotations

from base.policyfiles import default_allowlist
from mig.catalog import find_model
from mig.placement import ContainerRequest, GpuState, PodRequest, Refusal, plan_pod
from mig.placement import reasons as R
from mig.placement.published import from_catalog
from mig.types import Placement

ALLOW = default_allowlist()


def gpu(model, node="node-a", uuid="GPU-0", occupied=(), healthy=True):
    m = find_model(model)
    profiles = from_catalog(m, ALLOW.profiles_for(m.nvml_name))
    return GpuState(node, uuid, m.nvml_name, profiles, tuple(occupied), healthy)


def refuse(mib, gpus, **annotations) -> Refusal:
    result = plan_pod(PodRequest.from_annotations([ContainerRequest(1, mib)], annotations), gpus)
    assert isinstance(result, Refusal), result
    return result


def fleet():
    """8 RTX PRO 6000 with one free slice at 1, 2, 4, 5 (no aligned 1g.24gb), 2 of them full."""
    holes = [Placement(0, 1), Placement(3, 1), Placement(6, 3), Placement(9, 3)]
    rtx = [gpu("RTX-PRO-6000", "gpu-rtx", f"GPU-r{i}", occupied=holes) for i in range(6)]
    rtx += [gpu("RTX-PRO-6000", "gpu-rtx", f"GPU-f{i}", occupied=[Placement(0, 12)]) for i in range(2)]
    return rtx


def test_the_headline_counts_gpus_per_reason_and_says_how_many_gpus_the_profile_fits_on():
    refusal = refuse(8000, fleet())
    assert refusal.summary() == (
        "0/1 nodes: 6 GPUs fragmented (largest free run 2 slices), 2 GPUs full; 1g.24gb fits on 0 of 8 GPUs"
    )


def test_the_headline_names_node_reasons_and_gpus_excluded_by_the_pod():
    gpus = [
        gpu("A100-SXM4-40GB", "gpu-a", "GPU-a0"),
        gpu("A100-SXM4-40GB", "gpu-a", "GPU-a1", healthy=False),
        *fleet(),
    ]
    refusal = refuse(8000, gpus, **{"nvidia.com/nouse-gpuuuid": "GPU-a0"})
    head = refusal.summary()
    assert head.startswith("0/2 nodes: 6 GPUs fragmented (largest free run 2 slices), 2 GPUs full, ")
    assert "1 GPU excluded by the pod's annotations" in head and "1 GPU unhealthy" in head
    assert head.endswith("fits on 0 of 10 GPUs")


def test_the_text_puts_the_headline_before_the_detail_and_stays_within_its_limit():
    many = [
        gpu("RTX-PRO-6000", f"node-{n}", f"GPU-{n}-{i}", occupied=[Placement(0, 12)])
        for n in range(50)
        for i in range(8)
    ]
    refusal = refuse(8000, many)
    text = refusal.text(1024)
    head, detail = text.split(R.DETAIL_MARK, 1)
    assert head == "0/50 nodes: 400 GPUs full; 1g.24gb fits on 0 of 400 GPUs."
    assert len(head) < R.MAX_HEADLINE and len(text) <= 1024
    assert detail.startswith("node-0/GPU-0-0 and 7 more GPUs: not enough free slices: free none, 1g.24gb")
    assert detail.endswith("and 42 more reasons")  # 50 nodes, one line each


def test_every_reason_kind_together_still_makes_a_headline_under_300_characters():
    reasons = [
        R.Reason(
            code, "why", f"n{i}", None if code in (R.NO_GPUS, R.DEVICES_DO_NOT_FIT_TOGETHER) else f"G{i}"
        )
        for i, code in enumerate(R._CLOSEST_FIRST * 3)
    ]
    head = Refusal(reasons, gpus=1000).summary()
    assert len(head) < R.MAX_HEADLINE and head.startswith("0/27 nodes: 3 nodes cannot hold")


def test_the_longest_free_run_counts_consecutive_slices():
    assert R.longest_run([1, 2, 4, 5, 6]) == 3 and R.longest_run([]) == 0 and R.longest_run([7]) == 1


def test_gpus_of_a_node_with_the_same_reason_share_one_line_and_different_ones_keep_theirs():
    refusal = refuse(8000, fleet())
    lines = refusal.detail().split("; ")
    assert lines[0].startswith("gpu-rtx/GPU-r0 and 5 more GPUs: fragmented: free slices 1,2,4,5")
    assert lines[1].startswith("gpu-rtx/GPU-f0 and 1 more GPU: not enough free slices: free none")
    assert len(lines) == 2
