"""Creation as soon as the node knows: a bound pod's reserved instances are created before kubelet's
Allocate, for that pod only; Allocate hands them over with no second create; one whose pod goes or
comes back under a new UID is destroyed, never parked or handed to another pod."""

from __future__ import annotations

from kubernetes import client as k8s

from tests.plugin.conftest import Want

A100x2 = {"gpus": [{"model": "A100-SXM4-40GB"}, {"model": "A100-SXM4-40GB"}]}


def creates(node) -> int:
    return sum(1 for e in node.sim.events() if e["op"] == "create_gi")


def precreate(app) -> None:
    app.precreator.scan()
    app.precreator.wait()


def test_a_bound_pods_instances_are_created_before_admission_and_allocate_hands_them_over_without_a_create(
    make_node,
):
    node = make_node(A100x2)
    app = node.start_plugin(precreate=True)
    node.add_pod("a", [[Want(0, "1g.5gb", 6, 1)], [Want(1, "2g.10gb", 0, 2)]])
    precreate(app)

    assert [i[:3] for i in node.instances(0)] == [("1g.5gb", 6, 1)]
    assert [i[:3] for i in node.instances(1)] == [("2g.10gb", 0, 2)]
    assert creates(node) == 2
    assert all(not m.delivered and m.owner.name == "a" for m in app.manager.managed())
    assert len(app.journal.entries()) == 2  # journaled like every create
    assert app.metrics.value("dynmig_plugin_instance_precreates_total") == 2

    result = node.admit("a")
    assert result.ok, result.error
    assert creates(node) == 2  # Allocate waited for nothing: no second create
    first, second = node.reservations("a")
    assert (
        result.containers[0].response.envs["NVIDIA_VISIBLE_DEVICES"]
        == first.migUUID
        == node.instances(0)[0][3]
    )
    assert (
        result.containers[1].response.envs["NVIDIA_VISIBLE_DEVICES"]
        == second.migUUID
        == node.instances(1)[0][3]
    )
    assert all(m.delivered for m in app.manager.managed())


def test_a_pod_already_realized_or_not_allocating_gets_no_precreate(make_node):
    node = make_node(A100x2)
    app = node.start_plugin(precreate=True)
    node.add_pod("failed", [[Want(0, "1g.5gb", 6, 1)]])
    node.patch_annotations("failed", {"hami.io/bind-phase": "failed"})
    node.add_pod("running", [[Want(1, "1g.5gb", 6, 1)]], phase="Running")
    precreate(app)
    assert creates(node) == 0


def test_a_precreated_instance_whose_pod_is_deleted_before_admission_is_destroyed_even_with_reuse_on(
    make_node,
):
    node = make_node(A100x2)
    app = node.start_plugin(precreate=True, idle_ttl=300.0, idle_per_gpu=2)
    node.add_pod("a", [[Want(0, "1g.5gb", 6, 1)]])
    precreate(app)
    assert len(node.instances(0)) == 1

    node.core.delete_namespaced_pod("a", "default", body=k8s.V1DeleteOptions(grace_period_seconds=0))
    node.tick()

    assert node.instances(0) == []  # destroyed, not parked as idle for someone else
    assert app.manager.managed() == []
    assert app.journal.entries() == []
    assert app.metrics.value("dynmig_plugin_idle_instances") == 0


def test_a_pod_created_again_under_the_same_name_never_gets_the_old_pods_precreated_instance(make_node):
    node = make_node(A100x2)
    app = node.start_plugin(precreate=True, idle_ttl=300.0, idle_per_gpu=2)
    old = node.add_pod("a", [[Want(0, "1g.5gb", 6, 1)]])
    precreate(app)
    [before] = app.manager.managed()
    assert before.owner.pod_uid == old["uid"]
    old_gi = node.sim.gpu(0).gpu_instances[0].gi_id

    node.core.delete_namespaced_pod("a", "default", body=k8s.V1DeleteOptions(grace_period_seconds=0))
    new = node.add_pod("a", [[Want(0, "1g.5gb", 6, 1)]])  # same name and placement, a new UID
    precreate(app)  # the old UID's instance is in the way: refused, not handed over
    [still] = app.manager.managed()
    assert still.owner.pod_uid == old["uid"]

    node.tick()  # the old UID's instance backs no active pod of its UID: destroyed
    assert [e["op"] for e in node.destroys()] == ["destroy_ci", "destroy_gi"]
    result = node.admit("a")
    assert result.ok, result.error
    [mine] = app.manager.managed()
    assert mine.owner.pod_uid == new["uid"]
    [r] = node.reservations("a")
    assert r.migUUID == node.instances(0)[0][3]
    assert creates(node) == 2 and node.sim.gpu(0).gpu_instances[0].gi_id == r.gpuInstanceID
    assert r.gpuInstanceID is not None and old_gi is not None


def test_a_pod_bound_again_at_another_placement_loses_the_old_precreated_instance(make_node):
    node = make_node(A100x2)
    app = node.start_plugin(precreate=True)
    node.add_pod("a", [[Want(0, "1g.5gb", 6, 1)]])
    precreate(app)
    node.core.delete_namespaced_pod("a", "default", body=k8s.V1DeleteOptions(grace_period_seconds=0))
    node.add_pod("a", [[Want(1, "1g.5gb", 5, 1)]])
    node.tick()
    precreate(app)
    assert node.instances(0) == []
    assert [i[:3] for i in node.instances(1)] == [("1g.5gb", 5, 1)]
    assert node.admit("a").ok
    assert [m.key.gpu_uuid for m in app.manager.managed()] == [node.uuids[1]]
