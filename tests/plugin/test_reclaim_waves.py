"""A wave of pods ending together: one reclaim pass frees every GPU's slices at once, not GPU after
GPU, so the last GPU in the node's order does not wait for every other GPU's destroys."""

from __future__ import annotations

from tests.plugin.conftest import Want

FOUR_A100 = {"gpus": [{"model": "A100-SXM4-40GB", "count": 4}]}
PER_GPU = 3  # 1g.5gb instances per GPU: the first GPU's destroys take 3 x (CI + GI) seconds in series


def ended_wave(node):
    """Three 1g.5gb pods on each GPU, admitted (their instances created), then all Succeeded."""
    names = []
    for gpu in range(4):
        for slot in range(PER_GPU):
            name = f"wave-{gpu}-{slot}"
            node.add_pod(name, [[Want(gpu, "1g.5gb", slot, 1)]])
            assert node.admit(name).ok
            names.append(name)
    for name in names:
        node.set_phase(name, "Succeeded")
    return names


def test_a_pass_destroys_an_ended_waves_instances_on_every_gpu_at_once(make_node):
    node = make_node(FOUR_A100)
    node.start_plugin()
    ended_wave(node)
    # the driver's timing from here: each CI destroy 0.2 s and GI destroy 0.8 s, each GPU's calls in
    # series (drivers/ampere.yaml); a call lands in NVML's log when it starts
    node.sim.set_timing("driver")
    done_before = len(node.destroys())

    result = node.tick()

    destroys = [e for e in node.destroys()[done_before:] if e["op"] == "destroy_gi"]
    assert len(destroys) == 4 * PER_GPU
    assert len(result.destroyed) == 4 * PER_GPU
    assert all(node.instances(gpu) == [] for gpu in range(4))
    order = sorted(node.uuids)
    first, others = order[0], set(order[1:])
    last_on_first = max(i for i, e in enumerate(destroys) if e["gpu"] == first)
    # in series, every other GPU's destroys would come after the first GPU's last one
    started_meanwhile = {e["gpu"] for e in destroys[:last_on_first]} & others
    assert started_meanwhile == others


def test_the_pass_reports_every_gpus_outcome_in_the_nodes_order(make_node):
    node = make_node(FOUR_A100)
    node.start_plugin()
    ended_wave(node)
    [busy] = [r for r in node.reservations("wave-2-1")]
    node.sim.set_busy(node.uuids[2], pids=(4242,), gi_id=busy.gpuInstanceID, ci_id=busy.computeInstanceID)

    result = node.tick()

    assert [k.gpu_uuid for k, _ in result.failed] == [node.uuids[2]]
    assert result.failed[0][1] == "in-use"
    assert len(result.destroyed) == 4 * PER_GPU - 1
    assert [k.gpu_uuid for k in result.destroyed] == sorted(k.gpu_uuid for k in result.destroyed)
    assert [(p, s) for p, s, _, _ in node.instances(2)] == [("1g.5gb", 1)]
