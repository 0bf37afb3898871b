"""What filter hands to bind: the fleet plans and reserves at once; pending binds hold nodes and writes."""

from __future__ import annotations

from concurrent.futures import Future

import pytest
from webhooks_testkit import gpu_pod, node

from mig.allowlist import ResourceNames
from mig.placement import PodRequest, Refusal
from mig.pods import gpu_request
from webhooks.fleet import Fleet
from webhooks.pending import HELD, PendingBinds


def request(memory: int = 8000, devices: int = 1) -> PodRequest:
    asked = gpu_request(gpu_pod("p", memory, devices), ResourceNames())
    assert asked is not None
    return asked


def fleet(*names: str, gpus: int = 1) -> Fleet:
    f = Fleet()
    for name in names:
        f.set_node(node(name, gpus=gpus))
    return f


def test_two_pods_planned_one_after_the_other_never_share_a_placement():
    f = fleet("n1")
    first = f.plan_and_reserve(request(40000), None, "a", "team", "a")
    second = f.plan_and_reserve(request(40000), None, "b", "team", "b")
    assert not isinstance(first, Refusal) and not isinstance(second, Refusal)
    (one,), (two,) = first[0].devices, second[0].devices
    assert one.gpu_uuid == two.gpu_uuid and not one.placement.overlaps(two.placement)
    assert {uid for uid, _ in f.placements()[one.gpu_uuid]} == {"a", "b"}


def test_a_refilter_does_not_count_the_pods_own_earlier_reservation():
    f = fleet("n1")
    whole = request(80000)
    first = f.plan_and_reserve(whole, None, "a", "team", "a")
    again = f.plan_and_reserve(whole, None, "a", "team", "a")  # the same pod filtered again
    assert not isinstance(first, Refusal) and not isinstance(again, Refusal)
    assert [uid for uid, _ in f.placements()[again[0].devices[0].gpu_uuid]] == ["a"]
    assert isinstance(f.plan_and_reserve(whole, None, "b", "team", "b"), Refusal)


def test_a_plan_is_made_only_over_the_candidate_nodes():
    f = fleet("n1", "n2")
    outcome = f.plan_and_reserve(request(), ["n2"], "a", "team", "a")
    assert not isinstance(outcome, Refusal) and outcome[0].node == "n2"
    assert isinstance(f.plan_and_reserve(request(), [], "b", "team", "b"), Refusal)


def test_a_released_reservation_frees_its_placement_for_the_next_pod():
    f = fleet("n1")
    outcome = f.plan_and_reserve(request(80000), None, "a", "team", "a")
    assert not isinstance(outcome, Refusal)
    f.release("a", outcome[1])
    assert not isinstance(f.plan_and_reserve(request(80000), None, "b", "team", "b"), Refusal)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("asking", "elapsed", "held"),
    [
        ("other", 0.0, {"n1": HELD}),  # another pod's bind is coming: not there
        ("owner", 0.0, {}),  # its own chosen node stays a candidate
        ("other", 30.0, {"n1": HELD}),
        ("other", 30.5, {}),  # a bind that never came stops holding the node
    ],
)
def test_a_node_chosen_for_a_pod_is_held_from_other_pods_until_its_bind_or_the_ttl(asking, elapsed, held):
    clock = Clock()
    pending = PendingBinds(ttl=30.0, clock=clock)
    pending.choose("owner", "n1")
    clock.now += elapsed
    assert pending.held_for_others(asking) == held


def test_a_finished_bind_frees_its_node_but_not_a_node_chosen_since_for_another_pod():
    pending = PendingBinds()
    pending.choose("a", "n1")
    pending.done("a", "n1")
    assert pending.held_for_others("b") == {}
    pending.choose("b", "n1")
    pending.done("a", "n1")  # a late bind of the earlier pod
    assert pending.held_for_others("c") == {"n1": HELD}


def written(error: str) -> Future[str]:
    future: Future[str] = Future()
    future.set_result(error)
    return future


def test_bind_sees_a_write_that_landed_once_and_then_nothing_is_pending():
    pending = PendingBinds()
    pending.recording("a", written(""))
    assert pending.wait_recorded("a") == ""
    assert pending.wait_recorded("a") == ""
    assert pending.wait_recorded("never-filtered") == ""


def test_a_failed_write_stays_for_the_bind_until_the_bind_is_done():
    pending = PendingBinds()
    pending.recording("a", written("could not record the MIG reservation on the pod: 500"))
    pending.done("a", "n1", keep_write=True)  # the filter gave the node up; the bind may still come
    assert "could not record" in pending.wait_recorded("a")
    assert "could not record" in pending.wait_recorded("a")
    pending.done("a", "n1")
    assert pending.wait_recorded("a") == ""


def test_a_write_still_running_makes_bind_retry_instead_of_binding_unrecorded():
    pending = PendingBinds()
    pending.recording("a", Future())
    assert "retry" in pending.wait_recorded("a", timeout=0.01)
    pending.done("a", "n1")  # not finished: it stays
    assert "retry" in pending.wait_recorded("a", timeout=0.01)
