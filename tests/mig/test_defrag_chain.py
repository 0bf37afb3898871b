"""Defrag chains: a pod in the pending pod's way has no free home, but would have one if another pod
moved first; the advisor names both, in the order to evict them, and nothing cheaper exists."""

from __future__ import annotations

from dataclasses import replace

from mig.defrag import Holder, advice_text, advise, cost, eviction_order
from mig.placement import PodRequest
from mig.types import Placement
from tests.mig.test_defrag import NOW, _brute_force, _lost_after, fleet_of, holder, names, placed_after, pod

A100 = "A100-SXM4-40GB"
THREE_G, ONE_G, WHOLE = pod(20000), pod(4000), pod(None)


def chain_world(extra: list[Holder] | None = None) -> tuple[list[Holder], dict]:
    """No empty GPU. n0: two movable 3g jobs, the pending whole-GPU pod's only room.
    n1: a 1g service at 0:1 in the way of a 3g room at 0:4 (4:4 must stay).
    n2: one free 3g room at 4:4 (0:4 must stay). n3: one free 1g room at 6:1, nothing larger.
    Freeing n0 strands one job; moving the service too gives it n1's room, and the service n3's."""
    holders = [
        holder("job-a", "n0", 0, 0, 4, started=NOW - 50, request=THREE_G),
        holder("job-b", "n0", 0, 4, 4, started=NOW - 50, request=THREE_G),
        holder("svc", "n1", 0, 0, 1, started=NOW - 50, request=ONE_G),
        holder("n1-stays", "n1", 0, 4, 4, candidate=False, request=THREE_G),
        holder("n2-stays", "n2", 0, 0, 4, candidate=False, request=THREE_G),
        holder("n3-stays", "n3", 0, 0, 4, candidate=False, request=THREE_G),
        holder("n3-stays-2", "n3", 0, 4, 2, candidate=False, request=pod(9000)),
        *(extra or []),
    ]
    shape = {("n0", 0): A100, ("n1", 0): A100, ("n2", 0): A100, ("n3", 0): A100}
    return holders, shape


def test_a_stranded_job_moves_where_a_1g_service_moves_out_of_its_way_and_the_pod_lands():
    holders, shape = chain_world()
    fleet = fleet_of(holders, shape)
    jobs = [h for h in holders if h.name.startswith("default/job")]
    assert _simulate(shape, holders, jobs, WHOLE) == 1  # the two jobs alone: one has no home
    advice = advise(WHOLE, fleet, holders, now=NOW, require_homes=True)
    assert names(advice) == ["job-a", "job-b", "svc"] and not advice.lost and advice.exact
    assert advice.node == "n0" and advice.plan is not None
    assert advice.plan.devices[0].placement == Placement(0, 8)
    homes = {m.victim.name: (m.plan.node, str(m.plan.devices[0].placement)) for m in advice.moves if m.plan}
    assert sorted(homes.values()) == [("n1", "0:4"), ("n2", "4:4"), ("n3", "6:1")]
    # evicted in that order: the jobs' replacements are queued first and take the room the service
    # frees before the service's replacement could take its own room back
    assert [h.name for h in eviction_order(advice)] == ["default/job-a", "default/job-b", "default/svc"]
    assert placed_after(advice, WHOLE, fleet, holders) is not None
    assert _simulate(shape, holders, advice.victims, WHOLE) == 0
    text = advice_text(advice)
    assert "(default/job-a, default/job-b on n0; default/svc on n1)" in text, text
    assert "moves default/job-a to n" in text and "default/svc to n3 (1g.5gb on GPU-n3-0 at 6:1)" in text, (
        text
    )


def test_without_move_only_the_chain_still_wins_over_a_set_that_strands_a_pod():
    holders, shape = chain_world()
    advice = advise(WHOLE, fleet_of(holders, shape), holders, now=NOW)
    # the cost puts pods lost before the count: three pods that move beat two of which one is lost
    assert names(advice) == ["job-a", "job-b", "svc"] and not advice.lost


def test_a_budget_that_holds_the_service_leaves_no_chain():
    holders, shape = chain_world()
    guarded = [replace(h, groups=("default/svc",)) if h.name == "default/svc" else h for h in holders]
    fleet = fleet_of(guarded, shape)
    advice = advise(WHOLE, fleet, guarded, {"default/svc": 0}, now=NOW, require_homes=True)
    assert not advice.found and "default/svc" in advice.blocked_by_budget
    assert _cheapest(shape, guarded, WHOLE, {"default/svc": 0}) is None


def test_a_service_that_may_not_go_leaves_no_chain():
    holders, shape = chain_world()
    kept = [replace(h, candidate=False) if h.name == "default/svc" else h for h in holders]
    advice = advise(WHOLE, fleet_of(kept, shape), kept, now=NOW, require_homes=True)
    assert not advice.found


# ---- brute force, independent of the advisor's search ---------------------------------------


def _simulate(shape, holders, subset, p: PodRequest) -> int | None:
    return _lost_after(shape, holders, subset, p)


def _cheapest(shape, holders, p, budgets=None, require_homes=True):
    return _brute_force(shape, holders, budgets or {}, p, require_homes)


def test_no_cheaper_set_than_the_chain_exists_by_brute_force():
    # beside the chain: an older 1g service in the way of another 3g room on n1, and a younger 2g
    # one in the way of a 3g room on n2 (it fits n3's free 1g.10gb room)
    extra = [
        holder("old-svc", "n1", 1, 1, 1, started=NOW - 5000, request=ONE_G),
        holder("n1-stays-b", "n1", 1, 4, 4, candidate=False, request=THREE_G),
        holder("n2-svc", "n2", 1, 0, 2, started=NOW - 10, request=pod(9000)),
        holder("n2-stays-b", "n2", 1, 4, 4, candidate=False, request=THREE_G),
    ]
    holders, shape = chain_world(extra)
    shape[("n1", 1)] = shape[("n2", 1)] = A100
    fleet = fleet_of(holders, shape)
    for require_homes in (True, False):
        advice = advise(WHOLE, fleet, holders, now=NOW, require_homes=require_homes)
        cheapest = _cheapest(shape, holders, WHOLE, require_homes=require_homes)
        assert cheapest is not None and advice.found and advice.exact
        assert cost("", advice.victims, NOW, len(advice.lost))[:5] == cheapest
        assert _simulate(shape, holders, advice.victims, WHOLE) == len(advice.lost)
        assert names(advice) == ["job-a", "job-b", "n2-svc"]  # the youngest pod that makes the room


def test_a_chain_as_large_as_a_set_that_loses_nobody_wins_when_its_pods_are_younger():
    """One node, two A100s. GPU 0: a young 3g job. GPU 1: a young 1g service at 0:1 and an older
    2g service at 4:2. Emptying GPU 1 (both services, one of them older) loses nobody, and so does
    the chain that frees GPU 0: the job moves to GPU 1's 0:4 once the young service moves to 6:1.
    Both sets are two pods; the chain's are younger, so it is the cheaper one."""
    holders = [
        holder("job", "n0", 0, 0, 4, started=NOW - 1, request=THREE_G),
        holder("young-svc", "n0", 1, 0, 1, started=NOW - 1, request=ONE_G),
        holder("old-svc", "n0", 1, 4, 2, started=NOW - 50, request=pod(9000)),
    ]
    shape = {("n0", 0): A100, ("n0", 1): A100}
    advice = advise(WHOLE, fleet_of(holders, shape), holders, now=NOW)
    assert names(advice) == ["job", "young-svc"] and not advice.lost and advice.exact
    assert cost("", advice.victims, NOW, 0)[:5] == _cheapest(shape, holders, WHOLE, require_homes=False)
    assert placed_after(advice, WHOLE, fleet_of(holders, shape), holders) is not None


def test_a_chain_also_homes_the_second_stranded_pod_when_the_first_has_no_room_anywhere():
    """Two whole GPUs on one node are asked for. Emptying n0 strands both its jobs: one needs a whole
    H100 (none other exists), the other any whole GPU. Moving a 1g service off n1's second A100 gives
    the second job that GPU (the service moves beside the 1g that stays): three pods, one lost, which
    beats two pods with both lost. A chain grown from the first stranded job only found nothing."""
    holders = [
        holder("h100-job", "n0", 0, 0, 8, request=pod(81152)),
        holder("whole-job", "n0", 1, 0, 8, request=WHOLE),
        holder("n1-stays", "n1", 0, 0, 1, candidate=False, request=ONE_G),
        holder("svc", "n1", 1, 0, 1, request=ONE_G),
    ]
    shape = {("n0", 0): "H100-SXM5-80GB", ("n0", 1): A100, ("n1", 0): A100, ("n1", 1): A100}
    two_whole = pod(None, count=2)
    advice = advise(two_whole, fleet_of(holders, shape), holders, now=NOW)
    assert names(advice) == ["h100-job", "svc", "whole-job"]
    assert [h.name for h in advice.lost] == ["default/h100-job"] and advice.exact
    assert cost("", advice.victims, NOW, 1)[:5] == _cheapest(shape, holders, two_whole, require_homes=False)
    assert placed_after(advice, two_whole, fleet_of(holders, shape), holders) is not None
