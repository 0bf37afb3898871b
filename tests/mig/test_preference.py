"""`nvidia.com/mig-profile-preference`: order, slice keys, memory floor, absent entries, fallback."""

from __future__ import annotations

from pathlib import Path

import pytest

from base.policyfiles import load_allowlist
from mig.catalog import find_model
from mig.placement import (
    ContainerRequest,
    GpuState,
    Plan,
    PodRequest,
    parse_preference,
    plan_pod,
    unknown_entries,
)
from mig.placement.published import from_catalog
from mig.types import Placement

WITH_4G = load_allowlist(Path(__file__).resolve().parents[2] / "policies" / "examples" / "with-4g.yaml")


def gpu(model: str, occupied=(), uuid="GPU-0", index=0) -> GpuState:
    m = find_model(model)
    return GpuState(
        "node-a",
        uuid,
        m.nvml_name,
        from_catalog(m, WITH_4G.profiles_for(m.nvml_name)),
        tuple(occupied),
        True,
        index,
    )


def profile_for(model: str, mib: int, preference: str, occupied=()) -> str:
    pod = PodRequest.from_annotations(
        [ContainerRequest(1, mib)], {"nvidia.com/mig-profile-preference": preference}
    )
    result = plan_pod(pod, [gpu(model, occupied)])
    assert isinstance(result, Plan), result
    return result.devices[0].profile


def test_entries_are_trimmed_and_duplicates_and_empties_dropped_in_order():
    assert parse_preference(" 4g, ,3g.20gb,4g ,") == ("4g", "3g.20gb")


def test_entries_matching_no_profile_are_reported_for_admission():
    assert unknown_entries(("4g", "9g", "1g.5gb", "2g.99gb"), ("1g.5gb", "4g.20gb")) == ("9g", "2g.99gb")


@pytest.mark.parametrize(
    ("model", "mib", "preference", "expected"),
    [
        ("A100-SXM4-40GB", 15000, "", "3g.20gb"),  # same memory: fewer slices wins by default
        ("A100-SXM4-40GB", 15000, "4g", "4g.20gb"),  # the slice key is honoured where allowed
        ("A100-SXM4-40GB", 15000, "4g.20gb", "4g.20gb"),  # so is the full name
        ("H100-SXM5-80GB", 30000, "4g", "4g.40gb"),
        ("A100-SXM4-40GB", 4000, "2g", "2g.10gb"),  # a preferred larger profile over the smallest
        ("A100-SXM4-40GB", 4000, "9g,2g", "2g.10gb"),  # entries absent on this GPU are ignored
        ("A100-SXM4-40GB", 15000, "1g,2g", "3g.20gb"),  # never smaller than the request
        ("A100-SXM4-40GB", 4000, "7g,2g", "7g.40gb"),  # entry order wins
        ("RTX-PRO-6000", 8000, "4g", "4g.96gb"),
        ("RTX-PRO-6000", 8000, "3g,1g", "1g.24gb"),  # no 3g on an RTX PRO 6000: ignored
    ],
)
def test_a_preference_reorders_profiles_without_going_below_the_request(model, mib, preference, expected):
    assert profile_for(model, mib, preference) == expected


def test_a_preferred_profile_without_a_free_placement_falls_back_to_the_default_order():
    # 4g.20gb only fits at 0:4; hold slice 0 and the pod still gets a 3g.20gb at 4:4.
    assert profile_for("A100-SXM4-40GB", 15000, "4g", occupied=[Placement(0, 1)]) == "3g.20gb"


def test_a_gpu_offering_the_preferred_profile_wins_over_one_that_does_not():
    pod = PodRequest.from_annotations(
        [ContainerRequest(1, 15000)], {"nvidia.com/mig-profile-preference": "4g"}
    )
    a30 = gpu("A30", uuid="GPU-a30")  # 4g.24gb is the A30's whole GPU, also a 4g
    a100 = gpu("A100-SXM4-40GB", uuid="GPU-a100", index=1)
    h100 = gpu("H100-SXM5-80GB", uuid="GPU-h100", index=2, occupied=[Placement(0, 1)])  # no 4g placement
    result = plan_pod(pod, [h100, a100, a30])
    assert result.devices[0].profile.startswith("4g.")
    assert result.devices[0].gpu_uuid in {"GPU-a30", "GPU-a100"}
