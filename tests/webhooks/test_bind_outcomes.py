"""What a bind answers, as a typed outcome, and what each outcome leaves of the pod's reservation:
bound (counted until the cache shows the pod), retry (released: kube-scheduler filters again),
not-theirs and not-again (left as they are)."""

from __future__ import annotations

import pytest
from waiting_testkit import eventually
from webhooks_testkit import gpu_pod, node

from mig.annotations import NODE_LOCK, VGPU_NODE
from webhooks.bind import BindOutcome
from webhooks.extender import ExtenderBindingArgs
from webhooks.fleet import CHOSEN


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(service) -> Clock:
    service.fleet.clock = ticking = Clock()
    return ticking


def seed(apiserver, service, *objs):
    created = [apiserver.create(o) for o in objs]
    for o in created:
        name = o["metadata"]["name"]
        if o["kind"] == "Node":
            assert eventually(lambda n=name: service.cache.node(n) is not None)
        else:
            assert eventually(lambda n=name: service.cache.pod("team", n) is not None)
    return created


def filtered(service, pod: dict, nodes: list[str]) -> list[str]:
    out = service.server.extender.filter({"Pod": pod, "Nodes": None, "NodeNames": nodes})
    assert out["Error"] == "", out
    return out["NodeNames"]


def bind(service, pod: dict, node_name: str, uid: str | None = None):
    meta = pod["metadata"]
    args = ExtenderBindingArgs(meta["name"], "team", meta["uid"] if uid is None else uid, node_name)
    return service.binder.bind(args)


def counted(service, uid: str) -> bool:
    return any(u == uid for held in service.fleet.placements().values() for u, _ in held)


def stored(apiserver, name: str) -> dict:
    return apiserver.get("pods", name, "team")


@pytest.mark.parametrize("elapsed", [29.0, 31.0, 60.0, 119.0])
def test_a_pod_filtered_up_to_the_reservation_timeout_ago_is_bound_with_its_reservation(
    apiserver, service, clock, elapsed
):
    _, pod = seed(apiserver, service, node("n1"), gpu_pod("p1"))
    assert filtered(service, pod, ["n1"]) == ["n1"]
    clock.now += elapsed
    assert counted(service, pod["metadata"]["uid"])  # the fleet still holds its slices ...
    result = bind(service, pod, "n1")  # ... and bind may use them
    assert result.outcome is BindOutcome.BOUND and result.message == ""
    assert stored(apiserver, "p1")["metadata"]["annotations"][VGPU_NODE] == "n1"


@pytest.mark.parametrize("elapsed", [120.0, 300.0])
def test_once_the_reservation_lapsed_its_slices_are_free_and_bind_asks_for_a_new_filter(
    apiserver, service, clock, elapsed
):
    _, pod = seed(apiserver, service, node("n1"), gpu_pod("p1"))
    assert filtered(service, pod, ["n1"]) == ["n1"]
    clock.now += elapsed
    result = bind(service, pod, "n1")
    assert result.outcome is BindOutcome.RETRY
    assert "holds no MIG reservation for the pod" in result.message
    assert not counted(service, pod["metadata"]["uid"])
    assert stored(apiserver, "p1")["spec"].get("nodeName") is None
    assert NODE_LOCK not in (apiserver.get("nodes", "n1")["metadata"].get("annotations") or {})


def test_a_bound_pod_stays_counted_and_its_node_is_free_for_the_next_pods_filter(apiserver, service):
    _, first, second = seed(apiserver, service, node("n1", gpus=2), gpu_pod("p1"), gpu_pod("p2"))
    assert filtered(service, first, ["n1"]) == ["n1"]
    assert service.fleet.chosen_for_others(second["metadata"]["uid"]) == {"n1": CHOSEN}
    assert bind(service, first, "n1").outcome is BindOutcome.BOUND
    assert counted(service, first["metadata"]["uid"])
    assert service.fleet.chosen_for_others(second["metadata"]["uid"]) == {}


def test_a_bind_to_another_node_than_the_reservations_releases_it(apiserver, service):
    _, _, pod = seed(apiserver, service, node("n1"), node("n2"), gpu_pod("p1"))
    assert filtered(service, pod, ["n1"]) == ["n1"]
    result = bind(service, pod, "n2")
    assert result.outcome is BindOutcome.RETRY
    assert "reservation is on node n1, not n2" in result.message
    assert service.fleet.reservation(pod["metadata"]["uid"]) is None
    assert service.fleet.chosen_for_others("someone-else") == {}


def test_a_bind_naming_another_uid_touches_nothing_of_the_clusters_pod(apiserver, service):
    _, pod = seed(apiserver, service, node("n1"), gpu_pod("p1"))
    assert filtered(service, pod, ["n1"]) == ["n1"]
    result = bind(service, pod, "n1", uid="a-pod-deleted-and-created-again")
    assert result.outcome is BindOutcome.NOT_THEIRS
    assert "dynmig binds only the pod the cluster has" in result.message
    assert service.fleet.reservation(pod["metadata"]["uid"]) is not None  # still the real pod's
    assert bind(service, pod, "n1").outcome is BindOutcome.BOUND


def test_a_second_bind_of_a_bound_pod_is_refused_and_leaves_what_it_holds(apiserver, service):
    _, pod = seed(apiserver, service, node("n1"), gpu_pod("p1"))
    uid = pod["metadata"]["uid"]
    assert filtered(service, pod, ["n1"]) == ["n1"]
    assert bind(service, pod, "n1").outcome is BindOutcome.BOUND
    assert eventually(lambda: service.cache.pod("team", "p1")["spec"].get("nodeName") == "n1")
    result = bind(service, pod, "n1")
    assert result.outcome is BindOutcome.NOT_AGAIN
    assert "is already bound to node n1; dynmig does not bind it again" in result.message
    assert counted(service, uid)


def test_a_bind_of_a_pod_that_is_gone_asks_for_a_new_filter(apiserver, service):
    seed(apiserver, service, node("n1"))
    ghost = gpu_pod("ghost")
    ghost["metadata"]["uid"] = "never-created"
    result = bind(service, ghost, "n1")
    assert result.outcome is BindOutcome.RETRY and result.message == "bind team/ghost: pod not found"
