"""The demand estimate the engine prices placements by: rates and lifetimes over a bounded window,
following a change of mix, and a price per free slot that makes the last empty GPU dear when
whole-GPU jobs are asked for."""

from __future__ import annotations

import pytest

from mig.placement.demand import DemandEstimate, risk_weights


def test_the_mix_is_arrival_rate_times_mean_lifetime_per_ask():
    d = DemandEstimate()
    for i in range(11):
        d.arrived("", [4000], float(i))  # one a minute
    for _ in range(3):
        d.ended("", [4000], 30.0)
    ((ask, work),) = d.mix("")
    assert ask == 4000 and abs(work - 11 / 10 * 30.0) < 1e-9


def test_the_estimate_follows_a_change_of_mix_within_one_window():
    d = DemandEstimate(window=50)
    for i in range(200):
        d.arrived("", [4000], float(i))
    for i in range(200, 260):
        d.arrived("", [None], float(i))
    assert [ask for ask, _ in d.mix("")] == [None]
    assert len(d._arrivals[""]) == 50  # bounded


def test_pools_are_estimated_apart_and_an_unseen_pool_has_no_estimate():
    d = DemandEstimate()
    for i in range(5):
        d.arrived("a", [4000], float(i))
    assert d.mix("b") == ()
    assert [ask for ask, _ in d.mix("a")] == [4000]


def test_the_last_free_slot_of_an_asked_profile_costs_more_than_one_of_many():
    names = ("1g.5gb", "7g.40gb")
    last = risk_weights(names, (0.0, 1.0), {"7g.40gb": 1})
    many = risk_weights(names, (0.0, 1.0), {"7g.40gb": 20})
    assert last[1] > many[1] > 0 and last[0] == many[0] == 0


def _one_a_minute_with_lives(lifetime: str, lives: list[float]) -> float:
    d = DemandEstimate(lifetime=lifetime)
    for i in range(11):
        d.arrived("", [4000], float(i))
    for life in lives:
        d.ended("", [4000], life)
    ((_, work),) = d.mix("")
    return work / (11 / 10)  # the lifetime the estimate used


def test_one_pod_that_lived_for_weeks_moves_the_mean_but_not_the_median_or_the_trimmed_mean():
    lives = [9.0] * 19 + [40_000.0]  # a heavy tail: nineteen 9-minute pods and one of four weeks
    assert _one_a_minute_with_lives("mean", lives) > 2000
    assert _one_a_minute_with_lives("median", lives) == 9.0
    assert _one_a_minute_with_lives("trimmed", lives) == 9.0


def test_the_decayed_estimate_follows_the_lifetimes_that_ended_last():
    lives = [300.0] * 500 + [10.0] * 500  # the long-lived pods ended first
    assert _one_a_minute_with_lives("decayed", lives) < 15.0
    assert _one_a_minute_with_lives("mean", lives) == 155.0


def test_an_unknown_lifetime_estimate_is_named_with_the_ones_there_are():
    with pytest.raises(ValueError, match="'mode' is not one of mean, trimmed, median, decayed"):
        DemandEstimate(lifetime="mode")


def _a100_node(node: str, full: int, one_g: int, empty: int):
    """A node of A100-40GBs: `full` GPUs holding a 7g, `one_g` holding one 1g, `empty` holding nothing."""
    from base.policyfiles import default_allowlist
    from mig.catalog import find_model
    from mig.placement import GpuState
    from mig.placement.published import from_catalog

    model = find_model("A100-SXM4-40GB")
    profiles = from_catalog(model, default_allowlist().profiles_for(model.nvml_name))
    seven = next(p for p in profiles if p.name.startswith("7g")).placements[0]
    one = next(p for p in profiles if p.name.startswith("1g.5gb")).placements[0]
    held = [(seven,)] * full + [(one,)] * one_g + [()] * empty
    return [
        GpuState(node, f"GPU-{node}-{i}", model.nvml_name, profiles, h, True, i, model.memory_mib)
        for i, h in enumerate(held)
    ]


def test_while_4_gpu_jobs_arrive_a_whole_gpu_job_leaves_a_node_room_for_one():
    from mig.placement import ContainerRequest, PlacementIndex, PodRequest
    from mig.placement.reference import reference_plan

    # node-a: half full, 4 empty GPUs (the room of one 4-GPU job); node-b: 5 empty GPUs and three
    # lightly used ones. Node binpack alone takes node-a (fuller) and leaves no node with 4 empty GPUs.
    fleet = _a100_node("node-a", 4, 0, 4) + _a100_node("node-b", 0, 3, 5)
    d = DemandEstimate()
    for i in range(40):
        d.arrived("", [None, None, None, None] if i % 4 == 0 else [4000], float(i))
    index = PlacementIndex(fleet)
    index.set_demand(d.mix(), d.node_mix())
    whole = PodRequest.from_annotations([ContainerRequest(1, None)], {})
    plan = index.plan(whole)
    assert plan.node == "node-b"
    assert plan == reference_plan(whole, fleet, mix=d.mix(), node_mix=d.node_mix())


def test_the_node_mix_counts_pods_of_n_whole_gpus_as_n_times_their_work():
    d = DemandEstimate()
    for i in range(11):
        d.arrived("", [None] * 8 if i == 5 else [4000], float(i))
    d.ended("", [None] * 8, 60.0)
    assert d.node_mix() == ((8, 8 * 1 / 10 * 60.0),)
