"""What a kill storm with the chart's defaults (pre-creation at bind, lock-free Allocate) exposed,
each race made deterministic through the GPU's lock (the instance manager's own) and the simulated
NVML's faults: a pre-create that waits in line for a pod that is gone meanwhile, a pre-create that
lands between an Allocate's reconcile pass and its create, and a create whose rollback failed."""

from __future__ import annotations

import threading

from kubernetes import client as k8s
from sim.nvml import codes

from plugin.journal import Journal
from tests.plugin.conftest import Want
from tests.waiting_testkit import wait_for

A100 = {"gpus": [{"model": "A100-SXM4-40GB"}]}


def delete_now(node, name: str) -> None:
    node.core.delete_namespaced_pod(name, "default", body=k8s.V1DeleteOptions(grace_period_seconds=0))


def creates_at(node, start: int) -> int:
    return sum(1 for e in node.sim.events() if e["op"] == "create_gi" and e.get("start") == start)


def test_a_pod_deleted_while_its_pre_create_waits_in_line_gets_no_instance(make_node):
    node = make_node(A100)
    app = node.start_plugin(precreate=True)
    uuid = node.uuids[0]
    with app.manager.gpu_lock(uuid):  # the GPU is busy: the pre-creator's creates wait in line
        node.add_pod("first", [[Want(0, "1g.5gb", 6, 1)]])
        wait_for(lambda: app.manager.gpu_queue(uuid) == 2, "the first pre-create to wait for the GPU")
        node.add_pod("gone", [[Want(0, "1g.5gb", 5, 1)]])
        wait_for(lambda: len(app.precreator._inflight) == 2, "its pre-create to queue behind the first")
        delete_now(node, "gone")
    app.precreator.wait()

    # the slices of a pod that is gone stay free: nothing the scheduler does not know about is made
    assert [i[:3] for i in node.instances(0)] == [("1g.5gb", 6, 1)]
    assert [e.key[2] for e in app.journal.entries()] == [6]
    assert [m.key.start for m in app.manager.managed()] == [6]


def test_allocate_clears_a_pre_create_for_a_gone_pod_that_landed_after_its_reconcile_pass(make_node):
    node = make_node(A100)
    app = node.start_plugin(precreate=True)
    uuid = node.uuids[0]
    result: list = []
    with app.manager.gpu_lock(uuid):
        node.add_pod("gone", [[Want(0, "2g.10gb", 0, 2)]])
        wait_for(lambda: app.manager.gpu_queue(uuid) == 2, "its pre-create to wait for the GPU")
        delete_now(node, "gone")  # the scheduler sees the slices free and binds another pod there
        node.add_pod("next", [[Want(0, "1g.5gb", 1, 1)]])
        admission = threading.Thread(target=lambda: result.append(node.admit("next")))
        admission.start()
        # Allocate's reconcile pass found nothing in the way; its create now waits behind the pre-create
        wait_for(lambda: app.manager.gpu_queue(uuid) == 3, "Allocate's create to wait for the GPU")
    admission.join(60)

    [admitted] = result
    assert admitted.ok, admitted.error  # never a failed admission because of dynmig's own instance
    [r] = node.reservations("next")
    assert [i[:4] for i in node.instances(0)] == [("1g.5gb", 1, 1, r.migUUID)]
    assert [m.owner.name for m in app.manager.managed()] == ["next"]


def test_a_gpu_instance_whose_rollback_failed_is_reclaimed_by_the_next_pass_without_a_restart(make_node):
    node = make_node(A100)
    app = node.start_plugin()
    node.add_pod("a", [[Want(0, "1g.5gb", 6, 1)]])
    node.sim.inject_error("nvmlGpuInstanceCreateComputeInstance", codes.UNKNOWN)
    node.sim.inject_error("nvmlGpuInstanceDestroy", codes.UNKNOWN)
    assert not node.admit("a").ok  # the create failed and so did the rollback of its GPU instance
    assert [i[:3] for i in node.instances(0)] == [("1g.5gb", 6, 1)]
    delete_now(node, "a")

    node.tick()

    assert node.instances(0) == []  # not left holding slices until the plugin happens to restart
    assert app.journal.entries() == []
    node.add_pod("b", [[Want(0, "1g.5gb", 6, 1)]])
    admitted = node.admit("b")
    assert admitted.ok, admitted.error


def test_a_second_plugin_process_on_the_node_waits_until_the_first_has_exited(make_node):
    node = make_node(A100)
    app = node.start_plugin()
    second = Journal(node.plugin_dir / "state")  # the journal of a second process on the node

    assert not second.hold(block=False)  # it would wait: one writer of the journal and the GPUs

    node.stop_plugin()
    assert second.hold(block=False)
    second.release()
    assert app.journal.path == second.path
