"""Defrag against its limit: the packing grid's near-capacity cells with the opt-in eviction mode on,
against the move-oracle as a policy (issue 29, item 3).

    nice .venv/bin/python bench/defrag_grid.py            (ten held-out seeds; about 7 minutes here)
    nice .venv/bin/python bench/defrag_grid.py --tuning   (the tuning seeds instead)
    ... --fleets A100-40GB,H100-80GB                      (which uniform pools; those two by default)
    nice .venv/bin/python bench/defrag_grid.py --limit --fleets A100-40GB,H100-80GB,B200
                                                          (no eviction replay: plain, baselines, oracle)
    ... --loads 0.95,1.05                                 (the grid's loads to replay; 0.95 by default)
    ... --jobs 2                                          (replay in 2 processes; the oracle's time
                                                          budget is per process, so give each a core;
                                                          every fleet at both loads: 23 minutes here)

Per cell (the grid's 10 % whole-GPU / 3x mix at load 0.95, on a uniform pool of 64 GPUs, 8 nodes x 8)
and seed, the same trace (`_packing.grid.trace`) is replayed three times on a fresh fleet, each counted
over the same window (the grid's warm-up: the first `grid.WARM` of the arrivals replayed, not counted),
each with dynmig's engine fed its demand estimate as the grid's replay feeds it:
- plain dynmig: `grid.replay`, exactly as the grid runs it;
- dynmig + defrag eviction: `_packing.eviction.churn_evicting` with consenting pods (`RANKING`: every
  running pod opted in and the pending pod outranking it, the controller's move-only rule, its
  6-a-minute token bucket on trace minutes); refused = arrivals never placed + evicted pods not placed
  again, refused work = their GPU share times the minutes they missed; evictions per hour of trace time
  in the window;
- the move-oracle as a policy (`repacking`): dynmig's engine places each pod and, when it refuses, the
  oracle (`_packing.oracle.Oracle`, HiGHS through scipy) judges the pods running plus the new one with
  every running instance free to move; given a packing the whole fleet is re-laid to it and the pod
  admitted. It refuses what the oracle proves infeasible or leaves undecided (its solve limit or the
  trace's budget): the verdicts are printed, since an undecided refusal counts against the oracle.
  Greedy over time, so it is a reference (what moving every instance at every refusal buys), not a
  lower bound.

Beside them, in the same run, the grid's baselines on the same trace (`--grid`'s replay) and the best
of them in the cell: "oracle / best baseline" is how far below the best simple rule any placement can
get even when it may move every running instance at every refusal, which bounds what plain placement
(no moves) can reach against that rule.

Target (issue 29): refused work with eviction <= 1.5x the move-oracle's on the near-capacity cells.
Writes bench/results/defrag-grid.json (not committed).
"""

from __future__ import annotations

import heapq
import json
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import placement as bench
from _packing import eviction, grid
from _packing.oracle import INFEASIBLE, NOT_SEARCHED, UNKNOWN, Oracle, legal_packing

RESULTS = Path(__file__).resolve().parent / "results" / "defrag-grid.json"
TARGET = 1.5
RANKING = eviction.EVERYONE_MOVES  # consenting pods: every one opted in; the controller's move-only default
FLEETS = ("A100-40GB", "H100-80GB")
LOAD = 0.95
ORACLE_BUDGET, ORACLE_TIME_LIMIT = 60.0, 5.0  # seconds per trace in the program with nodes; per solve


def cells(fleets=FLEETS, loads=(LOAD,)) -> list[grid.Cell]:
    return [grid.Cell(f, grid.BASE, load) for f in fleets for load in loads]


def _loads(argv: list[str]) -> tuple[float, ...]:
    """`--loads 0.95,1.05` (the grid's loads only; `LOAD` when absent); ValueError naming the flag."""
    if "--loads" not in argv[:-1]:
        return (LOAD,)
    text = argv[argv.index("--loads") + 1]
    try:
        loads = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"--loads: {text[:40]!r} is not a list of numbers") from None
    wrong = [x for x in loads if x not in grid.LOADS]
    if wrong:
        raise ValueError(
            f"--loads: {wrong[0]:g} is not one of the grid's loads {', '.join(map(str, grid.LOADS))}"
        )
    return loads


class _Repacked:
    """Stands in for a policy while the oracle's packing is applied (checked as any policy's picks)."""

    name = "oracle repack"


def repacking(cell: grid.Cell, arrivals) -> dict:
    """The move-oracle as a policy on one trace (see the module docstring), counted as `grid.replay`
    counts: after the warm-up, refused work = GPU share x lifetime of each refused arrival."""
    nodes = grid.make_fleet(cell.fleet)
    policy = bench.Dynmig(nodes)
    oracle = Oracle(nodes, ORACLE_BUDGET, ORACLE_TIME_LIMIT)
    start = arrivals[int(len(arrivals) * grid.WARM)][0]
    verdicts: Counter[str] = Counter()
    shares: dict = {}
    departures: list[tuple[float, int]] = []
    live: dict[int, list] = {}
    refused, lost, repacks = 0, 0.0, 0
    for key, (t, mems, life) in enumerate(arrivals):
        while departures and departures[0][0] <= t:
            _, k = heapq.heappop(departures)
            bench.release(policy, live.pop(k), k)
            policy.departed(arrivals[k][1], arrivals[k][2])
        policy.arrived(t, mems)
        picks = policy.decide(list(mems))
        if picks is None:
            running = {k: arrivals[k][1] for k in live}
            judged = oracle.judge(running, mems, key)
            if t >= start:
                verdicts[judged.verdict] += 1
            if judged.packing is None:
                if t >= start:
                    refused += 1
                    lost += shares.setdefault(mems, eviction.gpu_share(nodes, mems)) * life
                continue
            wrong = legal_packing(nodes, {**running, key: mems}, judged.packing)
            assert not wrong, f"the oracle's packing is not legal: {wrong[:3]}"
            for n in nodes:
                for g in n.gpus:
                    g.mask, g.allocs = 0, {}
            for k, moved in judged.packing.items():
                if k != key:
                    bench.apply(_Repacked(), moved, k, arrivals[k][1])
                    live[k] = moved
            fresh = bench.Dynmig(nodes)  # its index rebuilt from the re-laid fleet, its estimate kept
            fresh.demand, fresh._seen = policy.demand, policy._seen
            fresh.price()
            policy, picks = fresh, judged.packing[key]
            repacks += 1
        bench.apply(policy, picks, key, mems)
        live[key] = picks
        heapq.heappush(departures, (t + life, key))
    return {
        "refused_work": lost,
        "refused": refused,
        "verdicts": dict(verdicts),
        "repacks": repacks,
        "oracle_seconds": round(oracle.spent_total, 1),
    }


def baselines(cell: grid.Cell, arrivals) -> dict[str, float]:
    """Refused GPU-work of each of the grid's baselines on the trace, replayed as `--grid` replays them."""
    return {
        c.name: grid.replay(c, cell, arrivals, bench.apply, bench.release)["refused_work"]
        for c in bench.GRID_POLICIES
        if c is not bench.Dynmig
    }


def run_cell(cell: grid.Cell, seed: int, evict: bool = True) -> dict:
    """`evict=False` (`--limit`): plain dynmig, the baselines and the oracle only."""
    arrivals = grid.trace(cell, seed)
    start = arrivals[int(len(arrivals) * grid.WARM)][0]
    hours = (arrivals[-1][0] - start) * eviction.SECONDS_PER_UNIT / 3600.0
    t0 = time.perf_counter()
    plain = grid.replay(bench.Dynmig, cell, arrivals, bench.apply, bench.release)
    others = baselines(cell, arrivals)
    t1 = time.perf_counter()
    harness = eviction.Harness(
        bench.Dynmig, bench.apply, bench.release, bench.gpu_states, lambda mems: grid.class_of(cell, mems)
    )
    evicting = (
        eviction.churn_evicting(
            arrivals, grid.make_fleet(cell.fleet), harness, RANKING, window=start, feed=True
        )
        if evict
        else None
    )
    t2 = time.perf_counter()
    oracle = repacking(cell, arrivals)
    t3 = time.perf_counter()
    return {
        "cell": cell.label,
        "seed": seed,
        "hours": hours,
        "plain": {"refused_work": plain["refused_work"], "refused": plain["refused"]},
        "baselines": others,
        "evicting": None
        if evicting is None
        else {
            "refused_work": evicting.window_refused_work,
            "refused": evicting.window_refused,
            "evictions": evicting.window_evictions,
            "evictions_per_hour": evicting.window_evictions / hours if hours else 0.0,
            "peak_per_minute": evicting.peak_per_minute,
            "rate_limited": evicting.rate_limited,
            "no_set": evicting.no_set,
        },
        "oracle": oracle,
        "seconds": {"plain and baselines": t1 - t0, "evicting": t2 - t1, "oracle": t3 - t2},
    }


def _run_unit(unit: tuple[grid.Cell, int, bool]) -> dict:
    """`run_cell` of one (cell, seed, evict), for `--jobs`."""
    return run_cell(*unit)


def _ratio(a: float, b: float) -> float | None:
    if not b:
        return 1.0 if not a else None
    return a / b


def _fmt(x: float | None) -> str:
    return "inf" if x is None else f"{x:.2f}"


def _seed_line(r: dict) -> str:
    o, e, p = r["oracle"], r["evicting"], r["plain"]
    best = min(r["baselines"], key=r["baselines"].get)
    evicting = (
        ""
        if e is None
        else f"evicting {e['refused_work']:.0f} ({e['refused']}), evictions {e['evictions']} = "
        f"{e['evictions_per_hour']:.1f}/h (peak {e['peak_per_minute']}/min), "
    )
    return (
        f"{r['cell']} seed {r['seed']}: refused GPU-min plain {p['refused_work']:.0f} ({p['refused']}), "
        f"best baseline {best} {r['baselines'][best]:.0f}, {evicting}oracle {o['refused_work']:.0f} "
        f"({o['refused']}; verdicts {o['verdicts']}); "
        f"seconds {', '.join(f'{k} {v:.0f}' for k, v in r['seconds'].items())}"
    )


def summarise(cell: grid.Cell, mine: list[dict]) -> dict:
    """One cell over its seeds: refused GPU-minutes summed, the ratios, the evictions per hour."""
    plain = sum(r["plain"]["refused_work"] for r in mine)
    names = mine[0]["baselines"]
    best = min(names, key=lambda n: sum(r["baselines"][n] for r in mine))
    base = sum(r["baselines"][best] for r in mine)
    evicts = [r["evicting"] for r in mine if r["evicting"] is not None]
    evict = sum(e["refused_work"] for e in evicts) if evicts else None
    orc = sum(r["oracle"]["refused_work"] for r in mine)
    hours = sum(r["hours"] for r in mine)
    ratio = _ratio(evict, orc) if evict is not None else None
    return {
        "cell": cell.label,
        "plain": plain,
        "best_baseline": best,
        "best_baseline_work": base,
        "evicting": evict,
        "oracle": orc,
        "ratio": ratio,
        "ratio_per_seed": [
            _ratio(r["evicting"]["refused_work"], r["oracle"]["refused_work"]) for r in mine if r["evicting"]
        ],
        "plain_over_oracle": _ratio(plain, orc),
        "plain_over_best_baseline": _ratio(plain, base),
        "oracle_over_best_baseline": _ratio(orc, base),
        "evictions_per_hour": sum(e["evictions"] for e in evicts) / hours if evicts and hours else None,
        "oracle_refusals_proved": sum(r["oracle"]["verdicts"].get(INFEASIBLE, 0) for r in mine),
        "oracle_refusals_undecided": sum(
            r["oracle"]["verdicts"].get(v, 0) for r in mine for v in (UNKNOWN, NOT_SEARCHED)
        ),
        "met": ratio is not None and ratio <= TARGET,
    }


def _cell_line(s: dict) -> str:
    evicting = (
        ""
        if s["evicting"] is None
        else f"evicting {s['evicting']:.0f}, evicting/oracle {_fmt(s['ratio'])}x (per seed "
        f"{', '.join(_fmt(x) for x in s['ratio_per_seed'])}; target <= {TARGET}x: "
        f"{'met' if s['met'] else 'NOT met'}), evictions {s['evictions_per_hour']:.1f} per hour; "
    )
    return (
        f"  {s['cell']}: plain {s['plain']:.0f}, best baseline {s['best_baseline']} "
        f"{s['best_baseline_work']:.0f}, oracle {s['oracle']:.0f} (its refusals: {s['oracle_refusals_proved']} "
        f"proved infeasible, {s['oracle_refusals_undecided']} undecided); {evicting}plain/oracle "
        f"{_fmt(s['plain_over_oracle'])}x; plain/best baseline {_fmt(s['plain_over_best_baseline'])}x; "
        f"oracle/best baseline {_fmt(s['oracle_over_best_baseline'])}x"
    )


def main(argv: list[str]) -> int:
    tuning = "--tuning" in argv
    limit = "--limit" in argv
    seeds = grid.TUNING_SEEDS if tuning else grid.HELD_OUT_SEEDS
    fleets = tuple(argv[argv.index("--fleets") + 1].split(",")) if "--fleets" in argv[:-1] else FLEETS
    unknown = [f for f in fleets if f not in grid.FLEETS]
    try:
        loads = _loads(argv)
        jobs = grid.jobs_option(argv)
        if unknown:
            raise ValueError(f"--fleets: {unknown[0][:40]!r} is not one of {', '.join(grid.FLEETS)}")
    except ValueError as error:
        print(f"defrag_grid.py: {error}", file=sys.stderr)
        return 2
    print(
        f"defrag against its limit: {len(fleets) * len(loads)} cells ({grid.BASE.name}, "
        f"load {', '.join(map(str, loads))}), "
        f"{'tuning' if tuning else 'held-out'} seeds {', '.join(map(str, seeds))}; {grid.ARRIVALS} arrivals "
        f"per trace, the first {grid.WARM:.0%} not counted; "
        + ("no eviction replay (--limit); " if limit else f"eviction ranking '{RANKING.name}'; ")
        + f"oracle budget {ORACLE_BUDGET:g} s per trace, {ORACLE_TIME_LIMIT:g} s per solve",
        flush=True,
    )
    rows = []
    units = [(cell, seed, not limit) for cell in cells(fleets, loads) for seed in seeds]
    for row in grid.in_order(_run_unit, units, jobs):
        rows.append(row)
        print(_seed_line(row), flush=True)
    print("\nper cell, summed over seeds (refused GPU-minutes):")
    summary = [summarise(cell, [r for r in rows if r["cell"] == cell.label]) for cell in cells(fleets, loads)]
    for s in summary:
        print(_cell_line(s), flush=True)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    out = (
        RESULTS if not tuning and not limit else RESULTS.with_suffix(".limit.json" if limit else ".try.json")
    )
    out.write_text(json.dumps({"seeds": list(seeds), "rows": rows, "cells": summary}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
