"""Placement engine: profile choice, placements, multi-device, policies, occupancy and refusal reasons,
as tables across GPU models built from the catalog and the default allowlist."""

from __future__ import annotations

import pytest

from base.policyfiles import default_allowlist
from mig.catalog import find_model
from mig.placement import (
    ContainerRequest,
    GpuState,
    PlacementIndex,
    Plan,
    PodRequest,
    PublishedProfile,
    Refusal,
    plan_pod,
)
from mig.placement import reasons as R
from mig.placement.published import from_catalog
from mig.types import Placement

ALLOW = default_allowlist()


def gpu(model: str, node: str = "node-a", uuid: str = "GPU-0", index: int = 0, occupied=(), healthy=True):
    m = find_model(model)
    return GpuState(
        node,
        uuid,
        m.nvml_name,
        from_catalog(m, ALLOW.profiles_for(m.nvml_name)),
        tuple(occupied),
        healthy,
        index,
    )


def pod(*containers: tuple[int, int | None], **annotations: str) -> PodRequest:
    return PodRequest.from_annotations([ContainerRequest(n, mem) for n, mem in containers], annotations)


def only(result) -> tuple[str, Placement]:
    assert isinstance(result, Plan), result
    (d,) = result.devices
    return d.profile, d.placement


@pytest.mark.parametrize(
    ("model", "mib", "profile"),
    [
        ("RTX-PRO-6000", 8000, "1g.24gb"),
        ("RTX-PRO-6000", 30000, "2g.48gb"),
        ("RTX-PRO-6000", 90000, "4g.96gb"),
        ("A100-SXM4-40GB", 4000, "1g.5gb"),
        ("A100-SXM4-40GB", 5000, "2g.10gb"),  # 1g.10gb is not in the default allowlist
        ("A100-SXM4-40GB", 15000, "3g.20gb"),
        ("A100-SXM4-40GB", 30000, "7g.40gb"),
        ("H100-SXM5-80GB", 9000, "1g.10gb"),
        ("H100-SXM5-80GB", 30000, "3g.40gb"),
        ("A30", 6000, "2g.12gb"),
        ("A30", 5000, "1g.6gb"),
    ],
)
def test_a_request_gets_the_smallest_allowlisted_profile_that_covers_its_memory(model, mib, profile):
    chosen, placement = only(plan_pod(pod((1, mib)), [gpu(model)]))
    assert chosen == profile
    spec = find_model(model).profile(chosen)
    assert spec.memory_mib >= mib
    assert placement in spec.placements


@pytest.mark.parametrize("model", ["A30", "A100-SXM4-40GB", "H100-SXM5-80GB", "RTX-PRO-6000"])
def test_without_a_memory_request_a_pod_gets_the_largest_profile(model):
    m = find_model(model)
    largest = max((m.profile(n) for n in ALLOW.profiles_for(m.nvml_name)), key=lambda p: p.memory_mib)
    assert only(plan_pod(pod((1, None)), [gpu(model)]))[0] == largest.name


def test_a_30000_mib_pod_on_an_rtx_pro_6000_gets_2g_48gb_at_start_0_as_on_real_hardware():
    assert only(plan_pod(pod((1, 30000)), [gpu("RTX-PRO-6000")])) == ("2g.48gb", Placement(0, 6))


@pytest.mark.parametrize(
    ("model", "mib", "keeps"),
    [
        ("A100-SXM4-40GB", 4000, Placement(0, 4)),  # a 1g lands at 6: 3g at 0:4, 2g at 0, 2, 4 stay free
        ("H100-SXM5-80GB", 9000, Placement(0, 4)),
        ("RTX-PRO-6000", 8000, Placement(6, 6)),  # a 1g leaves one 2g.48gb placement whole
    ],
)
def test_a_small_instance_on_an_empty_gpu_keeps_a_large_placement_free(model, mib, keeps):
    _, placement = only(plan_pod(pod((1, mib)), [gpu(model)]))
    assert not placement.overlaps(keeps)


def test_the_second_small_pod_joins_the_partly_used_gpu_so_a_whole_gpu_stays_free():
    index = PlacementIndex(
        [gpu("A100-SXM4-40GB", uuid="GPU-0"), gpu("A100-SXM4-40GB", uuid="GPU-1", index=1)]
    )
    first = index.plan(pod((1, 4000)))
    index.apply(first)
    second = index.plan(pod((1, 4000)))
    assert second.devices[0].gpu_uuid == first.devices[0].gpu_uuid
    index.apply(second)
    assert only(index.plan(pod((1, None))))[0] == "7g.40gb"


def test_two_devices_of_one_container_may_land_on_the_same_gpu_without_overlapping():
    result = plan_pod(pod((2, 4000)), [gpu("A100-SXM4-40GB")])
    assert isinstance(result, Plan)
    a, b = result.devices
    assert (a.container_index, a.device_index, b.device_index) == (0, 0, 1)
    assert a.gpu_uuid == b.gpu_uuid and not a.placement.overlaps(b.placement)


def test_all_devices_of_all_containers_land_on_one_node_in_hami_container_order():
    gpus = [
        gpu("A100-SXM4-40GB", node="node-a", occupied=[Placement(0, 8)]),
        gpu("A100-SXM4-40GB", node="node-b", uuid="GPU-b0"),
        gpu("A30", node="node-b", uuid="GPU-b1", index=1),
    ]
    result = plan_pod(pod((1, 4000), (2, 15000)), gpus)
    assert isinstance(result, Plan)
    assert {d.node for d in result.devices} == {"node-b"}
    assert [(d.container_index, d.device_index) for d in result.devices] == [(0, 0), (1, 0), (1, 1)]
    big = [d for d in result.devices if d.container_index == 1]
    assert all(d.memory_mb >= 15000 for d in big)


def _synthetic(uuid: str, index: int, occupied=()) -> GpuState:
    """Two profiles whose placements do not nest, so the smallest can be full while the larger is free."""
    small = PublishedProfile("1g.5gb", 5000, 15, 1, (Placement(0, 1), Placement(1, 1)))
    large = PublishedProfile("2g.10gb", 10000, 29, 2, (Placement(2, 2),))
    return GpuState("node-a", uuid, "NVIDIA Synthetic", (small, large), tuple(occupied), True, index)


def test_a_larger_profile_is_used_when_the_smallest_has_no_free_placement_anywhere():
    full = _synthetic("GPU-0", 0, [Placement(0, 1), Placement(1, 1)])
    d = plan_pod(pod((1, 4000)), [full]).devices[0]
    assert (d.profile, d.placement) == ("2g.10gb", Placement(2, 2))
    assert d.memory_mb >= 4000


def test_another_gpu_with_room_for_the_smallest_profile_beats_an_upgrade():
    full = _synthetic("GPU-0", 0, [Placement(0, 1), Placement(1, 1)])
    roomy = _synthetic("GPU-1", 1, [Placement(0, 1), Placement(2, 2)])
    d = plan_pod(pod((1, 4000)), [full, roomy]).devices[0]
    assert (d.gpu_uuid, d.profile) == ("GPU-1", "1g.5gb")


@pytest.mark.parametrize(
    ("annotations", "expected_gpu"),
    [
        ({}, "GPU-1"),  # default binpack: the partly used GPU
        ({"hami.io/gpu-scheduler-policy": "spread"}, "GPU-0"),
    ],
)
def test_the_gpu_scheduler_policy_chooses_between_a_used_and_an_empty_gpu(annotations, expected_gpu):
    gpus = [
        gpu("A100-SXM4-40GB", uuid="GPU-0"),
        gpu("A100-SXM4-40GB", uuid="GPU-1", index=1, occupied=[Placement(6, 1)]),
    ]
    assert plan_pod(pod((1, 4000), **annotations), gpus).devices[0].gpu_uuid == expected_gpu


@pytest.mark.parametrize(("policy", "expected_node"), [("binpack", "node-b"), ("spread", "node-a")])
def test_the_node_scheduler_policy_chooses_between_a_busy_and_an_idle_node(policy, expected_node):
    gpus = [
        gpu("A100-SXM4-40GB", node="node-a", uuid="GPU-a"),
        gpu("A100-SXM4-40GB", node="node-b", uuid="GPU-b0", occupied=[Placement(0, 8)]),
        gpu("A100-SXM4-40GB", node="node-b", uuid="GPU-b1", index=1),
    ]
    result = plan_pod(pod((1, None), **{"hami.io/node-scheduler-policy": policy}), gpus)
    assert result.devices[0].node == expected_node


def test_ties_go_to_the_lower_gpu_index_then_the_node_name():
    gpus = [
        gpu("A30", node="node-b", uuid="GPU-b0"),
        gpu("A30", node="node-a", uuid="GPU-a1", index=1),
        gpu("A30", node="node-a", uuid="GPU-a0", index=0),
    ]
    assert plan_pod(pod((1, None)), gpus).devices[0].gpu_uuid == "GPU-a0"
    assert plan_pod(pod((1, None)), list(reversed(gpus))).devices[0].gpu_uuid == "GPU-a0"


@pytest.mark.parametrize(
    ("annotations", "allowed"),
    [
        ({"nvidia.com/use-gputype": "a30"}, {"GPU-a30"}),
        ({"nvidia.com/nouse-gputype": "A100,H100"}, {"GPU-a30"}),
        ({"nvidia.com/use-gpuuuid": "GPU-h100"}, {"GPU-h100"}),
        ({"nvidia.com/nouse-gpuuuid": "GPU-a30, GPU-a100"}, {"GPU-h100"}),
    ],
)
def test_gpu_annotations_restrict_where_a_pod_may_land(annotations, allowed):
    gpus = [
        gpu("A100-SXM4-40GB", uuid="GPU-a100", occupied=[Placement(6, 1)]),
        gpu("A30", uuid="GPU-a30", index=1),
        gpu("H100-SXM5-80GB", uuid="GPU-h100", index=2),
    ]
    assert plan_pod(pod((1, 4000), **annotations), gpus).devices[0].gpu_uuid in allowed


def test_the_index_follows_reservations_and_releases():
    index = PlacementIndex([gpu("RTX-PRO-6000")])
    plans = []
    for _ in range(4):
        plans.append(index.plan(pod((1, 8000))))
        index.apply(plans[-1])
    assert sorted(p.devices[0].placement.start for p in plans) == [0, 3, 6, 9]
    assert isinstance(index.plan(pod((1, 8000))), Refusal)
    index.release("GPU-0", plans[1].devices[0].placement)
    assert only(index.plan(pod((1, 8000))))[1] == plans[1].devices[0].placement
    with pytest.raises(ValueError, match="overlaps"):
        index.reserve("GPU-0", Placement(0, 6))


def test_planning_can_be_restricted_to_the_nodes_the_scheduler_offers():
    gpus = [gpu("A30", node="node-a", uuid="GPU-a"), gpu("A30", node="node-b", uuid="GPU-b")]
    assert PlacementIndex(gpus).plan(pod((1, 5000)), nodes=["node-b"]).devices[0].node == "node-b"


def _reasons(result) -> dict[str, R.Reason]:
    assert isinstance(result, Refusal)
    return {r.gpu or r.node: r for r in result.reasons}


def test_an_unhealthy_gpu_is_refused_as_unhealthy():
    r = _reasons(plan_pod(pod((1, 4000)), [gpu("A30", healthy=False)]))["GPU-0"]
    assert r.code == R.UNHEALTHY


def test_a_gpu_without_published_profiles_says_so():
    g = GpuState("node-a", "GPU-0", "NVIDIA Tesla T4", ())
    r = _reasons(plan_pod(pod((1, 4000)), [g]))["GPU-0"]
    assert r.code == R.NO_PROFILES and "allowlist" in r.message


def test_an_excluded_gpu_names_the_annotation_that_excluded_it():
    result = plan_pod(pod((1, 4000), **{"nvidia.com/use-gputype": "H100"}), [gpu("A30")])
    r = _reasons(result)["GPU-0"]
    assert r.code == R.EXCLUDED and "nvidia.com/use-gputype" in r.message


def test_a_request_larger_than_every_profile_names_the_largest_profile():
    r = _reasons(plan_pod(pod((1, 50000)), [gpu("A100-SXM4-40GB")]))["GPU-0"]
    assert r.code == R.NOT_ENOUGH_MEMORY
    assert "7g.40gb" in r.message and "40448" in r.message


def test_a_fragmented_gpu_names_its_free_slices_and_the_placements_they_miss():
    g = gpu("A100-SXM4-40GB", occupied=[Placement(0, 1), Placement(3, 1), Placement(4, 1), Placement(6, 1)])
    r = _reasons(plan_pod(pod((1, 9000)), [g]))["GPU-0"]
    assert r.code == R.FRAGMENTED
    assert r.message == "fragmented: free slices 1,2,5,7 but 2g.10gb needs one of 0:2,2:2,4:2"


def test_a_full_gpu_says_there_are_not_enough_free_slices():
    r = _reasons(
        plan_pod(pod((1, 15000)), [gpu("A100-SXM4-40GB", occupied=[Placement(0, 4), Placement(4, 2)])])
    )
    assert r["GPU-0"].code == R.NOT_ENOUGH_SLICES and "3g.20gb needs 4" in r["GPU-0"].message


def test_devices_that_fit_one_by_one_but_not_together_get_a_node_reason():
    result = plan_pod(pod((5, 8000)), [gpu("RTX-PRO-6000")])
    node = _reasons(result)["node-a"]
    assert node.code == R.DEVICES_DO_NOT_FIT_TOGETHER and "0,1,2,3,4,5,6,7,8,9,10,11" in node.message
    assert result.node_code("node-a") == R.DEVICES_DO_NOT_FIT_TOGETHER


def test_a_refusal_counts_nodes_per_headline_reason():
    gpus = [
        gpu("A30", node="node-a", healthy=False),
        gpu("A30", node="node-b", uuid="GPU-b", occupied=[Placement(0, 1), Placement(2, 1)]),
        gpu("A30", node="node-c", uuid="GPU-c", occupied=[Placement(0, 1), Placement(2, 1)]),
    ]
    result = plan_pod(pod((1, 6000)), gpus)
    assert result.counts() == {R.UNHEALTHY: 1, R.FRAGMENTED: 2}
    assert result.summary().startswith(
        "0/3 nodes: 2 GPUs fragmented (largest free run 1 slice), 1 GPU unhealthy"
    )
    assert "free slices 1,3" in result.node_message("node-b")


def _replay(model: str, steps) -> tuple[dict[str, tuple[str, Placement]], list[str]]:
    """Create (name, MiB) and delete (name) pods on one GPU as HAMi's E2E script does; pending pods
    are retried after each delete. Returns what runs (profile, placement) and what is pending."""
    index = PlacementIndex([gpu(model)])
    running: dict[str, tuple[str, Placement]] = {}
    pending: list[tuple[str, int]] = []

    def admit(name: str, mib: int) -> bool:
        plan = index.plan(pod((1, mib)))
        if not plan.fits:
            return False
        index.apply(plan)
        running[name] = only(plan)
        return True

    for step in steps:
        if isinstance(step, tuple):
            if not admit(*step):
                pending.append(step)
        else:
            index.release("GPU-0", running.pop(step)[1])
            pending = [p for p in pending if not admit(*p)]
    return running, [name for name, _ in pending]


def test_hamis_a100_case_2_ends_with_one_1g_and_three_2g_and_the_overflow_pending():
    # hack/hami-mig-e2e.sh, A100-40GB preset, case 2: 1g, 1g, 2g; delete the second 1g; two more 2g.
    # A first 1g at slice 6 (NVIDIA's driver order: 6, 4, 5, 0, ...) leaves 0:2, 2:2 and 4:2 to 2g.
    steps = [("one-a", 4500), ("one-b", 4500), ("two-a", 9500), "one-b", ("two-b", 9500), ("two-c", 9500)]
    running, pending = _replay("A100-SXM4-40GB", [*steps, ("overflow-one", 4500)])
    assert sorted(p for p, _ in running.values()) == ["1g.5gb", "2g.10gb", "2g.10gb", "2g.10gb"]
    assert pending == ["overflow-one"]
    # Case 4: deleting a 2g lets the pending 1g in.
    running, pending = _replay("A100-SXM4-40GB", [*steps, ("overflow-one", 4500), "two-b"])
    assert sorted(running) == ["one-a", "overflow-one", "two-a", "two-c"] and pending == []


def test_hamis_a100_case_6_holds_a_3g_a_2g_and_two_1g_and_refills_a_deleted_1g():
    steps = [("three-a", 19000), ("two-d", 9500), ("one-c", 4500), ("one-d", 4500), ("overflow-two", 4500)]
    running, pending = _replay("A100-SXM4-40GB", steps)
    assert sorted(running) == ["one-c", "one-d", "three-a", "two-d"] and pending == ["overflow-two"]
    running, pending = _replay("A100-SXM4-40GB", [*steps, "one-c"])
    assert "overflow-two" in running and pending == []


@pytest.mark.parametrize(("model", "small"), [("A100-SXM4-40GB", 4000), ("H100-SXM5-80GB", 9000)])
def test_small_instances_take_nvidias_driver_order_so_three_2g_still_fit_beside_one_1g(model, small):
    # Slice 7 holds memory but no compute of its own (only 3g at 4:4 and 7g cover it): a 1g at 6
    # costs no more capacity than one at 0, and keeps 0:2, 2:2 and 4:2 free for 2g.
    index = PlacementIndex([gpu(model)])
    starts = []
    for _ in range(7):
        plan = index.plan(pod((1, small)))
        index.apply(plan)
        starts.append(only(plan)[1].start)
    assert starts == [6, 4, 5, 0, 1, 2, 3]


@pytest.mark.parametrize(
    ("model", "small", "half", "half_profile"),
    [
        ("A100-SXM4-40GB", 4000, 15000, "3g.20gb"),
        ("H100-SXM5-80GB", 9000, 30000, "3g.40gb"),
    ],
)
def test_three_small_instances_leave_a_half_for_a_3g(model, small, half, half_profile):
    index = PlacementIndex([gpu(model)])
    for _ in range(3):
        index.apply(index.plan(pod((1, small))))
    assert only(index.plan(pod((1, half)))) == (half_profile, Placement(0, 4))


@pytest.mark.parametrize(
    ("mib", "models", "expected"),
    [
        (9000, ("A100-SXM4-40GB", "H100-SXM5-80GB"), "H100-SXM5-80GB"),  # 1 of 8 slices, not 2 of 8
        (4000, ("RTX-PRO-6000", "A100-SXM4-40GB"), "A100-SXM4-40GB"),  # 1 of 8 slices, not 3 of 12
        (18000, ("A100-SXM4-40GB", "H100-SXM5-80GB"), "H100-SXM5-80GB"),  # 2 of 8 slices, not 4 of 8
    ],
)
def test_a_request_goes_to_the_gpu_model_where_it_takes_the_smallest_share(mib, models, expected):
    gpus = [gpu(m, node=f"node-{i}", uuid=f"GPU-{i}") for i, m in enumerate(models)]
    d = plan_pod(pod((1, mib)), gpus).devices[0]
    assert d.gpu_uuid == f"GPU-{models.index(expected)}"


@pytest.mark.parametrize(
    ("model", "mib", "held"),
    [
        ("A100-SXM4-40GB", 4000, Placement(0, 1)),
        ("H100-SXM5-80GB", 9000, Placement(2, 2)),
        ("RTX-PRO-6000", 8000, Placement(0, 3)),
        ("A30", 5000, Placement(0, 1)),
    ],
)
def test_a_small_pod_joins_a_gpu_that_holds_instances_so_an_empty_gpu_stays_whole(model, mib, held):
    gpus = [gpu(model, uuid="GPU-0"), gpu(model, uuid="GPU-1", index=1, occupied=[held])]
    index = PlacementIndex(gpus)
    small = index.plan(pod((1, mib)))
    assert small.devices[0].gpu_uuid == "GPU-1"
    index.apply(small)
    whole = index.plan(pod((1, None)))
    assert whole.devices[0].gpu_uuid == "GPU-0" and whole.devices[0].placement.start == 0


@pytest.mark.parametrize(
    ("model", "axis"), [("A100-SXM4-40GB", 8), ("H100-SXM5-80GB", 8), ("RTX-PRO-6000", 12)]
)
def test_between_equally_good_gpus_the_one_on_the_fuller_node_wins(model, axis):
    gpus = [
        gpu(model, node="node-a", uuid="GPU-a0"),
        gpu(model, node="node-a", uuid="GPU-a1", index=1),
        gpu(model, node="node-b", uuid="GPU-b0"),
        gpu(model, node="node-b", uuid="GPU-b1", index=1, occupied=[Placement(0, axis)]),
    ]
    assert plan_pod(pod((1, None)), gpus).devices[0].gpu_uuid == "GPU-b0"


@pytest.mark.parametrize("mix", [(), ((4000, 5.0), (9000, 5.0))], ids=["demand unknown", "services only"])
def test_a_9gb_service_takes_the_model_where_it_uses_least_of_a_gpu_whatever_demand_prices_say(mix):
    # The H100 1g.10gb costs one seventh of its GPU where the A100 2g.10gb costs two sevenths; demand
    # prices only decide between candidates that cost their model the same share.
    gpus = [
        gpu("H100-SXM5-80GB", node="node-a", uuid="GPU-h"),
        gpu("A100-SXM4-40GB", node="node-b", uuid="GPU-a"),
    ]
    index = PlacementIndex(gpus)
    index.set_demand(mix)
    small = index.plan(pod((1, 4000)))
    assert (small.devices[0].gpu_uuid, small.devices[0].profile) == ("GPU-a", "1g.5gb")
    index.apply(small)
    larger = index.plan(pod((1, 9000)))
    assert (larger.devices[0].gpu_uuid, larger.devices[0].profile) == ("GPU-h", "1g.10gb")


def test_small_pods_fill_a_node_s_gpus_in_index_order_so_its_last_gpus_stay_whole():
    gpus = [gpu("A100-SXM4-40GB", node="node-a", uuid=f"GPU-{i}", index=i) for i in range(4)]
    index = PlacementIndex(gpus)
    used = set()
    for _ in range(9):  # seven 1g fill GPU 0; the next two open GPU 1
        plan = index.plan(pod((1, 4000)))
        index.apply(plan)
        used.add(plan.devices[0].gpu_uuid)
    assert used == {"GPU-0", "GPU-1"}
    for uuid in ("GPU-2", "GPU-3"):
        assert index.plan(pod((1, None)), nodes=["node-a"]).devices[0].gpu_uuid in {"GPU-2", "GPU-3"}
        assert index.occupied_mask(uuid) == 0


def test_between_equally_full_nodes_a_small_pod_goes_to_the_first_by_name():
    gpus = [gpu("A100-SXM4-40GB", node=n, uuid=f"GPU-{n}") for n in ("node-c", "node-a", "node-b")]
    assert plan_pod(pod((1, 4000)), gpus).devices[0].node == "node-a"


def _ones(*starts: int) -> list[Placement]:
    return [Placement(s, 1) for s in starts]


def test_a_4gb_service_leaves_the_last_h100_1g_10gb_to_a_9gb_one_so_the_next_4gb_one_fits_too():
    # Both costs one compute slice and no half-GPU placement; the H100 slot would fill its GPU more
    # neatly (it destroys less placeable value), but the A100 1g.5gb fits 4 GB in less memory.
    gpus = [
        gpu("H100-SXM5-80GB", node="node-a", uuid="GPU-h", occupied=_ones(0, 1, 2, 3, 4, 5)),
        gpu("A100-SXM4-40GB", node="node-b", uuid="GPU-a", occupied=_ones(0, 1, 2, 3, 6)),
    ]
    index = PlacementIndex(gpus)
    placed = []
    for mib in (4000, 9000, 4000):
        plan = index.plan(pod((1, mib)))
        assert isinstance(plan, Plan), f"the {mib} MiB service after {placed} was refused"
        index.apply(plan)
        placed.append((plan.devices[0].gpu_uuid, plan.devices[0].profile))
    assert placed == [("GPU-a", "1g.5gb"), ("GPU-h", "1g.10gb"), ("GPU-a", "1g.5gb")]


def test_a_4gb_service_takes_an_h100_1g_10gb_rather_than_break_the_half_gpu_left_on_an_a100():
    # The A100 holds a 3g at 4:4; any 1g at 0-3 destroys its last 3g placement (0:4). Memory fit comes
    # after the half-GPU placements a candidate destroys.
    gpus = [
        gpu("H100-SXM5-80GB", node="node-a", uuid="GPU-h", occupied=[*_ones(0, 1, 2), Placement(4, 4)]),
        gpu("A100-SXM4-40GB", node="node-b", uuid="GPU-a", occupied=[Placement(4, 4)]),
    ]
    index = PlacementIndex(gpus)
    small = index.plan(pod((1, 4000)))
    assert (small.devices[0].gpu_uuid, small.devices[0].placement) == ("GPU-h", Placement(3, 1))
    index.apply(small)
    assert only(index.plan(pod((1, 15000)))) == ("3g.20gb", Placement(0, 4))


def _model_fleet(model: str, node: str, n: int, busy: int) -> list[GpuState]:
    """`n` GPUs of `model` on `node`, the first `busy` of them holding one small instance."""
    m = find_model(model)
    small = min(ALLOW.profiles_for(m.nvml_name), key=lambda name: m.profile(name).memory_mib)
    held = max(m.profile(small).placements, key=lambda p: p.start)
    return [
        gpu(model, node=node, uuid=f"GPU-{node}-{i}", index=i, occupied=[held] if i < busy else [])
        for i in range(n)
    ]


@pytest.mark.parametrize(
    ("busy_a100", "busy_rtx", "expected"),
    [
        (3, 1, "node-rtx"),  # small services keep the A100s busy: the whole-GPU job takes an RTX PRO 6000
        (1, 3, "node-a100"),  # and the other way round
        (2, 2, "node-rtx"),  # as empty: the model giving up fewer compute slices (4, not 7)
    ],
)
def test_a_whole_gpu_job_goes_to_the_model_whose_gpus_the_small_services_left_empty(
    busy_a100, busy_rtx, expected
):
    fleet = _model_fleet("A100-SXM4-40GB", "node-a100", 4, busy_a100) + _model_fleet(
        "RTX-PRO-6000", "node-rtx", 4, busy_rtx
    )
    d = plan_pod(pod((1, None)), fleet).devices[0]
    assert d.node == expected
    assert d.placement.start == 0 and not any(g.occupied for g in fleet if g.uuid == d.gpu_uuid)


def test_a_whole_gpu_job_still_finds_an_empty_gpu_after_40_small_services_arrive():
    # 8 A100s hold 56 1g instances: 40 services fill 6 GPUs (7 each) when packed, and leave none
    # empty when spread.
    fleet = [
        gpu("A100-SXM4-40GB", node=f"node-{n}", uuid=f"GPU-{n}-{i}", index=i)
        for n in range(2)
        for i in range(4)
    ]
    index = PlacementIndex(fleet)
    for n in range(40):
        plan = index.plan(pod((1, 4000)))
        assert isinstance(plan, Plan), f"service {n} was refused"
        index.apply(plan)
    whole = index.plan(pod((1, None)))
    assert isinstance(whole, Plan), whole
    d = whole.devices[0]
    assert index.occupied_mask(d.gpu_uuid) == 0 and d.placement.start == 0


def test_kept_whole_a_whole_gpu_job_takes_a_used_node_s_empty_gpu_so_an_8_gpu_job_finds_a_node():
    """By default the job goes to the emptier model (a whole H100 costs the fleet least there), opens
    the only empty node, and the 8-GPU job is refused."""
    a100 = [
        gpu("A100-SXM4-40GB", "node-a", f"GPU-a{i}", i, [Placement(0, 8)] if i < 7 else []) for i in range(8)
    ]
    h100 = [gpu("H100-SXM5-80GB", "node-b", f"GPU-b{i}", i) for i in range(8)]
    assert PlacementIndex(a100 + h100).plan(pod((1, None))).node == "node-b"
    index = PlacementIndex(a100 + h100, keep_nodes_whole=True)
    one = index.plan(pod((1, None)))
    assert isinstance(one, Plan) and one.node == "node-a"
    index.apply(one)
    eight = index.plan(pod((8, None)))
    assert isinstance(eight, Plan) and eight.node == "node-b"


def test_kept_whole_a_small_pod_opens_an_empty_node_only_when_no_used_node_can_take_it():
    """A 1g service uses less of an A100 than of an RTX PRO 6000, but the A100s are an empty node."""
    empty = [gpu("A100-SXM4-40GB", "node-b", f"GPU-b{i}", i) for i in range(8)]
    full = [gpu("RTX-PRO-6000", "node-a", f"GPU-a{i}", i, [Placement(0, 12)]) for i in range(8)]
    assert PlacementIndex(full + empty, keep_nodes_whole=True).plan(pod((1, 4000))).node == "node-b"
    full[7] = gpu("RTX-PRO-6000", "node-a", "GPU-a7", 7)
    assert PlacementIndex(full + empty).plan(pod((1, 4000))).node == "node-b"
    kept = PlacementIndex(full + empty, keep_nodes_whole=True).plan(pod((1, 4000)))
    assert kept.devices[0].gpu_uuid == "GPU-a7"
