"""bench/defrag_grid.py and the eviction replay's window and demand feed: the three replays of a cell
count over the same window and every pod is accounted for. (No timing is asserted.)"""

from __future__ import annotations

import defrag_grid
import placement
from _packing import eviction, grid

CELL = grid.Cell("A100-40GB", grid.BASE, 1.05)
ARRIVALS = grid.trace(CELL, 11)[:500]  # a tuning seed, the start of its trace


def _harness(engine=placement.Dynmig) -> eviction.Harness:
    return eviction.Harness(
        engine, placement.apply, placement.release, placement.gpu_states, lambda m: grid.class_of(CELL, m)
    )


def test_window_zero_counts_everything_and_a_later_window_less() -> None:
    whole = eviction.churn_evicting(
        ARRIVALS, grid.make_fleet(CELL.fleet), _harness(), eviction.EVERYONE_MOVES, check=True
    )
    assert whole.window_refused == whole.refused
    assert abs(whole.window_refused_work - whole.refused_work) < 1e-6
    assert whole.window_evictions == whole.evictions
    late = eviction.churn_evicting(
        ARRIVALS, grid.make_fleet(CELL.fleet), _harness(), eviction.EVERYONE_MOVES, window=ARRIVALS[250][0]
    )
    assert late.refused == whole.refused  # the same replay; only the window's figures differ
    assert late.window_refused <= late.refused and late.window_evictions <= late.evictions


def test_feed_tells_the_engine_each_arrival_once_and_each_ended_lifetime() -> None:
    seen = {"arrived": 0, "departed": 0}

    class Counting(placement.Dynmig):
        def arrived(self, at, mems):
            seen["arrived"] += 1
            super().arrived(at, mems)

        def departed(self, mems, lifetime):
            seen["departed"] += 1
            super().departed(mems, lifetime)

    eviction.churn_evicting(
        ARRIVALS, grid.make_fleet(CELL.fleet), _harness(Counting), eviction.EVERYONE_MOVES, feed=True
    )
    assert seen["arrived"] == len(ARRIVALS)
    assert 0 < seen["departed"] < len(ARRIVALS)
    seen.update(arrived=0, departed=0)
    eviction.churn_evicting(
        ARRIVALS, grid.make_fleet(CELL.fleet), _harness(Counting), eviction.EVERYONE_MOVES
    )
    assert seen == {"arrived": 0, "departed": 0}  # off by default: the placement bench's replays as before


def test_repacking_counts_its_refusals_by_verdict() -> None:
    out = defrag_grid.repacking(CELL, ARRIVALS)
    verdicts = out["verdicts"]
    assert out["refused"] == sum(n for v, n in verdicts.items() if v != "packing found")
    assert out["refused_work"] >= 0 and (out["refused"] == 0) == (out["refused_work"] == 0)


def test_the_limit_names_the_best_baseline_of_the_cell_and_prices_the_oracle_against_it() -> None:
    others = defrag_grid.baselines(CELL, ARRIVALS)
    assert "dynmig" not in others and len(others) == len(placement.GRID_POLICIES) - 1
    rows = [
        {
            "cell": CELL.label,
            "seed": 11,
            "hours": 1.0,
            "plain": {"refused_work": 90.0, "refused": 3},
            "baselines": {**others, "first fit": 120.0, "best fit": 100.0},
            "evicting": None,
            "oracle": {"refused_work": 60.0, "refused": 2, "verdicts": {"infeasible": 2}},
        }
    ]
    best = min(rows[0]["baselines"], key=rows[0]["baselines"].get)
    s = defrag_grid.summarise(CELL, rows)
    assert s["best_baseline"] == best
    assert s["oracle_over_best_baseline"] == 60.0 / rows[0]["baselines"][best]
    assert s["plain_over_oracle"] == 1.5
    assert s["evicting"] is None and s["evictions_per_hour"] is None and not s["met"]


def test_a_wrong_process_count_ends_the_defrag_replay_at_once_naming_jobs(capsys) -> None:
    assert defrag_grid.main(["--limit", "--jobs", "0"]) == 2
    assert "--jobs: '0'" in capsys.readouterr().err


def test_replays_in_two_processes_come_back_in_the_order_asked_and_equal_to_one_process() -> None:
    units = [(grid.Cell("A100-40GB", grid.BASE, 0.95), seed) for seed in (11, 12, 13)]
    one = list(grid.in_order(_trace_head, units, 1))
    two = list(grid.in_order(_trace_head, units, 2))
    assert one == two and [u[1] for u in units] == [r[0] for r in two]


def _trace_head(unit: tuple[grid.Cell, int]) -> tuple[int, list]:
    cell, seed = unit
    return seed, grid.trace(cell, seed)[:5]
