"""The slice map model: segments and phases, free slices, and counts of what still fits, checked
against the placement engine itself (placing what the map says fits works, one more does not)."""

from __future__ import annotations

import json

import pytest

from mig.annotations import MigAllocation
from mig.catalog import find_model
from mig.leftovers import Leftover
from mig.placement import ContainerRequest, GpuState, Plan, PodRequest, plan_pod
from mig.placement.published import from_catalog
from mig.slicemap import (
    SCHEMA_VERSION,
    Holding,
    asks_text,
    diagnose,
    fleet_map,
    gpu_map,
    node_map,
    still_fits,
    to_dict,
)
from mig.types import Placement

A100 = find_model("A100-SXM4-40GB")
NAMES = ("1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb")
PROFILES = from_catalog(A100, NAMES)


def gpu(*occupied: Placement, uuid: str = "GPU-a", node: str = "n1", **kw: object) -> GpuState:
    return GpuState(node, uuid, A100.nvml_name, PROFILES, occupied, memory_mb=A100.memory_mib, **kw)  # type: ignore[arg-type]


def alloc(profile: str, start: int, size: int, uuid: str = "GPU-a", mig: str | None = None) -> MigAllocation:
    runtime = {"migUUID": mig, "gpuInstanceID": 1, "computeInstanceID": 0} if mig else {}
    return MigAllocation.model_validate(
        {
            "containerIndex": 0,
            "deviceIndex": 0,
            "gpuUUID": uuid,
            "profile": profile,
            "placement": {"start": start, "size": size},
            **runtime,
        }
    )


@pytest.mark.parametrize(
    ("occupied", "expected"),
    [
        ((), {"1g.5gb": 7, "2g.10gb": 3, "3g.20gb": 2, "7g.40gb": 1}),
        ((Placement(0, 1),), {"1g.5gb": 6, "2g.10gb": 2, "3g.20gb": 1, "7g.40gb": 0}),
        ((Placement(0, 4),), {"1g.5gb": 3, "2g.10gb": 1, "3g.20gb": 1, "7g.40gb": 0}),
        ((Placement(0, 8),), {"1g.5gb": 0, "2g.10gb": 0, "3g.20gb": 0, "7g.40gb": 0}),
    ],
)
def test_an_a100_reports_how_many_of_each_profile_still_fit(occupied, expected):
    assert still_fits(gpu(*occupied)) == expected


def place_until_refused(state: GpuState, profile: str, memory_mb: int) -> int:
    """Place one-device pods through the engine as the scheduler does; count those that get `profile`."""
    gpus = [state]
    placed = 0
    probe = PodRequest((ContainerRequest(1, memory_mb),), preference=(profile,))
    while True:
        plan = plan_pod(probe, gpus)
        if not isinstance(plan, Plan) or plan.devices[0].profile != profile:
            return placed
        g = gpus[0]
        gpus = [
            GpuState(
                g.node,
                g.uuid,
                g.type,
                g.profiles,
                (*g.occupied, plan.devices[0].placement),
                g.healthy,
                g.index,
                g.memory_mb,
            )
        ]
        placed += 1


@pytest.mark.parametrize(
    "occupied", [(), (Placement(0, 1),), (Placement(2, 2),), (Placement(4, 4), Placement(0, 1))]
)
@pytest.mark.parametrize("profile", NAMES)
def test_placing_what_the_map_says_fits_works_and_one_more_does_not(occupied, profile):
    state = gpu(*occupied)
    memory = next(p.memory_mb for p in PROFILES if p.name == profile)
    assert place_until_refused(state, profile, memory) == still_fits(state)[profile]


def test_a_closed_gpu_fits_nothing_and_says_why():
    cordoned = gpu_map(gpu(cordoned="GPU is cordoned"))
    unhealthy = gpu_map(gpu(healthy=False))
    failed = gpu_map(gpu(), closed="unreadable: bad annotation")
    assert (cordoned.fits, cordoned.closed) == ({}, "GPU is cordoned")
    assert (unhealthy.fits, unhealthy.closed) == ({}, "GPU reports unhealthy")
    assert failed.closed == "unreadable: bad annotation"


def test_segments_carry_profile_pod_and_phase():
    holdings = [
        Holding("ml", "train", alloc("3g.20gb", 4, 4, mig="MIG-1")),
        Holding("ml", "wait", alloc("1g.5gb", 0, 1)),
        Holding("ml", "gone", alloc("1g.5gb", 1, 1, mig="MIG-2"), terminating=True),
    ]
    leftovers = [
        Leftover.of("GPU-a", "1g.5gb", Placement(2, 1), "unowned"),
        Leftover.of("GPU-a", "1g.5gb", Placement(3, 1), "reclaiming"),
        Leftover.of("GPU-other", "7g.40gb", Placement(0, 8), "unowned"),
    ]
    state = gpu(
        *(h.allocation.placement_value for h in holdings), *(x.placement_value for x in leftovers[:2])
    )
    m = gpu_map(state, holdings, leftovers)
    assert [(s.placement.start, s.profile, s.phase, s.pod) for s in m.segments] == [
        (0, "1g.5gb", "reserved", "ml/wait"),
        (1, "1g.5gb", "reclaiming", "ml/gone"),
        (2, "1g.5gb", "leftover", ""),
        (3, "1g.5gb", "reclaiming", ""),
        (4, "3g.20gb", "realized", "ml/train"),
    ]
    assert m.free == ()
    assert m.slices == 8
    assert m.fits == dict.fromkeys(NAMES, 0)


def test_a_node_and_the_fleet_sum_their_gpus_counts():
    a = gpu_map(gpu())
    b = gpu_map(gpu(Placement(0, 8), uuid="GPU-b"))
    c = gpu_map(gpu(uuid="GPU-c", node="n2"))
    fleet = fleet_map([node_map("n2", [c]), node_map("n1", [b, a])])
    assert [n.name for n in fleet.nodes] == ["n1", "n2"]
    assert fleet.nodes[0].fits == {"1g.5gb": 7, "2g.10gb": 3, "3g.20gb": 2, "7g.40gb": 1}
    assert fleet.fits["7g.40gb"] == 2
    assert fleet.fits["1g.5gb"] == 14


def test_the_json_form_has_a_stable_schema():
    m = gpu_map(gpu(Placement(4, 4)), [Holding("ml", "train", alloc("3g.20gb", 4, 4, mig="MIG-1"))])
    out = json.loads(json.dumps(to_dict(fleet_map([node_map("n1", [m])]))))
    assert out["schemaVersion"] == SCHEMA_VERSION
    assert set(out) == {"schemaVersion", "fits", "nodes", "pending", "unreadablePods"}
    node = out["nodes"][0]
    assert set(node) == {"name", "unreadable", "idleUnreadable", "allocator", "fits", "gpus"}
    assert node["allocator"] == "extender"
    g = node["gpus"][0]
    assert set(g) == {
        "uuid",
        "index",
        "type",
        "memoryMB",
        "slices",
        "profiles",
        "driverNames",
        "segments",
        "free",
        "fits",
        "closed",
    }
    assert g["segments"] == [
        {
            "start": 4,
            "size": 4,
            "profile": "3g.20gb",
            "phase": "realized",
            "pod": "ml/train",
            "migUUID": "MIG-1",
            "idleSince": None,
        }
    ]
    assert g["free"] == [0, 1, 2, 3]


def test_a_pending_pod_that_asks_for_more_memory_than_any_profile_is_told_to_ask_for_less():
    request = PodRequest((ContainerRequest(1, 80000),))
    code, fix = diagnose(request, [gpu()])
    assert code == "no-profile-large-enough"
    assert "less GPU memory" in fix


def test_a_pending_pod_that_would_fit_now_has_no_reason_code():
    assert diagnose(PodRequest((ContainerRequest(1, 4000),)), [gpu()]) == ("", "")


def test_a_request_is_described_in_a_few_words():
    assert (
        asks_text(PodRequest((ContainerRequest(2), ContainerRequest(1, 20000))))
        == "2 × whole GPU + 1 × 20000 MiB"
    )


def test_the_fix_comes_from_the_node_closest_to_fitting_not_from_the_most_common_reason():
    full = [gpu(Placement(0, 8), uuid="GPU-full", node="a100")]
    others = [
        GpuState(f"n{i}", f"GPU-{i}", "NVIDIA H100", PROFILES, memory_mb=A100.memory_mib) for i in range(3)
    ]
    request = PodRequest.from_annotations([ContainerRequest(1)], {"nvidia.com/use-gputype": "A100"})
    code, fix = diagnose(request, full + others)
    assert code == "not-enough-free-slices"
    assert "wait for a MIG pod to end" in fix
