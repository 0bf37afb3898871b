"""The demand estimate the engine prices placements by: rates and lifetimes over a bounded window,
following a change of mix, and a price per free slot that makes the last empty GPU dear when
whole-GPU jobs are asked for."""

from __future__ import annotations

from mig.placement.demand import DemandEstimate, risk_weights


def test_the_mix_is_arrival_rate_times_mean_lifetime_per_ask():
    d = DemandEstimate()
    for i in range(11):
        d.arrived("", [4000], float(i))  # one a minute
    for _ in range(3):
        d.ended("", [4000], 30.0)
    ((ask, work),) = d.mix("")
    assert ask == 4000 and abs(work - 11 / 10 * 30.0) < 1e-9


def test_the_estimate_follows_a_change_of_mix_within_one_window():
    d = DemandEstimate(window=50)
    for i in range(200):
        d.arrived("", [4000], float(i))
    for i in range(200, 260):
        d.arrived("", [None], float(i))
    assert [ask for ask, _ in d.mix("")] == [None]
    assert len(d._arrivals[""]) == 50  # bounded


def test_pools_are_estimated_apart_and_an_unseen_pool_has_no_estimate():
    d = DemandEstimate()
    for i in range(5):
        d.arrived("a", [4000], float(i))
    assert d.mix("b") == ()
    assert [ask for ask, _ in d.mix("a")] == [4000]


def test_the_last_free_slot_of_an_asked_profile_costs_more_than_one_of_many():
    names = ("1g.5gb", "7g.40gb")
    last = risk_weights(names, (0.0, 1.0), {"7g.40gb": 1})
    many = risk_weights(names, (0.0, 1.0), {"7g.40gb": 20})
    assert last[1] > many[1] > 0 and last[0] == many[0] == 0
