"""The packing grid: what users lose to each placement policy, over fleets, demand mixes and loads.

Primary figure: refused GPU-work, each refused pod's share of a GPU (its smallest covering placement
on the fleet's cheapest model for it, over the GPU's slices) times its lifetime, in GPU-minutes
(trace time read as minutes), and time-averaged utilisation (occupied slices over all slices,
integrated over time). Refusal counts are secondary.

Beside it, the same expectation with less noise: **expected refused GPU-work**, each refused pod
weighed at its class's mean lifetime instead of the lifetime its trace drew. No policy sees a pod's
lifetime, and a refused pod's lifetime changes nothing after its refusal (it never runs), so given
the refusals the drawn lifetime is an independent exponential draw of that mean: both figures have
the same expectation, but the drawn one adds the spread of a few long lifetimes. Where whole-GPU
jobs of 200-minute mean lifetimes are 4 % of arrivals, ten refused jobs decide a trace, and which
ten drew the longest lifetimes moves a cell's ratio by a third while saying nothing about the
placement (docs/packing.md, "Two estimates of one loss"). Both are counted after a warm-up (the first
`WARM` of the arrivals are replayed but not counted), so a trace is judged at its steady state.

- Fleets (`FLEETS`): 64 GPUs (8 nodes × 8) of one catalog family with HAMi's default allowlist each
  (A100-40GB, A100-80GB, H100-80GB, H200, B200, RTX PRO 6000), and the placement bench's mixed fleet
  (A100-40GB, H100-80GB and RTX PRO 6000 nodes in turn, 9 nodes × 8).
- Demand (`MIXES`): Poisson arrivals of pods in four single-device size classes, 1g, 2g, 3g and a
  whole GPU. A class asks for the memory of the pool's profile of that many compute slices (on the
  RTX PRO 6000, which has no 3g, a 3g asks for 3/7 of an A100-40GB's 3g-to-GPU memory ratio, i.e. its
  2g); on the mixed fleet the A100-40GB asks of the placement bench (4000, 9000, 18000 MiB). The
  services mix (1g:2g:3g = 50:30:20, mean lifetime 30) with a whole-GPU share of 0, 5, 10, 20 or 30 %
  of arrivals living 1×, 3× or 10× the services; a 1g-heavy inference mix; a notebook mix; a
  training mix (`TRAINING`) whose pods also ask for 2, 4 or 8 whole GPUs on one node (5, 2 and 1 % of
  arrivals, beside 12 % single whole-GPU jobs, all living 3× the services). Lifetimes are exponential.
- Loads: offered work (each pod at its cheapest model) over the fleet's GPUs: 0.8, 0.95, 1.05.
- Cells (`cells`): every fleet at the 10 %/3× mix at every load; every mix on the A100-40GB and
  H100-80GB pools at both high loads. `QUICK_CELLS` is a subset for trying a change.
- Seeds: `TUNING_SEEDS` are the ones a change may be tried and tuned on; `HELD_OUT_SEEDS` are the
  only ones the figures in docs/packing.md and the README are taken from.
- Fairness: every policy replays the same trace on a fresh fleet, through the placement bench's
  `apply` (every pick checked the same way) and `release`; departures due by an arrival are
  released before it; a refused pod is dropped for every policy alike.
"""

from __future__ import annotations

import heapq
import math
import random
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import cache

from _baselines import BGpu, BNode, Pick, catalog_node

from _packing.eviction import gpu_share

Mems = tuple[int | None, ...]
Arrival = tuple[float, Mems, float]

# Ten of each (the grid replays in about 6 minutes with --jobs 2 here): at three seeds a cell where
# whole-GPU jobs are 4 % of arrivals is decided by ten or twenty refusals, and the best of seven
# baselines picked per cell after the fact is the luckiest of seven. The first three of each were the
# grid's only seeds until 2026-12-06; idle reuse's replay (`--grid --reuse`) keeps those.
TUNING_SEEDS = tuple(range(11, 21))
HELD_OUT_SEEDS = tuple(range(101, 111))
ARRIVALS = 3000
WARM = 0.15  # share of the arrivals replayed before counting starts
SERVICE_LIFE = 30.0
NODES, GPUS_PER_NODE = 8, 8

FLEETS: dict[str, tuple[str, ...]] = {
    "A100-40GB": ("A100-SXM4-40GB",),
    "A100-80GB": ("A100-SXM4-80GB",),
    "H100-80GB": ("H100-SXM5-80GB",),
    "H200": ("H200",),
    "B200": ("B200",),
    "RTX PRO 6000": ("RTX-PRO-6000",),
    "mixed": ("A100-SXM4-40GB", "H100-SXM5-80GB", "RTX-PRO-6000"),
}
CLASSES = ("1g", "2g", "3g", "whole", "2 GPUs", "4 GPUs", "8 GPUs")
MULTI = {"2 GPUs": 2, "4 GPUs": 4, "8 GPUs": 8}  # whole GPUs on one node
MIXED_ASKS = {"1g": 4000, "2g": 9000, "3g": 18000, "whole": None}


@dataclass(frozen=True)
class Mix:
    """Arrival weights and mean lifetimes per size class."""

    name: str
    classes: tuple[tuple[str, float, float], ...]  # (class, weight, mean lifetime)


def services(whole: float, life_x: float) -> Mix:
    rest = 1.0 - whole
    classes = [
        ("1g", 0.5 * rest, SERVICE_LIFE),
        ("2g", 0.3 * rest, SERVICE_LIFE),
        ("3g", 0.2 * rest, SERVICE_LIFE),
    ]
    if whole:
        classes.append(("whole", whole, SERVICE_LIFE * life_x))
    return Mix(f"{round(whole * 100)}% whole {life_x:g}x", tuple(classes))


BASE = services(0.10, 3.0)
INFERENCE = Mix("inference", (("1g", 0.72, 20.0), ("2g", 0.24, 40.0), ("whole", 0.04, 200.0)))
NOTEBOOK = Mix(
    "notebook", (("1g", 0.2, 60.0), ("2g", 0.45, 120.0), ("3g", 0.25, 120.0), ("whole", 0.1, 240.0))
)
# Multi-GPU training: 2, 4 and 8 whole GPUs on one node beside the services and whole-GPU jobs.
TRAINING = Mix(
    "training",
    (
        ("1g", 0.40, SERVICE_LIFE),
        ("2g", 0.24, SERVICE_LIFE),
        ("3g", 0.16, SERVICE_LIFE),
        ("whole", 0.12, SERVICE_LIFE * 3),
        ("2 GPUs", 0.05, SERVICE_LIFE * 3),
        ("4 GPUs", 0.02, SERVICE_LIFE * 3),
        ("8 GPUs", 0.01, SERVICE_LIFE * 3),
    ),
)
MIXES = (
    services(0.0, 3.0),
    services(0.05, 3.0),
    BASE,
    services(0.20, 3.0),
    services(0.30, 3.0),
    services(0.10, 1.0),
    services(0.10, 10.0),
    INFERENCE,
    NOTEBOOK,
    TRAINING,
)
LOADS = (0.8, 0.95, 1.05)


@dataclass(frozen=True)
class Cell:
    fleet: str
    mix: Mix
    load: float

    @property
    def label(self) -> str:
        return f"{self.fleet} / {self.mix.name} / {self.load:g}"

    @property
    def uniform(self) -> bool:
        return len(FLEETS[self.fleet]) == 1

    @property
    def whole_share(self) -> float:
        total = sum(w for _, w, _ in self.mix.classes)
        return sum(w for c, w, _ in self.mix.classes if c == "whole" or c in MULTI) / total


def cells() -> list[Cell]:
    out = [Cell(f, BASE, load) for f in FLEETS for load in LOADS]
    for fleet in ("A100-40GB", "H100-80GB"):
        out += [Cell(fleet, m, load) for m in MIXES if m != BASE for load in LOADS[1:]]
    return out


QUICK_CELLS = (
    Cell("A100-40GB", BASE, 0.95),
    Cell("A100-40GB", BASE, 1.05),
    Cell("A100-40GB", services(0.30, 3.0), 0.95),
    Cell("H100-80GB", INFERENCE, 1.05),
    Cell("RTX PRO 6000", BASE, 1.05),
    Cell("mixed", BASE, 0.95),
)


@cache
def _model(model: str) -> BGpu:
    return catalog_node("template", "template", model, 1).gpus[0]


def make_fleet(fleet: str) -> list[BNode]:
    """A fresh fleet (`catalog_node`'s, with each model's published profiles read once)."""
    models = FLEETS[fleet]
    count = NODES if len(models) == 1 else 3 * len(models)
    out = []
    for n in range(count):
        t = _model(models[n % len(models)])
        name = f"node-{n:03d}"
        gpus = [
            BGpu(name, f"GPU-{n:03d}-{i}", i, t.type, t.profiles, t.total_mem) for i in range(GPUS_PER_NODE)
        ]
        out.append(BNode(name, gpus))
    return out


@cache
def asks(fleet: str) -> dict[str, int | None]:
    """The memory each size class asks for on this fleet (None: a whole GPU)."""
    if len(FLEETS[fleet]) > 1:
        return dict(MIXED_ASKS)
    gpu = make_fleet(fleet)[0].gpus[0]
    out: dict[str, int | None] = {"whole": None}
    for k in (1, 2, 3):
        exact = [p.memory_mb for p in gpu.profiles if p.slice_count == k]
        # no profile of k compute slices: k sevenths of the GPU's memory, as an A100 sizes them
        out[f"{k}g"] = exact[0] if exact else gpu.total_mem * 20096 // 40960 * k // 3
    return out


def mems_of(fleet: str, c: str) -> Mems:
    """What a pod of size class `c` asks on `fleet`: one device's memory, or N whole GPUs."""
    return (None,) * MULTI[c] if c in MULTI else (asks(fleet)[c],)


def trace(cell: Cell, seed: int) -> list[Arrival]:
    """`ARRIVALS` Poisson arrivals whose offered work is `cell.load` times the fleet's GPUs."""
    nodes = make_fleet(cell.fleet)
    gpus = sum(len(n.gpus) for n in nodes)
    weights = [w for _, w, _ in cell.mix.classes]
    per_arrival = sum(
        w * gpu_share(nodes, mems_of(cell.fleet, c)) * life for c, w, life in cell.mix.classes
    ) / sum(weights)
    rate = cell.load * gpus / per_arrival
    rng = random.Random(f"{cell.label}/{seed}")
    t, out = 0.0, []
    for _ in range(ARRIVALS):
        t += rng.expovariate(rate)
        c, _, life = rng.choices(cell.mix.classes, weights)[0]
        out.append((t, mems_of(cell.fleet, c), rng.expovariate(1 / life)))
    return out


def class_of(cell: Cell, mems: Mems) -> str:
    if len(mems) > 1:
        return f"{len(mems)} GPUs"
    return {m: c for c, m in asks(cell.fleet).items()}[mems[0]]


Apply = Callable[[object, list[Pick], int, Mems], None]
Release = Callable[[object, list[Pick], int], None]


def replay(policy_cls, cell: Cell, arrivals: Sequence[Arrival], apply: Apply, release: Release) -> dict:
    """One policy on one trace: refused work and count (per class), offered work, utilisation."""
    nodes = make_fleet(cell.fleet)
    policy = policy_cls(nodes)
    gpus: list[BGpu] = [g for n in nodes for g in n.gpus]
    capacity = sum(g.axis for g in gpus)
    start = arrivals[int(len(arrivals) * WARM)][0]
    shares: dict[Mems, float] = {}
    departures: list[tuple[float, int]] = []
    live: dict[int, list[Pick]] = {}
    used = 0
    area, last = 0.0, start
    refused: Counter[str] = Counter()
    lost: Counter[str] = Counter()
    expected: Counter[str] = Counter()
    mean_life = {c: life for c, _, life in cell.mix.classes}
    offered = 0.0

    def advance(t: float) -> None:
        nonlocal area, last
        if t > start:
            area += used * (t - max(last, start))
            last = t

    for key, (t, mems, life) in enumerate(arrivals):
        while departures and departures[0][0] <= t:
            when, k = heapq.heappop(departures)
            advance(when)
            picks = live.pop(k)
            used -= sum(p.size for _, p, _ in picks)
            if hasattr(policy, "ending"):  # idle reuse keeps an ended pod's instances (_packing/reuse.py)
                policy.ending(when, k, picks)
            release(policy, picks, k)
            if hasattr(policy, "departed"):  # a learning policy is told a lifetime once it has ended
                policy.departed(arrivals[k][1], arrivals[k][2])
        advance(t)
        if hasattr(policy, "arriving"):  # the arrival's time and number (its namespace, for idle reuse)
            policy.arriving(t, key)
        if hasattr(policy, "arrived"):
            policy.arrived(t, mems)
        picks = policy.decide(list(mems))
        counted = t >= start
        share = shares.setdefault(mems, gpu_share(nodes, mems))
        if counted:
            offered += share * life
        if picks is None:
            if counted:
                c = class_of(cell, mems)
                refused[c] += 1
                lost[c] += share * life
                expected[c] += share * mean_life[c]
            continue
        apply(policy, picks, key, mems)
        used += sum(p.size for _, p, _ in picks)
        live[key] = picks
        heapq.heappush(departures, (t + life, key))
    end = arrivals[-1][0]
    advance(end)
    extra = {"reuse": policy.report()} if hasattr(policy, "report") else {}
    return {
        **extra,
        "refused_work": sum(lost.values()),
        "expected_refused_work": sum(expected.values()),
        "refused": sum(refused.values()),
        "refused_work_by_class": dict(lost),
        "refused_by_class": dict(refused),
        "offered_work": offered,
        "utilisation": area / (capacity * (end - start)) if end > start else 0.0,
    }


def in_order(fn: Callable, items: Iterable, jobs: int) -> Iterator:
    """`fn` over `items` in `jobs` processes (in this one when 1), results in `items`' order: the
    traces are seeded and the replays deterministic, so the figures do not depend on `jobs`."""
    if jobs <= 1:
        yield from map(fn, items)
        return
    with ProcessPoolExecutor(jobs) as pool:
        yield from pool.map(fn, items)


def number_option(
    argv: list[str], flag: str, default: float, low: float, high: float, whole: bool = False
) -> float:
    """A number given to `flag` (`default` when absent); ValueError naming the flag outside [low, high]
    or, with `whole`, when it is not a whole number."""
    if flag not in argv[:-1]:
        return default
    text = argv[argv.index(flag) + 1]
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{flag}: {text[:40]!r} is not a number") from None
    if not low <= value <= high:
        raise ValueError(f"{flag}: {text[:40]!r} is not from {low:g} to {high:g}")
    if whole and not value.is_integer():
        raise ValueError(f"{flag}: {text[:40]!r} is not a whole number")
    return value


def jobs_option(argv: list[str]) -> int:
    """`--jobs N` (1 when absent): 1 to 64 processes; ValueError naming the flag."""
    return int(number_option(argv, "--jobs", 1, 1, 64, whole=True))


NODE_ARM = (
    "dynmig+nodes"  # dynmig with node slots priced (opt-in in serve): an arm beside it, never a baseline
)


def ratio(a: float, b: float) -> float:
    if not b:
        return 1.0 if not a else math.inf
    return a / b


def _against_best(
    runs: list[dict[str, dict]], ours: str, key: str
) -> tuple[dict[str, float], str, list[float]]:
    """Each policy's `key` summed over the seeds, the best baseline by it, and ours over the best per seed."""
    work = {n: sum(r[n][key] for r in runs) for n in runs[0]}
    baselines = [n for n in work if n not in (ours, NODE_ARM)]
    best = min(baselines, key=lambda n: (work[n], n))
    per_seed = [ratio(r[ours][key], min(r[n][key] for n in baselines)) for r in runs]
    return work, best, per_seed


RESAMPLES, LEVEL = 2000, 0.90


def interval(pairs: Sequence[tuple[float, float]], seed: str) -> tuple[float, float]:
    """A bootstrap interval (`LEVEL`, over `RESAMPLES` draws of the seeds with replacement, seeded by
    `seed` so a run repeats) of sum(ours) / sum(theirs) over per-seed (ours, theirs) pairs. The
    baseline stays the one picked on all seeds, the luckiest of seven: the interval leans against
    dynmig, not for it."""
    rng = random.Random(seed)
    n = len(pairs)
    draws = sorted(
        ratio(sum(pairs[i][0] for i in picks), sum(pairs[i][1] for i in picks))
        for picks in (rng.choices(range(n), k=n) for _ in range(RESAMPLES))
    )
    cut = int(RESAMPLES * (1 - LEVEL) / 2)
    return draws[cut], draws[RESAMPLES - 1 - cut]


def summarise(cell: Cell, runs: list[dict[str, dict]], ours: str = "dynmig") -> dict:
    """Per cell over its seeds: each policy's refused work (sum), the best baseline's, and the ratio;
    the same for the expected refused work (`expected_*`)."""
    names = list(runs[0])
    work, best, per_seed = _against_best(runs, ours, "refused_work")
    expected, best_expected, per_seed_expected = _against_best(runs, ours, "expected_refused_work")
    return {
        "cell": cell.label,
        "fleet": cell.fleet,
        "mix": cell.mix.name,
        "load": cell.load,
        "uniform": cell.uniform,
        "whole_share": cell.whole_share,
        "refused_work": work,
        "refused": {n: sum(r[n]["refused"] for r in runs) for n in names},
        "utilisation": {n: statistics.fmean(r[n]["utilisation"] for r in runs) for n in names},
        "offered_work": sum(r[ours]["offered_work"] for r in runs),
        "refused_work_by_class": {
            n: dict(sum((Counter(r[n]["refused_work_by_class"]) for r in runs), Counter()))
            for n in (ours, best)
        },
        "best_baseline": best,
        "ratio": ratio(work[ours], work[best]),
        "ratio_per_seed": per_seed,
        "ratio_interval": interval(
            [(r[ours]["refused_work"], r[best]["refused_work"]) for r in runs], cell.label
        ),
        "expected_refused_work": expected,
        "best_baseline_expected": best_expected,
        "ratio_expected": ratio(expected[ours], expected[best_expected]),
        "ratio_expected_per_seed": per_seed_expected,
        "ratio_expected_interval": interval(
            [(r[ours]["expected_refused_work"], r[best_expected]["expected_refused_work"]) for r in runs],
            cell.label,
        ),
        **({"ratio_nodes": ratio(work[NODE_ARM], work[best])} if NODE_ARM in work else {}),
    }


MEDIAN_TARGET = 0.7  # issue 29: every cell ≤ 1.0× the best baseline, the median cell ≤ 0.7×


def verdict(summaries: list[dict], key: str = "ratio") -> list[str]:
    """The issue's targets, each met or not, from the cells' summaries, judged by `key` ("ratio": the
    drawn lifetimes' refused work; "ratio_expected": the expected refused work)."""
    ratios = [s[key] for s in summaries]
    worst = max(summaries, key=lambda s: s[key])
    heavy = [s for s in summaries if s["uniform"] and s["whole_share"] >= 0.10]
    heavy_worst = max(heavy, key=lambda s: s[key]) if heavy else None
    median = statistics.median(ratios)
    below = sum(1 for s in summaries if s[f"{key}_interval"][1] < 1.0)
    above = sum(1 for s in summaries if s[f"{key}_interval"][0] > 1.0)
    lines = [
        f"every cell ≤ 1.00× the best baseline: {'met' if worst[key] <= 1.0 else 'NOT met'} "
        f"(worst {worst[key]:.2f}× in {worst['cell']}; {LEVEL:.0%} bootstrap interval over the seeds "
        f"below 1.0× in {below} of {len(summaries)} cells, above it in {above})",
        f"median cell ≤ {MEDIAN_TARGET:.2f}×: {'met' if median <= MEDIAN_TARGET else 'NOT met'} (median {median:.2f}×, "
        f"range {min(ratios):.2f}-{max(ratios):.2f}×)",
    ]
    if heavy_worst is not None:
        lines.append(
            f"uniform pools with ≥ 10 % whole-GPU arrivals ≤ 0.80×: "
            f"{'met' if heavy_worst[key] <= 0.8 else 'NOT met'} (worst {heavy_worst[key]:.2f}× in "
            f"{heavy_worst['cell']}, {len(heavy)} cells)"
        )
    return lines
