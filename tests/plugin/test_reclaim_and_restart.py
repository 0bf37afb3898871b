"""Reclaim and restart: destroy only what is provably unowned, adopt what NVML confirms, and never
mutate on a guess (API down, unreadable annotations, NVML errors, excluded GPUs)."""

from __future__ import annotations

import pytest

from mig.annotations import MIG_ALLOCATIONS
from mig.types import Placement
from plugin.config import DeviceFilter
from plugin.nvml import Nvml
from tests.plugin.conftest import RESOURCE, Want

A100 = {"gpus": [{"model": "A100-SXM4-40GB"}]}
TWO_A100 = {"gpus": [{"model": "A100-SXM4-40GB", "count": 2}]}


def leftover(gpu_index: int, profile: str, start: int, size: int) -> str:
    """An instance someone created before the plugin started (through NVML, as a driver tool would)."""
    nvml = Nvml()
    nvml.init()
    handle = nvml.devices()[gpu_index].handle
    info = next(p for p in nvml.gi_profiles(handle) if p.name == profile)
    gi = nvml.create_gi(handle, info.id, Placement(start, size))
    ci = nvml.create_ci(gi.handle, info.slice_count)
    return nvml.mig_uuid(handle, gi.gi_id, ci.ci_id) or ""


def test_a_restarted_plugin_adopts_a_running_workload_and_destroys_nothing(make_node):
    node = make_node(A100)
    node.start_plugin()
    node.add_pod("serve", [[Want(0, "3g.20gb", 4, 4)]])
    assert node.admit("serve").ok
    node.set_phase("serve", "Running")
    [r] = node.reservations("serve")
    node.sim.set_busy(node.uuids[0], pids=(777,), gi_id=r.gpuInstanceID, ci_id=r.computeInstanceID)
    before = node.instances(0)

    node.stop_plugin()
    app = node.start_plugin()

    assert node.instances(0) == before
    assert node.destroys() == []
    assert [p.pid for p in node.sim.gpu(0).processes] == [777]
    [adopted] = app.manager.managed()
    assert (adopted.mig_uuid, adopted.gi_id, adopted.ci_id) == (
        r.migUUID,
        r.gpuInstanceID,
        r.computeInstanceID,
    )
    assert app.report.unproven == []

    node.sim.clear_busy(node.uuids[0])
    node.set_phase("serve", "Succeeded")
    node.tick()
    assert node.instances(0) == []


def test_a_restarted_plugin_cleans_leftovers_only_on_idle_gpus(make_node):
    node = make_node(TWO_A100)
    leftover(0, "1g.5gb", 0, 1)
    leftover(1, "1g.5gb", 0, 1)
    node.add_pod("busy", [[Want(1, "2g.10gb", 4, 2)]], phase="Pending", lock=False)

    app = node.start_plugin()

    assert node.instances(0) == []
    assert [(p, s) for p, s, _, _ in node.instances(1)] == [("1g.5gb", 0)]
    assert app.report.busy == {node.uuids[1]: "active reservation"}
    assert any("1g.5gb at 0:1 has no owner" in line for line in app.report.unproven)
    assert app.metrics.value("dynmig_plugin_failures_total", op="startup", reason="unproven") >= 1


@pytest.mark.parametrize("how", ["uuid", "index"])
def test_an_excluded_gpu_is_never_touched_not_even_at_startup(make_node, how):
    node = make_node(TWO_A100)
    mig_uuid = leftover(1, "1g.5gb", 6, 1)
    leftover(0, "1g.5gb", 6, 1)
    excluded = (
        DeviceFilter(uuids=frozenset({node.uuids[1]}))
        if how == "uuid"
        else DeviceFilter(indexes=frozenset({1}))
    )

    app = node.start_plugin(excluded=excluded)

    assert node.instances(0) == []
    assert node.instances(1) == [("1g.5gb", 6, 1, mig_uuid)]
    assert [g.uuid for g in app.inventory.managed] == [node.uuids[0]]
    node.kubelet.wait_for_devices(RESOURCE, healthy=7)
    node.add_pod("sneaky", [[Want(1, "1g.5gb", 0, 1)]])
    result = node.admit("sneaky")
    assert not result.ok and "excluded-gpu" in result.error
    assert node.instances(1) == [("1g.5gb", 6, 1, mig_uuid)]


def test_an_unreadable_reservation_on_any_active_pod_skips_every_destroy_of_the_pass(make_node):
    node = make_node(A100)
    app = node.start_plugin()
    node.add_pod("done", [[Want(0, "1g.5gb", 0, 1)]])
    assert node.admit("done").ok
    node.set_phase("done", "Succeeded")
    node.add_pod(
        "garbled",
        [[Want(0, "1g.5gb", 2, 1)]],
        lock=False,
        allocations=f'[{{"containerIndex":0,"deviceIndex":0,"gpuUUID":"{node.uuids[0]}","profile":"1g.5gb",'
        '"placement":{"start":2,"size":1},"migUUID":"MIG-x"}]',
    )

    result = node.tick()

    assert result.skipped == "malformed-annotation"
    assert [s for _, s, _, _ in node.instances(0)] == [0]
    assert (
        app.metrics.value("dynmig_plugin_reconcile_destroys_skipped_total", reason="malformed-annotation")
        == 1
    )

    node.patch_annotations("garbled", {MIG_ALLOCATIONS: None})
    node.tick()
    assert node.instances(0) == []


@pytest.mark.parametrize("mode", ["refuse", "503"])
def test_while_the_api_is_unavailable_nothing_is_destroyed(make_node, mode):
    node = make_node(A100)
    app = node.start_plugin()
    node.add_pod("done", [[Want(0, "1g.5gb", 6, 1)]])
    assert node.admit("done").ok
    node.set_phase("done", "Succeeded")

    node.apiserver.down(mode)
    try:
        result = node.tick()
    finally:
        node.apiserver.up()

    assert result.skipped == "api-error"
    assert len(node.instances(0)) == 1
    assert app.metrics.value("dynmig_plugin_reconcile_destroys_skipped_total", reason="api-error") == 1
    node.tick()
    assert node.instances(0) == []


def test_when_the_api_is_down_at_startup_no_gpu_is_cleaned_until_it_is_back(make_node):
    node = make_node(A100)
    leftover(0, "1g.5gb", 3, 1)
    node.start_plugin()  # API up: registers, cleans
    assert node.instances(0) == []
    node.stop_plugin()
    leftover(0, "1g.5gb", 3, 1)

    node.apiserver.down()
    try:
        app = node.start_plugin()
        assert not app.report.complete
        assert len(node.instances(0)) == 1
        assert node.tick() is None
        assert len(node.instances(0)) == 1
    finally:
        node.apiserver.up()
    node.tick()
    assert node.instances(0) == []


def test_a_gpu_whose_processes_nvml_cannot_report_counts_as_busy_and_is_not_cleaned(make_node):
    node = make_node(A100)
    leftover(0, "1g.5gb", 1, 1)
    node.sim.inject_error("nvmlDeviceGetComputeRunningProcesses", code=999, times=5)

    app = node.start_plugin()

    assert len(node.instances(0)) == 1
    assert "NVML cannot tell" in app.report.busy[node.uuids[0]]


def test_a_gpu_with_a_running_process_is_not_cleaned(make_node):
    node = make_node(A100)
    leftover(0, "1g.5gb", 1, 1)
    gi_id = node.sim.gpu(0).gpu_instances[0].gi_id
    node.sim.set_busy(node.uuids[0], pids=(4242,), gi_id=gi_id)

    app = node.start_plugin()

    assert len(node.instances(0)) == 1
    assert app.report.busy[node.uuids[0]] == "running processes"


def test_a_pending_pod_with_only_a_logical_reservation_protects_and_then_gets_its_instance(make_node):
    node = make_node(A100)
    node.add_pod("waiting", [[Want(0, "2g.10gb", 0, 2)]])
    mig_uuid = leftover(0, "2g.10gb", 0, 2)  # created before a crash, identity never written

    app = node.start_plugin()

    assert node.instances(0) == [("2g.10gb", 0, 2, mig_uuid)]
    assert len(app.report.protected) == 1
    node.tick()
    assert node.instances(0) == [("2g.10gb", 0, 2, mig_uuid)]
    result = node.admit("waiting")
    assert result.ok
    assert result.containers[0].response.envs["NVIDIA_VISIBLE_DEVICES"] == mig_uuid
    assert app.metrics.value("dynmig_plugin_instance_creates_total") == 0


def test_a_running_pod_whose_recorded_identity_nvml_does_not_confirm_is_left_alone_and_reported(make_node):
    node = make_node(A100)
    node.start_plugin()
    node.add_pod("serve", [[Want(0, "1g.5gb", 5, 1)]])
    assert node.admit("serve").ok
    node.set_phase("serve", "Running")
    [r] = node.reservations("serve")
    node.patch_annotations(
        "serve",
        {
            MIG_ALLOCATIONS: node.annotations("serve")[MIG_ALLOCATIONS].replace(
                r.migUUID, "MIG-00000000-0000-5000-8000-000000000000"
            )
        },
    )
    node.stop_plugin()
    node.lose_journal()

    app = node.start_plugin()

    assert app.manager.managed() == []
    assert any("uuid-mismatch" in line for line in app.report.unproven)
    assert [s for _, s, _, _ in node.instances(0)] == [5]
    node.set_phase("serve", "Succeeded")
    node.tick()
    assert [s for _, s, _, _ in node.instances(0)] == [5]  # never ours to destroy


def test_a_deleted_pod_gives_its_instance_back(make_node):
    node = make_node(A100)
    node.start_plugin()
    node.add_pod("gone", [[Want(0, "1g.5gb", 4, 1)]])
    assert node.admit("gone").ok

    node.core.delete_namespaced_pod("gone", "default")
    node.tick()

    assert node.instances(0) == []


def test_after_a_kubelet_restart_the_plugin_registers_again_and_keeps_allocating(make_node):
    node = make_node(A100)
    node.start_plugin()
    node.kubelet.wait_for_devices(RESOURCE, healthy=7)

    node.kubelet.restart()

    node.kubelet.wait_for_registration(RESOURCE, count=2)
    node.kubelet.wait_for_devices(RESOURCE, healthy=7)
    node.add_pod("after", [[Want(0, "1g.5gb", 0, 1)]])
    assert node.admit("after").ok
    assert len(node.instances(0)) == 1
