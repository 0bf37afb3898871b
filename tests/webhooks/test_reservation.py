"""What filter hands to bind: the fleet plans and reserves at once, and its reservation is all bind
carries out: the node it chose, the slices it counts, the annotations the Binding records."""

from __future__ import annotations

import pytest
from webhooks_testkit import gpu_pod, node

from mig.allowlist import ResourceNames
from mig.annotations import VGPU_NODE
from mig.placement import PodRequest
from mig.pods import gpu_request
from mig.reconstruct import PodUsage
from webhooks.fleet import CHOSEN, Asking, Fleet, reservation_annotations
from webhooks.metrics import sample
from webhooks.refusal import Refused


def request(memory: int = 8000, devices: int = 1) -> PodRequest:
    asked = gpu_request(gpu_pod("p", memory, devices), ResourceNames())
    assert asked is not None
    return asked


def fleet(*names: str, gpus: int = 1, clock=None, hold_chosen: bool = False) -> Fleet:
    """A fleet of `names`; without `hold_chosen`, pods decided one after the other without binds may
    share a node (as a burst on a node bound without the node lock does)."""
    f = Fleet(clock=clock, hold_chosen=hold_chosen) if clock is not None else Fleet(hold_chosen=hold_chosen)
    for name in names:
        f.set_node(node(name, gpus=gpus))
    return f


def test_two_pods_planned_one_after_the_other_never_share_a_placement():
    f = fleet("n1")
    first = f.decide(request(40000), None, Asking("a", "team", "a"))
    second = f.decide(request(40000), None, Asking("b", "team", "b"))
    assert not isinstance(first, Refused) and not isinstance(second, Refused)
    (one,), (two,) = first.plan.devices, second.plan.devices
    assert one.gpu_uuid == two.gpu_uuid and not one.placement.overlaps(two.placement)
    assert {uid for uid, _ in f.placements()[one.gpu_uuid]} == {"a", "b"}


def test_a_refilter_does_not_count_the_pods_own_earlier_reservation():
    f = fleet("n1")
    whole = request(80000)
    first = f.decide(whole, None, Asking("a", "team", "a"))
    again = f.decide(whole, None, Asking("a", "team", "a"))  # the same pod filtered again
    assert not isinstance(first, Refused) and not isinstance(again, Refused)
    assert [uid for uid, _ in f.placements()[again.plan.devices[0].gpu_uuid]] == ["a"]
    assert isinstance(f.decide(whole, None, Asking("b", "team", "b")), Refused)


def test_a_plan_is_made_only_over_the_candidate_nodes():
    f = fleet("n1", "n2")
    outcome = f.decide(request(), ["n2"], Asking("a", "team", "a"))
    assert not isinstance(outcome, Refused) and outcome.plan.node == "n2"
    assert isinstance(f.decide(request(), [], Asking("b", "team", "b")), Refused)


def test_a_released_reservation_frees_its_placement_for_the_next_pod():
    f = fleet("n1")
    outcome = f.decide(request(80000), None, Asking("a", "team", "a"))
    assert not isinstance(outcome, Refused)
    f.release("a", outcome.usage)
    assert not isinstance(f.decide(request(80000), None, Asking("b", "team", "b")), Refused)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def reserve(f: Fleet, uid: str, nodes: list[str] | None = None) -> None:
    outcome = f.decide(request(), nodes, Asking(uid, "team", uid))
    assert not isinstance(outcome, Refused)


@pytest.mark.parametrize(
    ("asking", "elapsed", "chosen"),
    [
        ("other", 0.0, {"n1": CHOSEN}),  # another pod's bind is coming: not there
        ("owner", 0.0, {}),  # its own chosen node stays a candidate
        ("other", 119.0, {"n1": CHOSEN}),
        ("other", 120.0, {}),  # a bind that never came stops holding the node with its reservation
    ],
)
def test_a_node_chosen_for_a_pod_is_held_from_other_pods_until_its_bind_or_its_reservation_lapses(
    asking, elapsed, chosen
):
    clock = Clock()
    f = fleet("n1", gpus=2, clock=clock, hold_chosen=True)
    reserve(f, "owner")
    clock.now += elapsed
    assert f.chosen_for_others(asking) == chosen


def test_a_bound_reservation_frees_its_node_but_not_a_node_chosen_since_for_another_pod():
    f = fleet("n1", gpus=2, hold_chosen=True)
    reserve(f, "a")
    first = f.reservation("a")
    assert first is not None
    f.bound(first)
    assert f.chosen_for_others("b") == {}
    reserve(f, "b")
    f.bound(first)  # a late word about the earlier pod's bind
    assert f.chosen_for_others("c") == {"n1": CHOSEN}
    assert f.reservation("a") is first  # counted until the cache shows the bound pod


def test_the_bind_finds_the_pods_latest_reservation_with_the_annotations_it_carries():
    f = fleet("n1", "n2")
    reserve(f, "a", ["n1"])
    reserve(f, "a", ["n2"])  # filtered again: the later plan replaces the earlier
    found = f.reservation("a")
    assert found is not None and found.node == "n2" and found.annotations[VGPU_NODE] == "n2"
    assert f.reservation("never-filtered") is None
    assert {uid for held in f.placements().values() for uid, _ in held} == {"a"}


def test_a_refused_refilter_leaves_the_pod_no_reservation_for_its_bind():
    f = fleet("n1")
    reserve(f, "a")
    assert isinstance(f.decide(request(200000), None, Asking("a", "team", "a")), Refused)
    assert f.reservation("a") is None and f.chosen_for_others("b") == {}


@pytest.mark.parametrize("elapsed", [0.0, 29.0, 31.0, 60.0, 119.9])
def test_a_reservation_is_usable_by_bind_exactly_as_long_as_the_fleet_counts_its_slices(elapsed):
    clock = Clock()
    f = fleet("n1", clock=clock)
    reserve(f, "a")
    clock.now += elapsed
    assert f.reservation("a") is not None
    assert [uid for uid, _ in f.placements()["GPU-n1-0"]] == ["a"]


@pytest.mark.parametrize("elapsed", [120.0, 121.0, 600.0])
def test_a_lapsed_reservation_frees_its_slices_and_bind_no_longer_finds_it(elapsed):
    clock = Clock()
    f = fleet("n1", clock=clock)
    reserve(f, "a")
    clock.now += elapsed
    assert f.reservation("a") is None
    assert f.placements()["GPU-n1-0"] == []
    assert not isinstance(f.decide(request(80000), None, Asking("b", "team", "b")), Refused)


def test_lapsed_reservations_are_forgotten_so_memory_stays_bounded():
    clock = Clock()
    f = fleet("n1", "n2", clock=clock)
    reserve(f, "a", ["n1"])
    clock.now += 120.0
    reserve(f, "b", ["n2"])
    assert list(f._reserved) == ["b"] and len(f._deadlines) == 1


def bound_copy(name: str, uid: str, plan, usage: PodUsage, version: str, phase: str = "Pending") -> dict:
    """The pod as the watch shows it once its Binding carried the filter's reservation."""
    pod = gpu_pod(name)
    pod["metadata"].update(uid=uid, resourceVersion=version)
    pod["metadata"]["annotations"] = reservation_annotations(plan, usage, 1, 0)
    pod["spec"]["nodeName"] = plan.node
    pod["status"] = {"phase": phase}
    return pod


def test_a_reservation_the_binding_carried_counts_once_from_filter_to_the_pods_end():
    f = fleet("n1")
    outcome = f.decide(request(40000), None, Asking("a", "team", "a"))
    assert not isinstance(outcome, Refused)
    plan, usage = outcome.plan, outcome.usage
    before = f.placements()
    f.set_pod(bound_copy("a", "a", plan, usage, "5"))  # the cache sees the pod bound
    assert f.reservation("a") is None and f.held("a") == usage
    assert f.placements() == before
    # what the fleet holds is what it then plans around: a second 40 GB pod takes the other half
    second = f.decide(request(40000), None, Asking("b", "team", "b"))
    assert not isinstance(second, Refused)
    assert not second.plan.devices[0].placement.overlaps(plan.devices[0].placement)
    assert isinstance(f.decide(request(40000), None, Asking("c", "team", "c")), Refused)
    f.set_pod(bound_copy("a", "a", plan, usage, "6", phase="Succeeded"))  # the pod ended
    assert f.held("a") is None
    assert [uid for uid, _ in f.placements()[plan.devices[0].gpu_uuid]] == ["b"]


def test_a_node_locked_at_one_filter_is_a_candidate_again_once_a_later_filter_finds_it_free():
    f = fleet("n1", "n2")
    locked = f.decide(request(), ["n1", "n2"], Asking("a", "team", "a"), {"n1": "locked"})
    assert not isinstance(locked, Refused) and locked.plan.node == "n2"
    assert isinstance(f.decide(request(80000), ["n1"], Asking("b", "team", "b"), {"n1": "locked"}), Refused)
    freed = f.decide(request(80000), ["n1", "n2"], Asking("c", "team", "c"))
    assert not isinstance(freed, Refused) and freed.plan.node == "n1"


def test_the_defrag_advisor_still_sees_room_on_a_node_locked_at_the_last_filter():
    f = fleet("n1")
    assert isinstance(f.decide(request(), ["n1"], Asking("a", "team", "a"), {"n1": "locked"}), Refused)
    assert f.fits(request())  # how webhooks/defrag.py asks whether a refused pod fits now


def test_a_relist_forgets_refused_pods_that_are_gone_so_they_neither_count_nor_get_advice():
    f = fleet("n1")
    assert isinstance(f.decide(request(200000), None, Asking("gone", "team", "gone")), Refused)
    f.set_refused("gone", "not-enough-free-slices")
    f.set_refused("stays", "not-enough-free-slices")
    assert f.refused("gone") and sample(f.view()).refused == (("not-enough-free-slices", 2),)
    stays = gpu_pod("stays", 200000)
    stays["metadata"]["uid"] = "stays"
    f.replace_pods([stays])  # the delete of 'gone' was missed while the watch was down
    assert not f.refused("gone") and f.refused("stays")
    assert sample(f.view()).refused == (("not-enough-free-slices", 1),)
