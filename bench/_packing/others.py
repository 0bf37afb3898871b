"""Each policy against the best of the other baselines: is a target of the form "every cell ≤ 1.0× the
best baseline, the median cell ≤ M×" within reach of any placement rule at all?

From the per-cell figures a run already has (each policy's refused GPU-work per cell), every policy
of the run (each baseline and each dynmig arm) is divided, cell by cell, by the best of the baselines
other than itself. A policy is never its own yardstick, and dynmig's arms (`ARMS`) are never
yardsticks: they are what is judged. So dynmig's figure is the bench's usual ratio, and a baseline's
figure says how it fares against the six others: when no baseline meets the target against the
rest, the target asks for more than any simple rule gives on these cells.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from _packing.grid import NODE_ARM, ratio

ARMS = ("dynmig", NODE_ARM)


def against_others(summaries: Sequence[dict], median_target: float, arms: Sequence[str] = ARMS) -> dict:
    """Per policy over the judged cells (a cell without a "judged" key counts as judged) it ran in: its refused
    work over the best other baseline's in each cell, the worst cell, the median, how many cells are
    above 1.0× and whether both targets (every cell ≤ 1.0×, median ≤ `median_target`) are met."""
    judged = [s for s in summaries if s.get("judged", True)]
    names = dict.fromkeys(n for s in judged for n in s["refused_work"])  # an arm may run in some cells only
    out = {}
    for name in names:
        per_cell = {
            s["cell"]: _over_others(s["refused_work"], name, arms)
            for s in judged
            if name in s["refused_work"]
        }
        worst = max(per_cell, key=lambda c: per_cell[c])
        median = statistics.median(per_cell.values())
        above = sum(r > 1.0 for r in per_cell.values())
        out[name] = {
            "per_cell": per_cell,
            "worst": per_cell[worst],
            "worst_cell": worst,
            "median": median,
            "above": above,
            "cells": len(per_cell),
            "met": per_cell[worst] <= 1.0 and median <= median_target,
        }
    return {"median_target": median_target, "arms": list(arms), "policies": out}


def _over_others(work: dict[str, float], name: str, arms: Sequence[str]) -> float:
    others = [n for n in work if n != name and n not in arms]
    if not others:
        raise ValueError(f"no baseline other than {name!r} in the cell: nothing to compare with")
    return ratio(work[name], min(work[n] for n in others))


def table(result: dict, columns: Sequence[str] = ()) -> list[str]:
    """The printed table: one line per policy, its ratio in each of `columns` (cell labels; none: the
    summary only), the worst cell, the median, the cells above 1.0× and the verdict."""
    lines = [
        f"{'policy':<18} "
        + "".join(f"{f'c{i + 1}':>7}" for i in range(len(columns)))
        + f"{'worst':>8} {'median':>7} {'above 1.0×':>11}  {'targets':<8} worst cell"
    ]
    for name, p in result["policies"].items():
        cells = "".join(f"{p['per_cell'][c]:>6.2f}×" for c in columns)
        lines.append(
            f"{name:<18} {cells}{p['worst']:>7.2f}× {p['median']:>6.2f}× {p['above']:>4} of {p['cells']:<4}  "
            f"{'met' if p['met'] else 'not met':<8} {p['worst_cell']}"
        )
    lines += [f"  c{i + 1}: {c}" for i, c in enumerate(columns)]
    return lines
