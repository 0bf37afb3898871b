"""Allocate through the simulated kubelet: instances created at exactly the reserved placement,
kubelet answered per strategy, runtime identity written back, bind-phase and node lock handled."""

from __future__ import annotations

import pytest

from mig.annotations import BIND_PHASE, DEVICES_TO_ALLOCATE, MIG_ALLOCATIONS, NODE_LOCK, decode_devices
from tests.plugin.conftest import RESOURCE, Want

A100 = {"gpus": [{"model": "A100-SXM4-40GB"}]}


def test_one_1g_is_created_at_its_placement_answered_recorded_and_destroyed_when_the_pod_ends(make_node):
    node = make_node(A100)
    node.start_plugin()
    node.add_pod("train", [[Want(0, "1g.5gb", 6, 1)]])

    result = node.admit("train")

    assert result.ok, result.error
    [(profile, start, size, mig_uuid)] = node.instances(0)
    assert (profile, start, size) == ("1g.5gb", 6, 1)
    assert result.containers[0].response.envs["NVIDIA_VISIBLE_DEVICES"] == mig_uuid
    [reservation] = node.reservations("train")
    gi = node.sim.gpu(0).gpu_instances[0]
    assert (reservation.migUUID, reservation.gpuInstanceID, reservation.computeInstanceID) == (
        mig_uuid,
        gi.gi_id,
        gi.compute_instances[0].ci_id,
    )
    annotations = node.annotations("train")
    assert annotations[BIND_PHASE] == "success"
    assert not any(decode_devices(annotations[DEVICES_TO_ALLOCATE]))
    assert annotations[DEVICES_TO_ALLOCATE] == ";;"  # drained as HAMi's device plugin leaves it
    assert NODE_LOCK not in node.node_annotations()

    node.set_phase("train", "Succeeded")
    node.tick()

    assert node.instances(0) == []
    assert node.app.metrics.value("dynmig_plugin_instance_destroys_total", cause="reclaim") == 1


def test_several_non_overlapping_1g_instances_share_one_gpu(make_node):
    node = make_node(A100)
    node.start_plugin()
    for i, start in enumerate([0, 2, 4, 6]):
        node.add_pod(f"p{i}", [[Want(0, "1g.5gb", start, 1)]])
        assert node.admit(f"p{i}").ok

    created = node.instances(0)
    assert [(p, s) for p, s, _, _ in created] == [("1g.5gb", 0), ("1g.5gb", 2), ("1g.5gb", 4), ("1g.5gb", 6)]
    assert len({u for *_, u in created}) == 4
    assert [r.migUUID for i in range(4) for r in node.reservations(f"p{i}")] == [u for *_, u in created]


MIXED = [
    ("A100-SXM4-40GB", [Want(0, "3g.20gb", 0, 4), Want(0, "2g.10gb", 4, 2), Want(0, "1g.5gb", 6, 1)]),
    ("H100 80GB HBM3", [Want(0, "3g.40gb", 4, 4), Want(0, "2g.20gb", 0, 2), Want(0, "1g.10gb", 2, 1)]),
    (
        "RTX PRO 6000 Blackwell Server Edition",
        [Want(0, "2g.48gb", 0, 6), Want(0, "1g.24gb", 6, 3), Want(0, "1g.24gb", 9, 3)],
    ),
]


@pytest.mark.parametrize("shuffle", [None, 11], ids=["heap-gi-ids", "shuffled-gi-ids"])
@pytest.mark.parametrize(("model", "wants"), MIXED, ids=[m for m, _ in MIXED])
def test_mixed_profiles_on_one_gpu_land_exactly_where_reserved_whatever_the_gi_ids(
    make_node, model, wants, shuffle
):
    node = make_node({"gpus": [{"model": model}]}, shuffle_gi_ids=shuffle)
    node.start_plugin()
    for i, want in enumerate(wants):
        node.add_pod(f"p{i}", [[want]])
        assert node.admit(f"p{i}").ok

    on_gpu = {(p, s, z): u for p, s, z, u in node.instances(0)}
    assert set(on_gpu) == {(w.profile, w.start, w.size) for w in wants}
    for i, want in enumerate(wants):
        [r] = node.reservations(f"p{i}")
        assert r.migUUID == on_gpu[(want.profile, want.start, want.size)]
        gi = next(g for g in node.sim.gpu(0).gpu_instances if g.placement.start == want.start)
        assert r.gpuInstanceID == gi.gi_id

    node.set_phase("p1", "Failed")
    node.tick()
    left = {(p, s) for p, s, _, _ in node.instances(0)}
    assert left == {(wants[0].profile, wants[0].start), (wants[2].profile, wants[2].start)}


def test_a_freed_placement_is_reused_by_the_next_pod(make_node):
    node = make_node(A100)
    node.start_plugin()
    node.add_pod("first", [[Want(0, "2g.10gb", 2, 2)]])
    assert node.admit("first").ok
    first_uuid = node.reservations("first")[0].migUUID
    node.set_phase("first", "Succeeded")
    node.tick()
    assert node.instances(0) == []

    node.add_pod("second", [[Want(0, "2g.10gb", 2, 2)]])
    assert node.admit("second").ok

    [(profile, start, _, mig_uuid)] = node.instances(0)
    assert (profile, start) == ("2g.10gb", 2)
    assert node.reservations("second")[0].migUUID == mig_uuid
    assert first_uuid is not None


def test_a_two_device_allocate_whose_second_create_fails_rolls_back_only_its_own_first_instance(make_node):
    node = make_node(A100)
    node.start_plugin()
    node.add_pod("older", [[Want(0, "1g.5gb", 0, 1)]])
    assert node.admit("older").ok
    older = node.instances(0)
    node.add_pod("pair", [[Want(0, "1g.5gb", 4, 1), Want(0, "1g.5gb", 5, 1)]])
    node.sim.fail_nth_create(2, kind="gi")

    result = node.admit("pair")

    assert not result.ok
    assert "create-gi" in result.error
    assert node.instances(0) == older
    assert node.annotations("pair")[BIND_PHASE] == "failed"
    assert all(r.migUUID is None for r in node.reservations("pair"))
    assert NODE_LOCK not in node.node_annotations()


def test_a_conflict_on_the_runtime_identity_patch_is_re_read_and_retried(make_node):
    node = make_node(A100)
    node.start_plugin()
    node.add_pod("p", [[Want(0, "1g.5gb", 3, 1)]])
    node.apiserver.faults.fail_next(1, verb="patch", resource="pods", code=409)

    result = node.admit("p")

    assert result.ok, result.error
    [(_, _, _, mig_uuid)] = node.instances(0)
    assert node.reservations("p")[0].migUUID == mig_uuid
    assert node.annotations("p")[BIND_PHASE] == "success"


@pytest.mark.parametrize("strategy", ["envvar", "cdi-cri", "cdi-annotations"])
def test_kubelet_gets_the_mig_devices_in_the_form_the_device_list_strategy_names(make_node, strategy):
    node = make_node(A100)
    node.start_plugin(strategy=strategy)
    node.add_pod("two", [[Want(0, "1g.5gb", 0, 1), Want(0, "3g.20gb", 4, 4)]])

    response = node.admit("two").containers[0].response

    uuids = [r.migUUID for r in node.reservations("two")]
    names = [f"nvidia.com/gpu={u}" for u in uuids]
    if strategy == "envvar":
        assert response.envs["NVIDIA_VISIBLE_DEVICES"] == ",".join(uuids)
    elif strategy == "cdi-cri":
        assert [d.name for d in response.cdi_devices] == names
    else:
        assert list(response.annotations.values()) == [",".join(names)]


def test_kubelet_is_steered_to_replicas_of_the_reserved_gpu(make_node):
    node = make_node({"gpus": [{"model": "A100-SXM4-40GB", "count": 2}]})
    node.start_plugin()
    node.kubelet.wait_for_devices(RESOURCE, healthy=14)
    node.add_pod("p", [[Want(1, "1g.5gb", 0, 1)]])

    result = node.admit("p")

    assert result.ok
    assert all(d.startswith(node.uuids[1]) for d in result.containers[0].devices)
    assert node.instances(1) and not node.instances(0)


def test_init_and_app_containers_are_realized_in_order_and_bind_phase_succeeds_after_the_last(make_node):
    node = make_node(A100)
    node.start_plugin()
    node.add_pod("multi", [[Want(0, "1g.5gb", 0, 1)], [Want(0, "2g.10gb", 2, 2)]])

    result = node.admit("multi")

    assert result.ok, result.error
    by_start = {s: u for _, s, _, u in node.instances(0)}
    assert [c.response.envs["NVIDIA_VISIBLE_DEVICES"] for c in result.containers] == [
        by_start[0],
        by_start[2],
    ]
    assert node.annotations("multi")[BIND_PHASE] == "success"


def test_a_pod_without_its_reservation_annotation_fails_allocate_and_nothing_is_created(make_node):
    node = make_node(A100)
    node.start_plugin()
    node.add_pod("bare", [[Want(0, "1g.5gb", 0, 1)]], allocations="")

    result = node.admit("bare")

    assert not result.ok
    assert "reservation-mismatch" in result.error
    assert node.instances(0) == []
    assert node.annotations("bare")[BIND_PHASE] == "failed"


def test_a_placement_that_is_not_legal_for_the_profile_is_refused_not_moved(make_node):
    node = make_node(A100)
    node.start_plugin()
    node.add_pod("odd", [[Want(0, "2g.10gb", 1, 2)]])

    result = node.admit("odd")

    assert not result.ok
    assert "invalid-placement" in result.error
    assert node.instances(0) == []


def test_the_node_registration_is_hami_format_and_written_only_when_it_changes(make_node):
    node = make_node({"gpus": [{"model": "A100-SXM4-40GB"}, {"model": "RTX PRO 6000"}]})
    app = node.start_plugin()

    import json

    published = json.loads(node.node_annotations()["hami.io/node-nvidia-register"])
    assert [d["id"] for d in published] == node.uuids
    rtx = published[1]
    assert rtx["count"] == 4 and rtx["mode"] == "mig" and rtx["devcore"] == 100
    assert [(p["name"], p["memoryMB"], p["core"]) for p in rtx["migProfiles"]] == [
        ("1g.24gb", 24192, 25),
        ("2g.48gb", 48512, 50),
        ("4g.96gb", 97408, 100),
    ]
    assert "instanceCount" not in rtx["migProfiles"][0]
    node.tick()
    node.tick()
    assert app.metrics.value("dynmig_plugin_node_register_publishes_total") == 1
    assert MIG_ALLOCATIONS  # the pod-side key stays HAMi's


def test_the_node_lock_is_released_only_by_the_pod_that_holds_it(make_node):
    node = make_node(A100)
    app = node.start_plugin()
    node.add_pod("p", [[Want(0, "1g.5gb", 1, 1)]], lock=False)
    node.core.patch_node(
        "gpu-node-1", {"metadata": {"annotations": {NODE_LOCK: "2026-01-01T00:00:00Z,default,other"}}}
    )

    assert node.admit("p").ok

    assert node.node_annotations()[NODE_LOCK].endswith(",default,other")
    assert node.annotations("p")[BIND_PHASE] == "success"
    assert app.metrics.value("dynmig_plugin_allocate_seconds_count", result="success") == 1
