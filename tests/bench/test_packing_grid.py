"""The packing grid's pieces: the simple rules do what their names say, memoizing a baseline changes
no decision, and a replay counts refused GPU-work after the warm-up only."""

from __future__ import annotations

import placement
import pytest
from _baselines import BestFit, FirstFit, Hami2378Binpack, Hami2855Binpack
from _packing import grid
from _packing.rules import DriverOrder, LeastDamage, memoized


def _one_a100():
    return grid.make_fleet("A100-40GB")[:1]


def test_the_driver_order_puts_successive_1g_instances_at_6_4_5_then_0_to_3():
    nodes = _one_a100()
    policy = DriverOrder(nodes)
    starts = []
    for key in range(7):
        picks = policy.decide([4000])
        placement.apply(policy, picks, key, (4000,))
        starts.append(picks[0][1].start)
    assert starts == [6, 4, 5, 0, 1, 2, 3]


def test_least_damage_puts_a_1g_where_it_breaks_the_fewest_larger_placements():
    nodes = _one_a100()
    policy = LeastDamage(nodes)
    placement.apply(policy, policy.decide([20000]), 0, (20000,))  # a 3g at 0:4
    picks = policy.decide([4000])
    # at 6 it breaks the 3g at 4:4 only; at 4 or 5 the 2g at 4:2 too
    assert picks[0][1].start == 6


@pytest.mark.parametrize("base", [FirstFit, BestFit, Hami2378Binpack, Hami2855Binpack], ids=lambda c: c.name)
def test_a_memoized_baseline_decides_every_arrival_as_the_baseline_itself(base):
    cell = grid.Cell("A100-40GB", grid.BASE, 1.05)
    arrivals = grid.trace(cell, grid.TUNING_SEEDS[0])[:600]
    plain = grid.replay(base, cell, arrivals, placement.apply, placement.release)
    fast = grid.replay(memoized(base), cell, arrivals, placement.apply, placement.release)
    assert fast == plain


def test_a_refused_whole_gpu_job_after_the_warm_up_weighs_its_gpu_minutes():
    cell = grid.Cell("A100-40GB", grid.BASE, 0.95)
    whole = (None,)
    # 8 nodes × 8 GPUs: 64 whole-GPU jobs fill the pool; the first 15 % of arrivals are not counted
    arrivals = [(float(i), whole, 1000.0) for i in range(64)] + [(100.0 + i, whole, 50.0) for i in range(12)]
    got = grid.replay(placement.Dynmig, cell, arrivals, placement.apply, placement.release)
    counted = len(arrivals) - int(len(arrivals) * grid.WARM)
    assert got["refused"] == 12 and counted > 12
    assert got["refused_work"] == pytest.approx(12 * 50.0)
    assert got["refused_by_class"] == {"whole": 12}


def test_expected_refused_work_weighs_each_refused_job_at_its_class_mean_lifetime_not_the_drawn_one():
    cell = grid.Cell("A100-40GB", grid.BASE, 0.95)  # whole-GPU jobs live 3 × 30 = 90 minutes on average
    whole = (None,)
    arrivals = [(float(i), whole, 1000.0) for i in range(64)] + [
        (100.0 + i, whole, 5.0 * i) for i in range(12)
    ]
    got = grid.replay(placement.Dynmig, cell, arrivals, placement.apply, placement.release)
    assert got["refused"] == 12
    assert got["refused_work"] == pytest.approx(5.0 * sum(range(12)))  # what the trace drew
    assert got["expected_refused_work"] == pytest.approx(12 * 90.0)  # what any policy could expect


def test_a_cell_summary_judges_by_both_estimates_each_against_its_own_best_baseline():
    runs = [
        {
            "dynmig": {"refused_work": 10.0, "expected_refused_work": 30.0, "refused": 1, "utilisation": 0.9},
            "a": {"refused_work": 20.0, "expected_refused_work": 20.0, "refused": 1, "utilisation": 0.9},
            "b": {"refused_work": 40.0, "expected_refused_work": 15.0, "refused": 1, "utilisation": 0.9},
        }
    ]
    for r in runs[0].values():
        r.update(offered_work=100.0, refused_work_by_class={}, refused_by_class={})
    s = grid.summarise(grid.Cell("A100-40GB", grid.BASE, 0.95), runs)
    assert (s["best_baseline"], s["ratio"]) == ("a", 0.5)
    assert (s["best_baseline_expected"], s["ratio_expected"]) == ("b", 2.0)


def test_the_held_out_seeds_are_not_the_tuning_seeds():
    assert not set(grid.TUNING_SEEDS) & set(grid.HELD_OUT_SEEDS)


def test_the_grid_covers_every_fleet_at_the_10_percent_mix_and_every_mix_on_a100_and_h100():
    cells = grid.cells()
    for fleet in grid.FLEETS:
        assert {c.load for c in cells if c.fleet == fleet and c.mix == grid.BASE} == set(grid.LOADS)
    for fleet in ("A100-40GB", "H100-80GB"):
        assert {c.mix for c in cells if c.fleet == fleet} == set(grid.MIXES)


def test_the_bootstrap_interval_is_a_point_when_seeds_agree_spans_1x_when_they_split_and_repeats():
    steady = [(9.0, 10.0)] * 10  # every seed 0.9x
    assert grid.interval(steady, "cell") == pytest.approx((0.9, 0.9))
    mixed = [(5.0, 10.0), (15.0, 10.0)] * 5  # 0.5x and 1.5x seeds: 1.0x overall, anything near it
    low, high = grid.interval(mixed, "cell")
    assert low < 1.0 < high and (low, high) == grid.interval(mixed, "cell")
