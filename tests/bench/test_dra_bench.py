"""bench/dra.py: both arms replay the same trace through the simulated allocator, legally."""

from __future__ import annotations

import dra
import placement as packing


def test_each_claim_names_the_smallest_covering_profile_of_every_model():
    world = dra.World("natural", seed=1)
    expr = dra.claim_for((4000,), world.models, "p")["spec"]["devices"]["requests"][0]["exactly"]
    assert expr["count"] == 1
    assert expr["selectors"][0]["cel"]["expression"].endswith('profile in ["1g.10gb", "1g.24gb", "1g.5gb"]')
    whole = dra.claim_for((None,), world.models, "p")["spec"]["devices"]["requests"][0]["exactly"]
    assert '"7g.40gb"' in whole["selectors"][0]["cel"]["expression"]
    pair = dra.claim_for((18000, 18000), world.models, "p")["spec"]["devices"]["requests"]
    assert len(pair) == 1 and pair[0]["exactly"]["count"] == 2


def test_every_arm_replays_the_same_trace_and_places_only_legal_non_overlapping_instances():
    unit = packing.trace(120, 1.0, dra.TUNING[0], packing.MIX)
    rate = 3.0 / packing.offered_load(unit, packing.make_fleet(*dra.SMALL))  # overloaded: refusals happen
    arrivals = packing.trace(120, rate, dra.TUNING[0], packing.MIX)
    results = {arm: dra.replay(arm, arrivals, seed=5) for arm in dra.ARMS}  # overlaps would assert
    for r in results.values():
        assert 0 <= r["refused"] <= len(arrivals) and r["refused_work"] >= 0


def test_a_released_pods_devices_are_free_again_for_the_next_pod():
    world = dra.World("steered", seed=2)
    node, taken = world.place((None,), key=0)
    before = set(world.allocated)
    world.release(node, taken)
    assert before and not world.allocated
    assert all(not g.instances for g in world.gpus[node])


def test_with_dynmig_prioritize_small_pods_fill_one_node_instead_of_spreading():
    world = dra.World(dra.PRIORITIZED, seed=3)
    nodes = {world.place((4000,), key=k)[0] for k in range(6)}
    assert len(nodes) == 1  # the engine's least loss: next to the first pod, never a fresh GPU elsewhere


def test_the_burst_scenario_allocates_a_burst_from_one_publication_and_steered_packs_identical_claims():
    gpus = dra._burst_cases(1)[0][2]  # the first case: an A100-40GB node of two GPUs
    fresh = [dra.Gpu(g.minor, g.uuid, g.model, g.allowed) for g in gpus]  # the same node, empty
    steered = dra.BurstNode("steered", fresh, seed=1)
    got = steered.burst(["1g.5gb"] * 5)
    assert steered.generation == 1  # published once: the burst saw no republish
    assert got == {"refused": 0, "broken_with_room": 0, "whole_left": len(fresh) - 1}
    shuffled = [dra.BurstNode("natural", fresh, seed=s).burst(["1g.5gb"] * 5)["whole_left"] for s in range(8)]
    assert min(shuffled) < len(fresh) - 1  # NVIDIA's layout in a random slice order spreads a burst
