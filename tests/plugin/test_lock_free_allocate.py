"""Allocate without HAMi's node lock: several pods bound to one node at once, each Allocate finds its
pod through kubelet's PodResources API (the pods kubelet's pod manager holds), so whatever order
kubelet admits them in, every pod gets its own instance and every record lands on its own pod; when
kubelet's view names two candidates, Allocate refuses rather than guess."""

from __future__ import annotations

import itertools
import random

from kubernetes import client as k8s

from mig.annotations import NODE_LOCK, PLUGIN_CLAIMS, PLUGIN_CLAIMS_PODRESOURCES
from tests.plugin.conftest import Want

A100x4 = {"gpus": [{"model": "A100-SXM4-40GB"} for _ in range(4)]}
SOCKET = "pod-resources/kubelet.sock"


def start(node, **more):
    return node.start_plugin(pod_resources_socket=SOCKET, **more)


def own_instance_everywhere(node, names: list[str], results: dict) -> None:
    """Every pod's record names the instance at its own reserved GPU and placement, and what kubelet
    was answered for its containers is exactly that record, device by device."""
    seen: set[str] = set()
    for name in names:
        records = node.reservations(name)
        assert records and all(r.runtime_ready for r in records), name
        for r in records:
            gpu = node.uuids.index(r.gpuUUID)
            here = {(p, s, z): m for p, s, z, m in node.instances(gpu)}
            assert here[(r.profile, r.placement.start, r.placement.size)] == r.migUUID, (name, r)
            assert r.migUUID not in seen
            seen.add(r.migUUID)
        result = results[name]
        assert result.ok, (name, result.error)
        for c, answered in enumerate(result.containers):
            mine = sorted((r for r in records if r.containerIndex == c), key=lambda r: r.deviceIndex)
            assert answered.response.envs["NVIDIA_VISIBLE_DEVICES"] == ",".join(r.migUUID for r in mine)
        assert node.annotations(name)["hami.io/bind-phase"] == "success"


def test_identical_pods_bound_at_once_each_get_their_own_instance_whatever_order_kubelet_admits_them(
    make_node,
):
    node = make_node(A100x4)
    app = start(node, precreate=True)
    names = [f"p{i}" for i in range(8)]
    for i, name in enumerate(names):
        node.add_pod(name, [[Want(i % 4, "1g.5gb", 6 - i // 4, 1)]], lock=False)
    assert NODE_LOCK not in node.node_annotations()
    app.precreator.scan()
    order = names[::-1][:4] + random.Random(7).sample(names[:4], 4)  # newest first, then shuffled
    results = {name: node.admit(name) for name in order}
    own_instance_everywhere(node, names, results)
    assert len(app.manager.managed()) == 8


def test_different_requests_bound_at_once_each_get_their_own_instances_in_every_admission_order(make_node):
    shapes = {
        "one": [[Want(0, "1g.5gb", 6, 1)]],
        "two-containers": [[Want(1, "1g.5gb", 6, 1)], [Want(2, "2g.10gb", 0, 2)]],
        "two-devices": [[Want(0, "2g.10gb", 0, 2), Want(3, "3g.20gb", 4, 4)]],
    }
    node = make_node(A100x4)
    app = start(node)
    for round_, order in enumerate(itertools.permutations(shapes)):
        names = {shape: f"{shape}-{round_}" for shape in shapes}
        for shape, containers in shapes.items():
            node.add_pod(names[shape], containers, lock=False)
        if round_ % 2:  # with and without pre-creation
            app.precreator.scan()
            app.precreator.wait()
        results = {names[shape]: node.admit(names[shape]) for shape in order}
        own_instance_everywhere(node, list(names.values()), results)
        for name, result in results.items():
            node.core.delete_namespaced_pod(name, "default", body=k8s.V1DeleteOptions(grace_period_seconds=0))
            node.kubelet.release(result.pod_uid)  # kubelet frees its devices and forgets the pod
            node.kubelet.forget(result.pod_uid)
        node.tick()
        assert app.manager.managed() == []


def test_a_lock_naming_another_pod_cannot_misdirect_allocate_when_kubelet_says_which_pod_it_admits(make_node):
    node = make_node(A100x4)
    start(node)
    node.add_pod("a", [[Want(0, "1g.5gb", 6, 1)]], lock=False)
    node.add_pod("b", [[Want(1, "1g.5gb", 6, 1)]])  # the lock names b (another binder took it)
    results = {"a": node.admit("a"), "b": node.admit("b")}
    own_instance_everywhere(node, ["a", "b"], results)


def test_allocate_refuses_and_writes_nothing_when_kubelet_lists_two_pods_with_devices_left(make_node):
    node = make_node(A100x4)
    app = start(node)
    app.allocator.finder.wait = 0.3
    rejected = node.add_pod("rejected", [[Want(0, "1g.5gb", 6, 1)]], lock=False)
    node.add_pod("next", [[Want(1, "1g.5gb", 6, 1)]], lock=False)
    # kubelet took `rejected` in and refused it before the device manager; its phase is not Failed yet
    node.kubelet.take_in(rejected["uid"], "default", "rejected")

    result = node.admit("next")

    assert not result.ok and "never guesses" in result.error
    for name in ("rejected", "next"):
        assert not any(r.runtime_ready for r in node.reservations(name))
        assert node.annotations(name)["hami.io/bind-phase"] == "allocating"
    assert app.manager.managed() == [] and node.instances(0) == node.instances(1) == []

    node.set_phase("rejected", "Failed")  # once kubelet's status shows the rejection, one candidate is left
    again = node.admit("next")
    own_instance_everywhere(node, ["next"], {"next": again})


def test_allocate_refuses_when_kubelet_has_not_taken_in_any_pod_with_devices_left(make_node):
    node = make_node(A100x4)
    app = start(node)
    app.allocator.finder.wait = 0.2
    node.add_pod("a", [[Want(0, "1g.5gb", 6, 1)]], lock=False)
    result = node.kubelet.allocate("nvidia.com/gpu", [("c0", 1)], pod_uid="not-listed")
    assert not result.ok and "no binding pod" in result.error
    assert not any(r.runtime_ready for r in node.reservations("a"))


def test_the_node_says_lock_free_only_while_kubelets_pod_resources_answers(make_node):
    node = make_node(A100x4)
    app = start(node)
    assert node.node_annotations().get(PLUGIN_CLAIMS) == PLUGIN_CLAIMS_PODRESOURCES
    node.kubelet.stop()  # the PodResources socket goes with kubelet
    app.publish_claims()
    assert PLUGIN_CLAIMS not in node.node_annotations()


def test_a_plugin_without_the_pod_resources_socket_never_claims_the_node_lock_free(make_node):
    node = make_node(A100x4)
    node.start_plugin()
    assert PLUGIN_CLAIMS not in node.node_annotations()
