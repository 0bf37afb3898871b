"""The bind's critical path: node lock, then the Binding; what the next filter sees right after."""

from __future__ import annotations

from waiting_testkit import eventually
from webhooks_testkit import gpu_pod, node

from mig.annotations import BIND_PHASE, NODE_LOCK, PLUGIN_CLAIMS, PLUGIN_CLAIMS_PODRESOURCES, VGPU_NODE


def seed(apiserver, service, *objs):
    created = [apiserver.create(o) for o in objs]
    for o in created:
        name = o["metadata"]["name"]
        if o["kind"] == "Node":
            assert eventually(lambda n=name: service.cache.node(n) is not None)
        else:
            assert eventually(lambda n=name: service.cache.pod("team", n) is not None)
    return created


def bind(extender, pod: dict, node_name: str) -> dict:
    meta = pod["metadata"]
    body = {"PodName": meta["name"], "PodNamespace": "team", "PodUID": meta["uid"], "Node": node_name}
    return extender.post("/bind", json=body).json()


def filter_(extender, pod: dict, nodes: list[str]) -> dict:
    return extender.post("/filter", json={"Pod": pod, "Nodes": None, "NodeNames": nodes}).json()


def test_a_node_just_locked_by_a_bind_is_not_offered_to_the_next_pod_before_the_node_watch_catches_up(
    apiserver, service, extender
):
    _, first, second = seed(apiserver, service, node("n1"), gpu_pod("p1"), gpu_pod("p2"))
    # the node watch falls behind: its events stop reaching the cache
    apiserver.faults.fail_next(10_000, verb="watch", resource="nodes", code=500)
    apiserver.faults.cut_watches()
    assert eventually(lambda: service.cache.nodes_reflector._response is None)
    assert filter_(extender, first, ["n1"])["NodeNames"] == ["n1"]
    assert bind(extender, first, "n1")["Error"] == ""
    out = filter_(extender, second, ["n1"])
    assert out["NodeNames"] == [], out
    assert "node lock held by team/p1" in out["FailedNodes"]["n1"]


def test_a_bound_pod_carries_its_reservation_and_bind_phase_and_its_node_the_lock(
    apiserver, service, extender
):
    _, pod = seed(apiserver, service, node("n1"), gpu_pod("p1"))
    assert filter_(extender, pod, ["n1"])["NodeNames"] == ["n1"]
    assert bind(extender, pod, "n1")["Error"] == ""  # the reservation rides on the Binding
    stored = apiserver.get("pods", "p1", "team")
    annotations = stored["metadata"]["annotations"]
    assert stored["spec"]["nodeName"] == "n1"
    assert annotations[VGPU_NODE] == "n1"
    assert annotations[BIND_PHASE] == "allocating"
    assert apiserver.get("nodes", "n1")["metadata"]["annotations"][NODE_LOCK].endswith(",team,p1")


def test_a_pod_the_cache_has_not_seen_yet_is_filtered_from_the_api_and_bound(apiserver, service, extender):
    seed(apiserver, service, node("n1"))
    # the pod watch falls behind: kube-scheduler knows a pod the cache does not
    apiserver.faults.fail_next(10_000, verb="watch", resource="pods", code=500)
    apiserver.faults.cut_watches()
    assert eventually(lambda: service.cache.pods_reflector._response is None)
    pod = apiserver.create(gpu_pod("late"))
    assert service.cache.pod("team", "late") is None
    assert filter_(extender, pod, ["n1"])["NodeNames"] == ["n1"]
    assert bind(extender, pod, "n1")["Error"] == ""
    assert apiserver.get("pods", "late", "team")["metadata"]["annotations"][VGPU_NODE] == "n1"


def lock_free_node(name: str, value: str = PLUGIN_CLAIMS_PODRESOURCES) -> dict:
    out = node(name)
    out["metadata"].setdefault("annotations", {})[PLUGIN_CLAIMS] = value
    return out


def test_several_pods_are_bound_at_once_to_a_node_whose_plugin_claims_pods_through_pod_resources(
    apiserver, service, extender
):
    _, *pods = seed(apiserver, service, lock_free_node("n1"), *(gpu_pod(f"p{i}") for i in range(3)))
    for pod in pods:  # filter all first: a reservation whose bind is coming keeps no one off n1
        assert filter_(extender, pod, ["n1"])["NodeNames"] == ["n1"]
    for pod in pods:
        assert bind(extender, pod, "n1")["Error"] == ""
    assert NODE_LOCK not in (apiserver.get("nodes", "n1")["metadata"].get("annotations") or {})
    for i in range(3):
        stored = apiserver.get("pods", f"p{i}", "team")
        assert stored["spec"]["nodeName"] == "n1"
        assert stored["metadata"]["annotations"][BIND_PHASE] == "allocating"


def test_a_node_without_dynmigs_claim_or_with_another_value_keeps_hamis_node_lock_exactly(
    apiserver, service, extender
):
    _, _, first, second = seed(
        apiserver, service, node("n1"), lock_free_node("n2", "podresources-v0"), gpu_pod("p1"), gpu_pod("p2")
    )
    assert filter_(extender, first, ["n2"])["NodeNames"] == ["n2"]
    assert bind(extender, first, "n2")["Error"] == ""
    assert apiserver.get("nodes", "n2")["metadata"]["annotations"][NODE_LOCK].endswith(",team,p1")
    out = filter_(extender, second, ["n2"])
    assert out["NodeNames"] == [], out
