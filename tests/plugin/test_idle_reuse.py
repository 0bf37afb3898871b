"""Idle reuse: an ended pod's instance stays idle (journaled, published, free for the scheduler) and
serves only a reservation at exactly its GPU, profile and placement, by default only in the same
namespace, never while a process runs on it; it goes when its slices are needed otherwise, when its
TTL is over, and survives a plugin restart on the journal's proof."""

from __future__ import annotations

import json
from dataclasses import replace

from kubernetes import client as k8s

from mig.annotations import LEFTOVERS
from mig.idle import IDLE, decode_idle
from tests.plugin.conftest import RESOURCE, Want

A100 = {"gpus": [{"model": "A100-SXM4-40GB"}]}
REUSE = {"idle_ttl": 300.0, "idle_per_gpu": 2}


def creates(node) -> int:
    return sum(1 for e in node.sim.events() if e["op"] == "create_gi")


ONE_G = Want(0, "1g.5gb", 0, 1)


def ended_pod_leaves_an_idle_instance(node, name: str = "a", want: Want = ONE_G) -> str:
    node.add_pod(name, [[want]])
    assert node.admit(name).ok
    [r] = node.reservations(name)
    node.set_phase(name, "Succeeded")
    node.tick()
    return r.migUUID or ""


def test_an_ended_pods_instance_stays_idle_and_serves_the_next_exact_match_without_a_create(make_node):
    node = make_node(A100)
    app = node.start_plugin(**REUSE)
    mig = ended_pod_leaves_an_idle_instance(node)

    [idle] = app.manager.managed()
    assert idle.idle and node.instances(0)[0][3] == mig
    published = decode_idle(node.node_annotations().get(IDLE))
    assert [(x.profile, x.placement.start) for x in published] == [("1g.5gb", 0)]
    assert LEFTOVERS not in node.node_annotations()  # free for the scheduler, not a leftover
    assert app.metrics.value("dynmig_plugin_idle_instances") == 1
    entry = app.journal.entries()[0]
    assert entry.idleSince is not None

    before = creates(node)
    node.add_pod("b", [[Want(0, "1g.5gb", 0, 1)]])
    assert node.admit("b").ok
    [r] = node.reservations("b")
    assert creates(node) == before  # no create
    assert r.migUUID == mig
    assert app.metrics.value("dynmig_plugin_idle_reuse_hits_total") == 1
    [owned] = app.manager.managed()
    assert not owned.idle and owned.owner.name == "b"
    assert app.journal.entries()[0].name == "b" and app.journal.entries()[0].idleSince is None


def test_an_idle_instance_is_never_handed_to_another_namespace_by_default(make_node):
    node = make_node(A100)
    k8s.CoreV1Api(node.apiserver.api_client("admin")).create_namespace({"metadata": {"name": "other"}})
    app = node.start_plugin(**REUSE)
    mig = ended_pod_leaves_an_idle_instance(node)

    node.add_pod("b", [[Want(0, "1g.5gb", 0, 1)]], namespace="other")
    assert node.admit("b", "other").ok
    [r] = node.reservations("b", "other")
    assert r.migUUID != mig  # destroyed and created anew
    assert app.metrics.value("dynmig_plugin_idle_reuse_misses_total", reason="other-namespace") == 1
    assert any(e["op"] == "destroy_gi" for e in node.destroys())


def test_any_scope_hands_it_across_namespaces(make_node):
    node = make_node(A100)
    k8s.CoreV1Api(node.apiserver.api_client("admin")).create_namespace({"metadata": {"name": "other"}})
    node.start_plugin(**REUSE, idle_scope="any")
    mig = ended_pod_leaves_an_idle_instance(node)
    node.add_pod("b", [[Want(0, "1g.5gb", 0, 1)]], namespace="other")
    assert node.admit("b", "other").ok
    assert node.reservations("b", "other")[0].migUUID == mig


def test_an_idle_instance_a_process_runs_on_is_never_handed_over(make_node):
    """A process on an idle instance ends its idleness (reclaimed, published as a leftover); once it
    is gone the instance may be idle again."""
    node = make_node(A100)
    app = node.start_plugin(**REUSE)
    ended_pod_leaves_an_idle_instance(node)
    [idle] = app.manager.managed()
    node.sim.set_busy(node.uuids[0], pids=(4711,), gi_id=idle.gi_id, ci_id=idle.ci_id)

    node.add_pod("b", [[Want(0, "1g.5gb", 0, 1)]])
    result = node.admit("b")
    # Allocate's own pass sees the process: the instance is no longer idle, so it is refused
    assert not result.ok and "owned-by-another-pod" in result.error
    assert node.reservations("b")[0].migUUID is None
    assert app.manager.idle_instances() == []
    assert LEFTOVERS in node.node_annotations() or node.tick() is not None
    node.set_phase("b", "Failed")
    node.sim.clear_busy(node.uuids[0])
    app.reconciler.backoff.retries.clear()  # the failed destroys' back-off is over
    node.tick()
    [again] = app.manager.managed()  # process-free once more: idle again, still the last user's
    assert again.idle and again.owner.name == "a"


def test_a_process_on_the_ended_pods_instance_keeps_it_from_going_idle(make_node):
    node = make_node(A100)
    app = node.start_plugin(**REUSE)
    node.add_pod("a", [[Want(0, "1g.5gb", 0, 1)]])
    assert node.admit("a").ok
    [r] = node.reservations("a")
    node.sim.set_busy(node.uuids[0], pids=(99,), gi_id=r.gpuInstanceID, ci_id=r.computeInstanceID)
    node.set_phase("a", "Succeeded")
    node.tick()
    assert app.manager.idle_instances() == []


def test_a_terminating_pods_instance_waits_for_the_pod_to_end_and_then_stays_idle(make_node):
    node = make_node(A100)
    app = node.start_plugin(**REUSE)
    node.add_pod("a", [[Want(0, "1g.5gb", 0, 1)]])
    assert node.admit("a").ok
    [r] = node.reservations("a")
    node.set_phase("a", "Running")
    node.core.delete_namespaced_pod("a", "default", grace_period_seconds=30)  # containers may still run
    node.tick()
    assert app.manager.idle_instances() == []  # never handed over while its containers may run
    assert [i[3] for i in node.instances(0)] == [r.migUUID]  # nor destroyed: a graceful delete keeps reuse
    assert IDLE not in node.node_annotations() or not decode_idle(node.node_annotations()[IDLE])

    node.set_phase("a", "Succeeded")  # its containers stopped
    node.tick()
    [idle] = app.manager.idle_instances()
    assert idle.mig_uuid == r.migUUID


def test_with_reuse_off_a_terminating_pods_instance_is_reclaimed_as_before(make_node):
    node = make_node(A100)
    node.start_plugin()
    node.add_pod("a", [[Want(0, "1g.5gb", 0, 1)]])
    assert node.admit("a").ok
    node.set_phase("a", "Running")
    node.core.delete_namespaced_pod("a", "default", grace_period_seconds=30)
    node.tick()
    assert node.instances(0) == []  # no process ran on it


def test_an_idle_instance_is_destroyed_when_its_slices_are_needed_for_another_profile(make_node):
    node = make_node(A100)
    app = node.start_plugin(**REUSE)
    ended_pod_leaves_an_idle_instance(node)

    node.add_pod("wide", [[Want(0, "2g.10gb", 0, 2)]])
    assert node.admit("wide").ok
    assert [(p, s, z) for p, s, z, _ in node.instances(0)] == [("2g.10gb", 0, 2)]
    assert app.metrics.value("dynmig_plugin_instance_destroys_total", cause="idle-evicted") == 1
    assert app.metrics.value("dynmig_plugin_idle_reuse_misses_total", reason="other-placement") == 1
    assert app.manager.idle_instances() == []


def test_an_idle_instance_goes_when_its_ttl_is_over(make_node):
    node = make_node(A100)
    app = node.start_plugin(**REUSE)
    now = [1_900_000_000.0]
    app.reconciler.idle = replace(app.reconciler.idle, clock=lambda: now[0])
    ended_pod_leaves_an_idle_instance(node)
    assert len(app.manager.idle_instances()) == 1
    now[0] += 299
    node.tick()
    assert len(app.manager.idle_instances()) == 1
    now[0] += 2
    node.tick()
    assert app.manager.managed() == [] and node.instances(0) == []
    assert IDLE not in node.node_annotations()
    assert app.metrics.value("dynmig_plugin_instance_destroys_total", cause="idle-expired") == 1


def test_no_more_than_the_per_gpu_cap_stay_idle(make_node):
    node = make_node(A100)
    app = node.start_plugin(idle_ttl=300.0, idle_per_gpu=1)
    for i, start in enumerate((0, 1)):
        node.add_pod(f"p{i}", [[Want(0, "1g.5gb", start, 1)]])
        assert node.admit(f"p{i}").ok
        node.set_phase(f"p{i}", "Succeeded")
    node.tick()
    assert len(app.manager.idle_instances()) == 1
    assert len(node.instances(0)) == 1


def test_reuse_off_destroys_as_before(make_node):
    node = make_node(A100)
    app = node.start_plugin()
    ended_pod_leaves_an_idle_instance(node)
    assert app.manager.managed() == [] and node.instances(0) == []
    assert IDLE not in node.node_annotations()


def test_an_idle_instance_survives_a_plugin_restart_on_the_journals_proof(make_node):
    node = make_node(A100)
    node.start_plugin(**REUSE)
    mig = ended_pod_leaves_an_idle_instance(node)
    # a pending pod keeps the GPU busy, so startup does not clean it
    node.add_pod("b", [[Want(0, "1g.5gb", 0, 1)]])
    node.stop_plugin()
    app = node.start_plugin(**REUSE)
    [idle] = app.manager.managed()
    assert idle.idle
    assert node.admit("b").ok
    assert node.reservations("b")[0].migUUID == mig
    assert json.loads(node.journal_path.read_text())["entries"][0]["name"] == "b"


def test_the_resource_name_is_unchanged(make_node):
    """Reuse changes no wire: kubelet still sees the same replicas."""
    node = make_node(A100)
    node.start_plugin(**REUSE)
    assert node.kubelet.resource(RESOURCE).healthy > 0


def test_the_hand_over_itself_refuses_a_busy_instance(make_node):
    """The last check, under the GPU lock at the hand-over: a process that appeared after the pass."""
    node = make_node(A100)
    app = node.start_plugin(**REUSE)
    ended_pod_leaves_an_idle_instance(node)
    [idle] = app.manager.managed()
    app.reconciler.idle = replace(app.reconciler.idle, ttl=300.0)
    real = app.reconciler._busy
    app.reconciler._busy = lambda instance: False  # the pass misses it (the process came later)
    node.sim.set_busy(node.uuids[0], pids=(4711,), gi_id=idle.gi_id, ci_id=idle.ci_id)
    node.add_pod("b", [[Want(0, "1g.5gb", 0, 1)]])
    result = node.admit("b")
    app.reconciler._busy = real
    assert not result.ok and "instance-busy" in result.error
    assert node.reservations("b")[0].migUUID is None
    assert app.metrics.value("dynmig_plugin_busy_handovers_refused_total") == 1
