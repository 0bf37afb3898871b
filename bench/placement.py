"""Placement benchmark: dynmig's engine against baselines and against an oracle, on churn traces.

Run by `make bench` as `python bench/placement.py` (`--quick`: one seed; `--workload mixed` or
`--workload inference-heavy`: that workload only). Prints a table per workload and load and writes
bench/results/placement.json. Seeded and deterministic apart from the timings.

`--evict-only` (for trying a change to the defrag advisor; about 7 minutes on two shared cores, most
of it the overload traces): per trace only plain dynmig with the oracle at its refusals and the defrag
eviction replays, printed as the full run prints them (nothing written); with `--load near` (under a
minute) or `--load overload` that load only, `--seeds A,B` those seeds, `--ranking NAME` (e.g. "evict:
all opted in, move only") that ranking beside plain dynmig's.
`--churn-only` (about 20 minutes on two shared cores, most of it the baselines scanning the fleet;
`--quick` one seed, `--workload NAME` one workload): the churn traces replayed by dynmig and the
baselines alone, refused work per seed (no oracle, eviction or timing).
`--advise-cost` prints what one advice costs on a packed fleet of 1,000 nodes (bench/_packing/advise_cost.py).
`--grid` runs the packing grid (bench/_packing/grid.py: uniform pools of every catalog family and the
mixed fleet, demand mixes, loads; refused GPU-work against the strong simple baselines) on its held-out
seeds and writes bench/results/packing-grid.json and docs/packing-grid.png (about 14 minutes here, 7 with `--jobs 2`);
`--grid --quick` a few cells, `--grid --mix NAME` one mix's cells (e.g. training, the 2/4/8-GPU pods),
`--grid --fleet NAME` one fleet's cells (e.g. mixed), `--keep-nodes-whole` (with `--grid` or `--traces`)
dynmig with the engine's opt-in empty-node term (`PlacementIndex(keep_nodes_whole=True)`; a try),
`--grid --tuning` the tuning seeds (those write *.try.* in bench/results/);
`--grid --jobs N` (and `--grid --reuse --jobs N`) replays in N processes (the same figures).
`--grid --reuse` replays the grid with dynmig alone, idle reuse off and on (bench/_packing/reuse.py: the
plugin's idle instances, the extender's moves onto and around them), refused GPU-work on/off per cell
and overall (775 s on a busy machine here; `--quick` the six cells issue 30 names; `--seeds A,B`,
`--idle-ttl M` trace-minutes, `--idle-per-gpu N`, `--namespaces N`); writes bench/results/packing-reuse.json.

- Churn: Poisson arrivals and exponential lifetimes over a mixed fleet of A100-40GB, H100-80GB and
  RTX PRO 6000 nodes, in two workload shapes (`mixed`: 1g- to whole-GPU-sized requests and some
  two-device pods; `inference-heavy`: 1g/2g services with rare long whole-GPU jobs), each at two
  offered loads (near capacity and overload) and three seeds; figures are ranges over the seeds. A
  refused pod is dropped (not retried). "Fragmentation refusals" are refusals while the fleet had, in
  total, at least as many free slices as the pod needs on some GPU model. Utilisation is the mean
  over arrivals of occupied slices / all slices. Refused work weighs each refused pod by what it
  asked for: its share of a GPU on its cheapest model (as the offered load counts it) times its
  lifetime, in GPU-minutes (trace time read as minutes, as the defrag replay reads it). A count treats
  a refused 1g service and a refused whole-GPU job alike, so a policy that leaves no GPU empty
  refuses long whole-GPU jobs and admits more short services; the work shows what that costs.
  Fairness: every policy gets a fresh copy of the same fleet and replays the same trace (arrivals,
  lifetimes, so the same departure times); departures due by an arrival are released before it is
  decided; a refused pod is dropped for every policy alike; every pick is checked the same way (legal,
  non-overlapping, large enough, one node) and refusals are counted and classified by the same code,
  from the shared fleet model, not from the policy.
- Baselines (bench/_baselines): first-fit; best-fit (most-filled GPU, least capacity lost); HAMi's
  #2378 and #2855 in-GPU rules, each with HAMi's chart default (node binpack, GPU spread) and with
  binpack/binpack, so the in-GPU rule is compared under dynmig's GPU choice too.
- Oracle (bench/_packing/oracle.py): at every one of dynmig's refusals, could the pods then running
  plus the refused one fit if every running instance could be moved? Each refusal is proved
  infeasible (integer programs solved by HiGHS: a node-free relaxation, then the exact program with
  nodes), shown packable (a legal packing, checked like a policy's picks), unknown (a solve's time
  limit) or not searched (the trace's time budget); see ORACLE_MEANS. dynmig/oracle is dynmig's
  refusals over the oracle's (proved, or proved + unknown + not searched), per load and request kind.
  The repacker (`churn_repacking`) is the oracle as a policy on its own replay: dynmig's engine, and at
  each of its refusals the fleet re-laid to the oracle's packing; dynmig/repacker likewise.
- Defrag eviction (bench/_packing/eviction.py): dynmig's engine with its defrag eviction mode on, the
  real advisor naming each set; per ranking of who may evict whom, refusals and evictions per trace.
- HAMi's E2E sequences (bench/_packing/hami_e2e.py): the A100-40GB and RTX PRO 6000 cases of HAMi's
  `hack/hami-mig-e2e.sh` on one GPU; each policy is scored by the script's expectations it misses.
- Decision time: a 5,000-node × 8-GPU fleet filled at random to about 60 % of its slices; each policy
  decides sampled pods against it (nothing applied). dynmig's index is built once beforehand, as the
  scheduler keeps it between requests; the baselines scan the fleet as HAMi does. dynmig makes three
  passes over its 400 pods and is judged on the median pass's wall-clock p99; CPU time per decision is
  printed beside it, since on a shared machine a slow decision is mostly one the OS preempted.
"""

from __future__ import annotations

import heapq
import json
import math
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _baselines import (
    BestFit,
    BGpu,
    BNode,
    FirstFit,
    Hami2378,
    Hami2378Binpack,
    Hami2855,
    Hami2855Binpack,
    Pick,
    catalog_node,
)
from _packing import advise_cost, eviction, grid, others, plot, reuse, traces
from _packing.hami_e2e import TRACES, replay
from _packing.oracle import INFEASIBLE, NOT_SEARCHED, PACKED, UNKNOWN, VERDICTS, Oracle, legal_packing
from _packing.rules import RULES, memoized

from mig.catalog import find_model
from mig.placement import ContainerRequest, GpuState, PlacementIndex, Plan, PodRequest
from mig.placement.demand import LIFETIMES, DemandEstimate

SEED = 20240611
MODELS = ("A100-SXM4-40GB", "H100-SXM5-80GB", "RTX-PRO-6000")
# (weight, device memories, mean lifetime): memory sizes hit 1g/2g/3g/4g/7g on an A100-40GB.
MIX = (
    (40, (4000,), 30.0),  # inference, 1g-sized
    (22, (9000,), 60.0),  # notebooks, 2g-sized
    (12, (18000,), 90.0),  # jobs, 3g-sized
    (8, (30000,), 120.0),  # jobs, 4g-sized (7g on an A100-40GB, 3g.40gb on an H100)
    (5, (None,), 150.0),  # jobs, a whole GPU (7g)
    (8, (4000, 4000), 40.0),  # two-device inference
    (5, (18000, 18000), 90.0),  # two-device jobs
)
# The second shape: inference-heavy, 1g/2g services with rare whole-GPU jobs that run long.
INFERENCE = (
    (60, (4000,), 20.0),  # inference, 1g-sized
    (30, (9000,), 40.0),  # inference, 2g-sized
    (6, (4000, 4000), 30.0),  # two-device inference
    (2, (None,), 200.0),  # training jobs, a whole GPU
)
RESULTS = Path(__file__).resolve().parent / "results" / "placement.json"


# ---- fleet ------------------------------------------------------------------------------------
def make_fleet(nodes: int, gpus_per_node: int) -> list[BNode]:
    return [
        catalog_node(f"node-{n:05d}", f"{n:05d}", MODELS[n % len(MODELS)], gpus_per_node)
        for n in range(nodes)
    ]


def gpu_states(nodes: list[BNode]) -> list[GpuState]:
    return [
        GpuState(g.node, g.uuid, g.type, g.profiles, tuple(p for p, _ in g.allocs.values()), True, g.index)
        for n in nodes
        for g in n.gpus
    ]


class Dynmig:
    """Adapter: dynmig's PlacementIndex behind the baselines' interface.

    A replay that calls `arrived` (every arrival, before its decision: the filter sees it) and
    `departed` (a pod's asks and lifetime when it ends) feeds the engine's demand estimate, as the
    extender would (`mig.placement.demand`); the index is given the estimated mix every
    `REFRESH` observations. Nothing about a pod's future is told: a lifetime only once it has ended.
    As serve by default, only the mix is fed: node slots are not priced (`DynmigNodes` prices them).
    """

    name = "dynmig"
    REFRESH = 25
    LIFETIME = "mean"  # the demand estimate's lifetime estimate (`mig.placement.demand.LIFETIMES`)
    NODE_PRICING = False  # serve's --node-pricing
    KEEP_NODES_WHOLE = False  # the engine's opt-in empty-node term (`--keep-nodes-whole`)

    def __init__(self, nodes: list[BNode]):
        self.by_uuid = {g.uuid: g for n in nodes for g in n.gpus}
        self.nodes = {n.name: n for n in nodes}
        self.index = PlacementIndex(gpu_states(nodes), keep_nodes_whole=self.KEEP_NODES_WHOLE)
        self.demand = DemandEstimate(lifetime=self.LIFETIME)
        self._seen = 0

    def arrived(self, at: float, mems: tuple) -> None:
        self.demand.arrived("", mems, at)
        self._refresh()

    def departed(self, mems: tuple, lifetime: float) -> None:
        self.demand.ended("", mems, lifetime)

    def _refresh(self) -> None:
        self._seen += 1
        if self._seen % self.REFRESH == 0:
            self.price()

    def price(self) -> None:
        """The index priced by the estimate: its mix, and its node mix only with `NODE_PRICING`."""
        self.index.set_demand(self.demand.mix(), self.demand.node_mix() if self.NODE_PRICING else ())

    def decide(self, mems: list[int | None]) -> list[Pick] | None:
        plan = self.index.plan(self.request(mems))
        return self.picks(plan) if plan.fits else None

    @staticmethod
    def request(mems: Sequence[int | None]) -> PodRequest:
        return PodRequest(containers=tuple(ContainerRequest(1, m) for m in mems))

    def picks(self, plan: Plan) -> list[Pick]:
        out = []
        for d in plan.devices:
            g = self.by_uuid[d.gpu_uuid]
            out.append((g, d.placement, next(p for p in g.profiles if p.name == d.profile)))
        return out

    def node_gpus(self, node: str) -> list[GpuState]:
        """The node's GPUs as the engine counts them now (what is reserved occupied)."""
        return gpu_states([self.nodes[node]])

    def reserved(self, gpu: BGpu, placement) -> None:
        self.index.reserve(gpu.uuid, placement)

    def released(self, gpu: BGpu, placement) -> None:
        self.index.release(gpu.uuid, placement)


class DynmigNodes(Dynmig):
    """dynmig as serve --node-pricing=true drives it: demand for N whole GPUs on one node prices node slots."""

    name = grid.NODE_ARM
    NODE_PRICING = True


POLICIES = (Dynmig, FirstFit, BestFit, Hami2378, Hami2378Binpack, Hami2855, Hami2855Binpack)
# The packing grid's policies (`--grid`): dynmig and the strong simple baselines, the _baselines ones
# memoized per GPU (same decisions, `_packing.rules.memoized`) so the grid fits in its time.
GRID_POLICIES = (
    Dynmig,
    *(memoized(c) for c in (FirstFit, BestFit)),
    *RULES,
    *(memoized(c) for c in (Hami2378Binpack, Hami2855Binpack)),
)
GRID_RESULTS = RESULTS.parent / "packing-grid.json"
REUSE_RESULTS = RESULTS.parent / "packing-reuse.json"
TRACES_RESULTS = RESULTS.parent / "packing-traces.json"
GRID_PLOT = Path(__file__).resolve().parents[1] / "docs" / "packing-grid.png"


def apply(policy, picks: list[Pick], key: int, mems: tuple) -> None:
    """Commit a policy's picks to the shared fleet model, checking them the same way for every policy."""
    assert len(picks) == len(mems), f"{policy.name} placed {len(picks)} of {len(mems)} devices"
    assert len({gpu.node for gpu, _, _ in picks}) == 1, f"{policy.name} split a pod across nodes"
    for (gpu, place, prof), mem in zip(picks, mems, strict=False):
        assert not gpu.mask & place.mask, f"{policy.name} overlapped on {gpu.uuid}"
        assert place in prof.placements, f"{policy.name} chose an illegal placement"
        top = max(p.memory_mb for p in gpu.profiles)
        assert prof.memory_mb >= (top if mem is None else mem), f"{policy.name} chose a too small profile"
        gpu.mask |= place.mask
        gpu.allocs[(key, id(place))] = (place, prof)
        if hasattr(policy, "reserved"):
            policy.reserved(gpu, place)


def release(policy, picks: list[Pick], key: int) -> None:
    for gpu, place, _ in picks:
        del gpu.allocs[(key, id(place))]
        gpu.mask &= ~place.mask
        if hasattr(policy, "released"):
            policy.released(gpu, place)


# ---- churn ------------------------------------------------------------------------------------
def trace(n_arrivals: int, rate: float, seed: int, mix=MIX) -> list[tuple[float, tuple, float]]:
    rng = random.Random(seed)
    weights = [w for w, _, _ in mix]
    t, out = 0.0, []
    for _ in range(n_arrivals):
        t += rng.expovariate(rate)
        _, mems, life = rng.choices(mix, weights)[0]
        out.append((t, mems, rng.expovariate(1 / life)))
    return out


def needed_slices(nodes: list[BNode], mems: tuple) -> dict[str, int]:
    """Per GPU model: the slices the pod needs at least (smallest covering placements), if it can fit."""
    out = {}
    for g in {n.gpus[0].type: n.gpus[0] for n in nodes}.values():
        total = 0
        for mem in mems:
            top = max(p.memory_mb for p in g.profiles)
            sizes = [p.placements[0].size for p in g.profiles if p.memory_mb >= (top if mem is None else mem)]
            if not sizes:
                break
            total += min(sizes)
        else:
            out[g.type] = total
    return out


SIZE_NAMES = {4000: "1g", 9000: "2g", 18000: "3g", 30000: "4g", None: "whole"}
KINDS = ("1g", "2g", "3g", "4g", "whole", "2×1g", "2×3g")
CAUSES = (
    ("no-room", "no GPU has the slices"),
    ("misaligned", "slices free, no legal placement"),
    ("split", "fits per device, not on one node"),
)


def kind(mems: tuple) -> str:
    """The request's size class, as MIX names it (sizes are A100-40GB profiles)."""
    names = [SIZE_NAMES[m] for m in mems]
    return names[0] if len(names) == 1 else f"{len(names)}×{names[0]}"


def _covering(g: BGpu, mem: int | None) -> list:
    top = max(p.memory_mb for p in g.profiles)
    return [p for p in g.profiles if p.memory_mb >= (top if mem is None else mem)]


def _device_state(nodes: list[BNode], mem: int | None) -> tuple[bool, bool]:
    """(some GPU has enough free usable slices for a covering profile, some GPU has a free legal
    placement)."""
    room = False
    for n in nodes:
        for g in n.gpus:
            free = [s for s in range(g.axis) if not g.mask >> s & 1]
            for prof in _covering(g, mem):
                if any(not p.mask & g.mask for p in prof.placements):
                    return True, True
                usable = [s for s in free if any(p.start <= s < p.end for p in prof.placements)]
                room = room or len(usable) >= prof.placements[0].size
    return room, False


def cause(nodes: list[BNode], mems: tuple) -> str:
    """Why a refused pod could not be placed, judged from the fleet as it was (the same rule for all).

    no-room: for some device no GPU of any model has as many free (usable) slices as its smallest
    covering profile needs: no placement choice *now* could take it, only earlier choices (e.g. a whole
    GPU request while no GPU is empty). misaligned: slices are free on a GPU but no legal placement is.
    split: every device has a legal placement somewhere, but no node takes all of the pod's devices.
    """
    states = [_device_state(nodes, m) for m in mems]
    if not all(room for room, _ in states):
        return "no-room"
    if not all(legal for _, legal in states):
        return "misaligned"
    return "split"


def churn(policy_cls, arrivals, nodes_n: int, gpus_n: int, judge: bool = False) -> dict:
    """Replay the trace; with `judge`, the oracle rules on every refusal (see _packing/oracle.py)."""
    nodes = make_fleet(nodes_n, gpus_n)
    policy = policy_cls(nodes)
    oracle = Oracle(nodes, ORACLE_BUDGET, ORACLE_TIME_LIMIT) if judge else None
    verdicts: Counter[str] = Counter()
    oracle_by_kind: Counter[tuple[str, str]] = Counter()
    by_kind: Counter[str] = Counter()
    all_gpus = [g for n in nodes for g in n.gpus]
    capacity = sum(g.axis for g in all_gpus)
    departures: list[tuple[float, int]] = []
    live: dict[int, list[Pick]] = {}
    refused = frag = 0
    refused_work = 0.0  # GPU-minutes: each refused pod's GPU share (cheapest model) times its lifetime
    why: Counter[tuple[str, str]] = Counter()  # (request kind, cause) of fragmentation refusals
    util = []
    need_cache: dict[tuple, dict[str, int]] = {}
    share_cache: dict[tuple, float] = {}
    for key, (t, mems, life) in enumerate(arrivals):
        while departures and departures[0][0] <= t:
            _, k = heapq.heappop(departures)
            release(policy, live.pop(k), k)
        used = sum(g.used_slices for g in all_gpus)
        util.append(used / capacity)
        picks = policy.decide(list(mems))
        if picks is None:
            refused += 1
            by_kind[kind(mems)] += 1
            if mems not in share_cache:
                share_cache[mems] = eviction.gpu_share(nodes, mems)
            refused_work += share_cache[mems] * life * eviction.SECONDS_PER_UNIT / 60.0
            if oracle is not None:
                running = {k: arrivals[k][1] for k in live}
                judged = oracle.judge(running, mems, key)
                if judged.packing is not None:
                    wrong = legal_packing(nodes, {**running, key: mems}, judged.packing)
                    assert not wrong, f"the oracle's packing is not legal: {wrong[:3]}"
                verdicts[judged.verdict] += 1
                oracle_by_kind[(kind(mems), judged.verdict)] += 1
            need = need_cache.setdefault(mems, needed_slices(nodes, mems))
            free_by_type: dict[str, int] = {}
            for g in all_gpus:
                free_by_type[g.type] = free_by_type.get(g.type, 0) + g.axis - g.used_slices
            if any(free_by_type[typ] >= n for typ, n in need.items()):
                frag += 1
                why[(kind(mems), cause(nodes, mems))] += 1
            continue
        apply(policy, picks, key, mems)
        live[key] = picks
        heapq.heappush(departures, (t + life, key))
    return {
        "refused": refused,
        "fragmentation_refusals": frag,
        "refused_work": refused_work,
        "utilisation": statistics.fmean(util),
        "why": why,
        "by_kind": by_kind,
        "verdicts": verdicts,
        "oracle_by_kind": oracle_by_kind,
        "oracle_seconds": oracle.spent_total if oracle is not None else 0.0,
        "oracle_how": oracle.counts if oracle is not None else Counter(),
    }


class _Repacked:
    """Stands in for a policy while the oracle's packing is applied (checked as any policy's picks)."""

    name = "oracle repack"


def churn_repacking(arrivals, nodes_n: int, gpus_n: int) -> dict:
    """The oracle as a policy, on its own replay of the trace: dynmig's engine places each pod; when it
    refuses, the oracle judges the pods running plus the new one and, given a packing, the fleet is
    re-laid to it (every instance may move) and the pod admitted. Refused: proved infeasible, or the
    oracle did not decide (unknown, not searched). Greedy over time: it admits whenever it can."""
    nodes = make_fleet(nodes_n, gpus_n)
    policy = Dynmig(nodes)
    oracle = Oracle(nodes, ORACLE_BUDGET, ORACLE_TIME_LIMIT)
    verdicts: Counter[str] = Counter()
    by_kind: Counter[tuple[str, str]] = Counter()
    departures: list[tuple[float, int]] = []
    live: dict[int, list[Pick]] = {}
    for key, (t, mems, life) in enumerate(arrivals):
        while departures and departures[0][0] <= t:
            _, k = heapq.heappop(departures)
            release(policy, live.pop(k), k)
        picks = policy.decide(list(mems))
        if picks is None:
            judged = oracle.judge({k: arrivals[k][1] for k in live}, mems, key)
            verdicts[judged.verdict] += 1
            by_kind[(kind(mems), judged.verdict)] += 1
            if judged.packing is None:
                continue
            wrong = legal_packing(nodes, {**{k: arrivals[k][1] for k in live}, key: mems}, judged.packing)
            assert not wrong, f"the oracle's packing is not legal: {wrong[:3]}"
            for n in nodes:
                for g in n.gpus:
                    g.mask, g.allocs = 0, {}
            for k, moved in judged.packing.items():
                if k != key:
                    apply(_Repacked(), moved, k, arrivals[k][1])
                    live[k] = moved
            policy = Dynmig(nodes)  # its index rebuilt from the re-laid fleet
            picks = judged.packing[key]
        apply(policy, picks, key, mems)
        live[key] = picks
        heapq.heappush(departures, (t + life, key))
    return {"verdicts": verdicts, "by_kind": by_kind, "seconds": oracle.spent_total}


def offered_load(arrivals, nodes: list[BNode]) -> float:
    """Offered work over fleet capacity, in GPUs: each pod counted at its cheapest GPU model (the share
    of a GPU its smallest covering placements take, times its lifetime). Above ~0.9 refusals are
    unavoidable for any policy; fragmentation then decides only which pods are refused."""
    models = {n.gpus[0].type: n.gpus[0] for n in nodes}.values()
    work = 0.0
    for _, mems, life in arrivals:
        shares = []
        for g in models:
            sizes = [
                min(p.placements[0].size for p in _covering(g, m)) if _covering(g, m) else None for m in mems
            ]
            if None not in sizes:
                shares.append(sum(sizes) / g.axis)
        work += min(shares) * life
    return work / (arrivals[-1][0] * sum(len(n.gpus) for n in nodes))


# ---- decision time ----------------------------------------------------------------------------
def fill(nodes: list[BNode], target: float, seed: int) -> None:
    rng = random.Random(seed)
    for n in nodes:
        for g in n.gpus:
            for _ in range(20):
                if g.used_slices >= target * g.axis:
                    break
                prof = rng.choice(g.profiles)
                options = [p for p in prof.placements if not p.mask & g.mask]
                if options:
                    p = rng.choice(options)
                    g.mask |= p.mask
                    g.allocs[(id(p), len(g.allocs))] = (p, prof)


def _p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def timings(policy_cls, nodes: list[BNode], pods: list[tuple], passes: int = 1) -> dict[str, float]:
    """Wall and CPU time per decision (ms), each pass over the same pods. The wall p99 is judged, on the
    median pass; the CPU p99 (this thread's time) tells the policy's own work from time the OS gave to
    other processes, which on a shared machine is most of a slow decision."""
    policy = policy_cls(nodes)
    walls, cpus, p99s = [], [], []
    for _ in range(passes):
        wall = []
        for mems in pods:
            t0, c0 = time.perf_counter(), time.thread_time()
            policy.decide(list(mems))
            wall.append((time.perf_counter() - t0) * 1000)
            cpus.append((time.thread_time() - c0) * 1000)
        walls += wall
        p99s.append(_p99(wall))
    return {
        "p50": statistics.median(walls),
        "p99": statistics.median(p99s),
        "p99_passes": p99s,
        "cpu_p50": statistics.median(cpus),
        "cpu_p99": _p99(cpus),
        "samples": len(pods),
    }


# Offered work / fleet GPUs per workload, near capacity and overload. The inference-heavy shape is
# offered more: its 1g requests are counted at 1/8 of an A100, which holds seven of them.
WORKLOADS = (
    ("mixed", MIX, (("near capacity", 0.91), ("overload", 1.03))),
    ("inference-heavy", INFERENCE, (("near capacity", 1.2), ("overload", 1.3))),
)
SEEDS = (SEED, SEED + 10, SEED + 20)
ORACLE_MEANS = (
    "The oracle judges each of dynmig's refusals on the moment it happened: it refuses the pod only when "
    "it is proved\nthat the pods running then plus the refused one fit on no arrangement of the fleet, "
    "even moving every running\ninstance (per-GPU legal placements and nodes kept). Its refusals are "
    "those no policy could have avoided\nwith the pods dynmig had admitted; a packing found means moving "
    "instances would have admitted the pod.\nThe repacker is the oracle as a policy on its own replay of "
    "the trace: dynmig's engine places each pod and,\nwhen it refuses, the oracle re-lays the whole fleet "
    "to a packing it found (every instance may move);\nit refuses what the oracle proves infeasible or "
    "leaves undecided. It admits greedily, so it may refuse\nmore than dynmig later: a reference, not a "
    "lower bound."
)
# The oracle's seconds per trace in its program with nodes (refusals past it are "not searched"), and
# per solve (past it, "unknown"); the node-free relaxation runs at every refusal (milliseconds).
ORACLE_BUDGET, ORACLE_TIME_LIMIT = 20.0, 2.0
REPLAY = "repacker"  # churn_repacking's results, beside the policies
EVICTING = "defrag eviction"  # _packing/eviction.py's replays, one per ranking
ARRIVALS = 5000


def run_churn(
    mix, target: float, seed: int, small: tuple[int, int], evict_only: bool = False, rankings=None
) -> tuple[dict[str, dict], float]:
    """Every policy on one trace (rate set so the offered work is `target`); dynmig's refusals judged.
    `evict_only`: plain dynmig (judged) and the defrag eviction replays only (`rankings`: those)."""
    unit = trace(ARRIVALS, 1.0, seed, mix)
    rate = target / offered_load(unit, make_fleet(*small))
    arrivals = trace(ARRIVALS, rate, seed, mix)
    out = {}
    for cls in (Dynmig,) if evict_only else POLICIES:
        t0 = time.perf_counter()
        out[cls.name] = churn(cls, arrivals, *small, judge=cls is Dynmig)
        print(f"  churn {cls.name}: {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    if not evict_only:
        t0 = time.perf_counter()
        out[REPLAY] = churn_repacking(arrivals, *small)
        print(f"  churn {REPLAY}: {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    harness = eviction.Harness(Dynmig, apply, release, gpu_states, kind)
    out[EVICTING] = {}
    for ranking in rankings or eviction.RANKINGS:
        t0 = time.perf_counter()
        out[EVICTING][ranking.name] = eviction.churn_evicting(arrivals, make_fleet(*small), harness, ranking)
        print(f"  churn dynmig + {ranking.name}: {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    return out, offered_load(arrivals, make_fleet(*small))


def decision_times() -> dict[str, dict[str, float]]:
    big = make_fleet(5000, 8)
    fill(big, 0.6, SEED + 1)
    rng = random.Random(SEED + 2)
    weights = [w for w, _, _ in MIX]
    pods = [rng.choices(MIX, weights)[0][1] for _ in range(400)]
    timing: dict[str, dict[str, float]] = {}
    for cls in POLICIES:
        t0 = time.perf_counter()
        sample = pods if cls is Dynmig else pods[:25]  # the baselines scan the fleet: fewer samples
        timing[cls.name] = timings(cls, big, sample, passes=3 if cls is Dynmig else 1)
        print(f"  timing {cls.name}: {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    return timing


def _option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv[:-1] else None


def evict_only(argv: list[str], only: str | None) -> int:
    """`--evict-only`: plain dynmig judged by the oracle and the defrag eviction replays, per trace."""
    load = _option(argv, "--load")
    seeds_text = _option(argv, "--seeds")
    ranking = _option(argv, "--ranking")
    names = {r.name: r for r in eviction.RANKINGS}
    if load not in (None, "near", "overload") or (ranking is not None and ranking not in names):
        print(
            "--load: near or overload; --ranking: one of " + "; ".join(repr(n) for n in names),
            file=sys.stderr,
        )
        return 2
    try:
        seeds = tuple(int(x) for x in seeds_text.split(",")) if seeds_text else SEEDS
    except ValueError:
        print(f"--seeds: comma-separated integers, e.g. {SEED},{SEED + 10}", file=sys.stderr)
        return 2
    rankings = (
        None
        if ranking is None
        else [eviction.NONE] + ([names[ranking]] if ranking != eviction.NONE.name else [])
    )
    small = (24, 8)
    print(eviction.MEANS)
    for wname, mix, loads in (w for w in WORKLOADS if only in (None, w[0])):
        for label, target in loads:
            if load is not None and not label.startswith(load):
                continue
            res = []
            for seed in seeds:
                print(f"== {wname}, {label}, seed {seed}", file=sys.stderr)
                res.append(run_churn(mix, target, seed, small, evict_only=True, rankings=rankings)[0])
            print(f"\n== workload: {wname}, load: {label}, seeds {', '.join(map(str, seeds))}")
            refused = [r["dynmig"]["refused"] for r in res]
            proved = [r["dynmig"]["verdicts"][INFEASIBLE] for r in res]
            most = [sum(r["dynmig"]["verdicts"][v] for v in (INFEASIBLE, UNKNOWN, NOT_SEARCHED)) for r in res]
            print(
                f"dynmig refused {refused}; oracle at its refusals refused {proved} (proved) to {most} (at most)"
            )
            eviction.report(
                {n: [r[EVICTING][n] for r in res] for n in res[0][EVICTING]}, refused, proved, most
            )
    return 0


def grid_policies(
    lifetime: str = Dynmig.LIFETIME, nodes: bool = False, keep: bool = False
) -> tuple[type, ...]:
    """The grid's policies with dynmig's demand estimate using `lifetime` (`--lifetime NAME`); `nodes`:
    with the arm `dynmig+nodes` (node slots priced) beside dynmig; `keep`: both arms with the engine's
    opt-in empty-node term (`--keep-nodes-whole`, `PlacementIndex(keep_nodes_whole=True)`)."""
    arms = (Dynmig, DynmigNodes) if nodes else (Dynmig,)
    if lifetime != Dynmig.LIFETIME or keep:
        arms = tuple(type(c.__name__, (c,), {"LIFETIME": lifetime, "KEEP_NODES_WHOLE": keep}) for c in arms)
    return (*arms, *GRID_POLICIES[1:])


def lifetime_option(argv: list[str]) -> str:
    """`--lifetime NAME` (the engine's default when absent); ValueError naming the flag."""
    name = _option(argv, "--lifetime")
    if name is None:
        return Dynmig.LIFETIME
    if name not in LIFETIMES:
        raise ValueError(f"--lifetime: {name[:40]!r} is not one of {', '.join(LIFETIMES)}")
    return name


def _grid_runs(job: tuple[grid.Cell, int, str, bool]) -> dict[str, dict]:
    """Every grid policy on one cell's trace of one seed (one unit of work for `--jobs`)."""
    cell, seed, lifetime, keep = job
    arrivals = grid.trace(cell, seed)
    # dynmig+nodes in the mix with multi-GPU pods
    policies = grid_policies(lifetime, nodes=cell.mix.name == "training", keep=keep)
    return {c.name: grid.replay(c, cell, arrivals, apply, release) for c in policies}


def grid_main(argv: list[str]) -> int:
    """`--grid`: the packing grid (bench/_packing/grid.py) on the held-out seeds, its table, its verdict
    against issue 29's targets, every policy against the best of the other baselines per cell
    (`_packing.others`), bench/results/packing-grid.json and the plot docs/packing-grid.png.
    `--quick`: `grid.QUICK_CELLS` only; `--tuning`: the tuning seeds instead (nothing written to docs/);
    `--jobs N`: N processes replay the traces (the same figures; the table is printed in cell order)."""
    tuning = "--tuning" in argv
    seeds = grid.TUNING_SEEDS if tuning else grid.HELD_OUT_SEEDS
    cells = list(grid.QUICK_CELLS) if "--quick" in argv else grid.cells()
    mix = _option(argv, "--mix")  # --mix NAME: that mix's cells only (written as a try, not to docs/)
    if mix is not None:
        cells = [c for c in cells if c.mix.name == mix]
        if not cells:
            names = ", ".join(m.name for m in grid.MIXES)
            print(f"bench/placement.py: --mix: {mix[:40]!r} is not one of {names}", file=sys.stderr)
            return 2
    fleet = _option(argv, "--fleet")  # --fleet NAME: that fleet's cells only (written as a try)
    if fleet is not None:
        cells = [c for c in cells if c.fleet == fleet]
        if not cells:
            print(
                f"bench/placement.py: --fleet: {fleet[:40]!r} is not one of {', '.join(grid.FLEETS)}",
                file=sys.stderr,
            )
            return 2
    try:
        jobs = grid.jobs_option(argv)
        lifetime = lifetime_option(argv)
    except ValueError as e:
        print(f"bench/placement.py: {e}", file=sys.stderr)
        return 2
    names = [c.name for c in GRID_POLICIES]
    print(
        f"packing grid: {len(cells)} cells, {'tuning' if tuning else 'held-out'} seeds {', '.join(map(str, seeds))} "
        f"(tuning seeds {', '.join(map(str, grid.TUNING_SEEDS))}; held out {', '.join(map(str, grid.HELD_OUT_SEEDS))}); "
        f"{grid.ARRIVALS} arrivals per trace, the first {grid.WARM:.0%} not counted; refused GPU-work in "
        "GPU-minutes summed over seeds"
    )
    head = (
        f"{'cell':<40} {'dynmig':>8} {'best baseline':>22} {'ratio':>6} {'+nodes':>6} {'per seed':>18} "
        f"{'expected':>8} {'90 % interval':>13} {'util d/b':>11} {'refused d/b':>12} {'whole-GPU work d/b':>19}"
    )
    print(head)
    print("-" * len(head))
    summaries = []
    t0 = time.perf_counter()
    keep = "--keep-nodes-whole" in argv
    results = grid.in_order(
        _grid_runs, [(cell, seed, lifetime, keep) for cell in cells for seed in seeds], jobs
    )
    for cell in cells:
        s = grid.summarise(cell, [next(results) for _ in seeds])
        summaries.append(s)
        print(_grid_row(s), flush=True)
    print(f"({time.perf_counter() - t0:.0f} s)")
    print("\nper policy, refused GPU-work over all cells (sum) and cells where it is the best baseline:")
    for n in names:
        wins = sum(1 for s in summaries if s["best_baseline"] == n)
        print(f"  {n:<16} {sum(s['refused_work'][n] for s in summaries):>10.0f}  best in {wins} cells")
    print("\ntargets (issue 29), on these seeds, by refused GPU-work at the drawn lifetimes:")
    for line in grid.verdict(summaries):
        print("  " + line)
    print("the same targets by expected refused GPU-work (each refused pod at its class's mean lifetime):")
    for line in grid.verdict(summaries, "ratio_expected"):
        print("  " + line)
    priced = [s for s in summaries if "ratio_nodes" in s]
    if priced:
        print(
            f"{grid.NODE_ARM} (node slots priced, serve --node-pricing=true) over the same best baseline: "
            + ", ".join(f"{s['ratio_nodes']:.2f}×" for s in priced)
            + f" in {len(priced)} cells"
        )
    rest = others.against_others(summaries, grid.MEDIAN_TARGET)
    print(
        "\nevery policy's refused GPU-work over the best of the OTHER baselines, per cell (dynmig arms are "
        f"never baselines; targets: every cell ≤ 1.00×, median ≤ {grid.MEDIAN_TARGET:.2f}×):"
    )
    for line in others.table(rest):
        print("  " + line)
    out = {
        "seeds": list(seeds),
        "tuning": tuning,
        "policies": names,
        "cells": summaries,
        "against_others": rest,
    }
    GRID_RESULTS.parent.mkdir(parents=True, exist_ok=True)
    whole = not tuning and "--quick" not in argv and mix is None and fleet is None and not keep
    target = GRID_RESULTS if whole else GRID_RESULTS.with_suffix(".try.json")
    target.write_text(json.dumps(out, indent=2) + "\n")
    picture = GRID_PLOT if target == GRID_RESULTS else target.with_suffix(".png")
    plot.grid_plot(
        summaries,
        picture,
        f"dynmig's refused GPU-work over the best baseline's, per cell ({'tuning' if tuning else 'held-out'} seeds)",
    )
    print(f"wrote {target} and {picture}")
    return 0


def _trace_runs(job: tuple[str, str, str, str, Path, bool]) -> dict[str, dict]:
    """Every grid policy over one trace on one fleet under one mapping (one unit of work for `--jobs`)."""
    source, fleet, mapping, lifetime, directory, keep = job
    jobs = traces.load(traces.SOURCES[source], directory)
    policies = grid_policies(lifetime, nodes=True, keep=keep)
    return {c.name: traces.replay(c, fleet, mapping, jobs, apply, release) for c in policies}


def traces_main(argv: list[str]) -> int:
    """`--traces`: the real traces (bench/_packing/traces.py) on their held-out windows (`--tuning`: the
    tuning windows), dynmig against the grid's baselines in the same run, then every policy against the
    best of the other baselines per judged cell (`_packing.others`); writes
    bench/results/packing-traces.json and one plot per trace in docs/. `--fetch` downloads the traces
    first (pinned commit, checked SHA-256); `--trace-dir DIR` reads (and fetches) them there instead of
    bench/traces/. Without a trace file: says how to fetch it and exits 0, replaying nothing."""
    directory = Path(_option(argv, "--trace-dir") or traces.TRACE_DIR)
    try:
        jobs = grid.jobs_option(argv)
        lifetime = lifetime_option(argv)
        if "--fetch" in argv:
            for source in traces.SOURCES.values():
                print(f"fetched {traces.fetch(source, directory)}")
        for source in traces.SOURCES.values():
            traces.load(source, directory)
    except traces.TraceMissing as e:
        print(f"packing traces: skipped, {e}")
        return 0
    except (ValueError, OSError) as e:
        print(f"bench/placement.py: {e}", file=sys.stderr)
        return 2
    tuning = "--tuning" in argv
    windows = traces.TUNING_WINDOWS if tuning else traces.HELD_OUT_WINDOWS
    keep = "--keep-nodes-whole" in argv
    units = [
        (s, f, m, lifetime, directory, keep)
        for s in traces.SOURCES
        for f in traces.FLEETS
        for m in traces.MAPPINGS
    ]
    print(
        f"packing traces: {', '.join(traces.SOURCES)}; {'tuning' if tuning else 'held-out'} windows "
        + ", ".join("days {:g}-{:g}".format(*traces.WINDOWS[w]) for w in windows)
        + f"; dynmig's lifetime estimate: {lifetime}"
        + ("; empty nodes kept whole" if keep else "")
        + "; refused GPU-work in GPU-minutes; judged: the best baseline refuses "
        f"{traces.BAND[0]:.0%}-{traces.BAND[1]:.0%} of the offered work"
    )
    head = (
        f"{'cell':<42} {'dynmig':>8} {'best baseline':>24} {'ratio':>6} {'+nodes':>6} {'judged':>6} "
        f"{'refused share d/b':>17} {'refused d/b':>11}  work by kind (dynmig | best)"
    )
    print(head)
    print("-" * len(head))
    t0 = time.perf_counter()
    out: dict[str, list[dict]] = {}
    for (source, fleet, mapping, *_), runs in zip(
        units, grid.in_order(_trace_runs, units, jobs), strict=True
    ):
        for w in windows:
            s = traces.summarise(fleet, mapping, w, runs)
            out.setdefault(source, []).append(s)
            print(_trace_row(s), flush=True)
    print(f"({time.perf_counter() - t0:.0f} s)")
    trying = tuning or keep  # a try: written beside the results, not to docs/
    target = TRACES_RESULTS.with_suffix(".try.json") if trying else TRACES_RESULTS
    target.parent.mkdir(parents=True, exist_ok=True)
    rest = {
        source: others.against_others(summaries, traces.MEDIAN_TARGET) for source, summaries in out.items()
    }
    target.write_text(
        json.dumps(
            {"tuning": tuning, "windows": list(windows), "cells": out, "against_others": rest}, indent=2
        )
        + "\n"
    )
    for source, summaries in out.items():
        print(f"\ntargets (issue 42) on {source}, {'tuning' if tuning else 'held-out'} windows:")
        for line in traces.verdict(summaries):
            print("  " + line)
        print(f"the same targets for {grid.NODE_ARM} (node slots priced, serve --node-pricing=true):")
        for line in traces.verdict(summaries, "ratio_nodes"):
            print("  " + line)
        print(
            f"\nevery policy's refused GPU-work over the best of the OTHER baselines, per judged cell "
            f"(dynmig arms are never baselines; targets: every cell ≤ 1.00×, median ≤ {traces.MEDIAN_TARGET:.2f}×):"
        )
        columns = [s["cell"] for s in summaries if s["judged"]]
        for line in others.table(rest[source], columns):
            print("  " + line)
        picture = (
            target.parent if trying else GRID_PLOT.parent
        ) / f"packing-trace-{source}{'.try' if trying else ''}.png"
        plot.grid_plot(
            summaries,
            picture,
            f"{source}: dynmig / best baseline, refused GPU-work ({'tuning' if tuning else 'held-out'} windows)",
        )
        print(f"wrote {picture}")
    print(f"wrote {target}")
    return 0


def _trace_row(s: dict) -> str:
    best, work = s["best_baseline"], s["refused_work"]
    kinds = " | ".join(
        ", ".join(f"{k} {v:.0f}" for k, v in sorted(s["by_kind"][n].items())) or "-" for n in ("dynmig", best)
    )
    return (
        f"{s['cell']:<42} {work['dynmig']:>8.0f} {best:>16} {work[best]:>7.0f} {s['ratio']:>5.2f}× "
        f"{s.get('ratio_nodes', math.nan):>5.2f}× {'yes' if s['judged'] else 'no':>6} "
        f"{s['refused_share']['dynmig']:>8.3f}/{s['refused_share'][best]:<8.3f} "
        f"{s['refused']['dynmig']:>5}/{s['refused'][best]:<5}  {kinds}"
    )


def _grid_row(s: dict) -> str:
    """One cell's line of the grid's table."""
    best, work = s["best_baseline"], s["refused_work"]
    by = s["refused_work_by_class"]
    return (
        f"{s['cell']:<40} {work['dynmig']:>8.0f} {best:>15} {work[best]:>6.0f} {s['ratio']:>5.2f}× "
        f"{s.get('ratio_nodes', math.nan):>5.2f}× {'[' + ', '.join(f'{r:.2f}' for r in s['ratio_per_seed']) + ']':>18} "
        f"{s['ratio_expected']:>7.2f}× "
        f"{'{:.2f}-{:.2f}'.format(*s['ratio_interval']):>13} "
        f"{s['utilisation']['dynmig']:.3f}/{s['utilisation'][best]:.3f} "
        f"{s['refused']['dynmig']:>5}/{s['refused'][best]:<6} "
        f"{by['dynmig'].get('whole', 0):>9.0f}/{by[best].get('whole', 0):<9.0f}"
    )


def _reuse_seeds(argv: list[str], default: tuple[int, ...]) -> tuple[int, ...]:
    """The seeds `--seeds A,B,...` names (`default` when absent); ValueError naming the flag."""
    text = _option(argv, "--seeds")
    if text is None:
        return default
    try:
        seeds = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"--seeds: {text[:40]!r} is not a comma-separated list of whole numbers") from None
    if not 1 <= len(seeds) <= 50 or not all(0 <= x <= 10**9 for x in seeds):
        raise ValueError(f"--seeds: {text[:40]!r} is not 1 to 50 seeds from 0 to 1000000000")
    return seeds


def reuse_main(argv: list[str]) -> int:
    """`--grid --reuse`: dynmig with idle reuse on against dynmig with it off (bench/_packing/reuse.py),
    refused GPU-work per cell on the held-out seeds, the ratio per cell and overall, against issue 30's
    target (at most 5 % more); bench/results/packing-reuse.json. `--quick`: the cells the issue names
    (`reuse.CELLS`); `--tuning`: the tuning seeds, `--seeds A,B`: those (both write packing-reuse.try.json);
    `--idle-ttl M` (trace minutes, default 5), `--idle-per-gpu N` (default the plugin's 2),
    `--namespaces N` (default 8), `--jobs N` (N processes)."""
    try:
        ttl = grid.number_option(argv, "--idle-ttl", reuse.TTL_MINUTES, 0.0, 10_000.0)
        cap = int(grid.number_option(argv, "--idle-per-gpu", reuse.PER_GPU, 1, 64, whole=True))
        spread = int(grid.number_option(argv, "--namespaces", reuse.NAMESPACES, 1, 1000, whole=True))
        tuning = "--tuning" in argv
        seeds = _reuse_seeds(argv, (grid.TUNING_SEEDS if tuning else grid.HELD_OUT_SEEDS)[: reuse.SEEDS])
        jobs = grid.jobs_option(argv)
    except ValueError as error:
        print(f"placement.py: {error}", file=sys.stderr)
        return 2
    given = "--seeds" in argv
    cells = list(reuse.CELLS) if "--quick" in argv else grid.cells()
    print(
        f"packing grid, idle reuse: {len(cells)} cells, {'given' if given else 'tuning' if tuning else 'held-out'} seeds "
        f"{', '.join(map(str, seeds))}; TTL {ttl:g} trace-minutes, at most {cap} idle per GPU, {spread} "
        f"namespaces; refused GPU-work in GPU-minutes summed over seeds, reuse on / off"
    )
    head = (
        f"{'cell':<40} {'off':>8} {'on':>8} {'on/off':>7} {'per seed':>20} {'hand-overs':>11} "
        f"{'around':>7} {'evicted':>8}"
    )
    print(head)
    print("-" * len(head))
    rows = []
    t0 = time.perf_counter()
    pair = partial(_reuse_pair, ttl=ttl, cap=cap, spread=spread)
    results = grid.in_order(pair, [(cell, seed) for cell in cells for seed in seeds], jobs)
    for cell in cells:
        row = reuse_row(cell, [next(results) for _ in seeds])
        rows.append(row)
        c = row["counts"]
        print(
            f"{cell.label:<40} {row['off']:>8.0f} {row['on']:>8.0f} {row['ratio']:>6.3f}× "
            f"{'[' + ', '.join(f'{r:.3f}' for r in row['ratio_per_seed']) + ']':>20} "
            f"{c.get('handed over', 0) / max(c.get('placed devices', 0), 1):>10.1%} "
            f"{c.get('planned around idle', 0):>7} {c.get('idle evicted', 0):>8}",
            flush=True,
        )
    print(f"({time.perf_counter() - t0:.0f} s)")
    off_all, on_all = sum(r["off"] for r in rows), sum(r["on"] for r in rows)
    worst = max(rows, key=lambda r: r["ratio"])
    overall = grid.ratio(on_all, off_all)
    print(f"\nall cells: reuse off {off_all:.0f}, on {on_all:.0f} GPU-minutes, on/off {overall:.3f}×")
    print("target (issue 30), on these seeds:")
    print(f"  over all cells ≤ 1.05×: {'met' if overall <= 1.05 else 'NOT met'} ({overall:.3f}×)")
    print(
        f"  every cell ≤ 1.05×: {'met' if worst['ratio'] <= 1.05 else 'NOT met'} "
        f"(worst {worst['ratio']:.3f}× in {worst['cell']}; {sum(r['ratio'] > 1.05 for r in rows)} of {len(rows)} above)"
    )
    out = {"seeds": list(seeds), "tuning": tuning, "ttl_minutes": ttl, "per_gpu": cap, "namespaces": spread}
    record = not (tuning or given or "--quick" in argv)
    target = REUSE_RESULTS if record else REUSE_RESULTS.with_suffix(".try.json")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps({**out, "overall": overall, "cells": rows}, indent=2) + "\n")
    print(f"wrote {target}")
    return 0


def _reuse_pair(job: tuple[grid.Cell, int], ttl: float, cap: int, spread: int) -> tuple[dict, dict]:
    """One cell's trace of one seed replayed by dynmig with idle reuse off, then on."""
    cell, seed = job
    arrivals = grid.trace(cell, seed)
    names = reuse.namespaces(cell.label, seed, len(arrivals), spread)
    arm = partial(reuse.DynmigReuse, engine=Dynmig, namespaces=names, ttl_minutes=ttl, per_gpu=cap)
    return grid.replay(Dynmig, cell, arrivals, apply, release), grid.replay(
        arm, cell, arrivals, apply, release
    )


def reuse_row(cell: grid.Cell, runs: list[tuple[dict, dict]]) -> dict:
    """One cell over its seeds: refused GPU-work with reuse off and on (sums), the ratio, per seed,
    and what the reuse arm did (summed counts)."""
    off = sum(a["refused_work"] for a, _ in runs)
    on = sum(b["refused_work"] for _, b in runs)
    return {
        "cell": cell.label,
        "off": off,
        "on": on,
        "ratio": grid.ratio(on, off),
        "ratio_per_seed": [grid.ratio(b["refused_work"], a["refused_work"]) for a, b in runs],
        "refused": [sum(a["refused"] for a, _ in runs), sum(b["refused"] for _, b in runs)],
        "utilisation": [statistics.fmean(r["utilisation"] for r in pair) for pair in zip(*runs, strict=True)],
        "counts": dict(sum((Counter(b["reuse"]) for _, b in runs), Counter())),
    }


FLAGS = (
    "--quick",
    "--traces",
    "--fetch",
    "--evict-only",
    "--advise-cost",
    "--grid",
    "--reuse",
    "--tuning",
    "--churn-only",
    "--keep-nodes-whole",
)  # flags on their own
# flags followed by a value
OPTIONS = (
    "--workload",
    "--mix",
    "--fleet",
    "--lifetime",
    "--trace-dir",
    "--load",
    "--seeds",
    "--ranking",
    "--idle-ttl",
    "--idle-per-gpu",
    "--namespaces",
    "--jobs",
)


def usage_problem(argv: list[str]) -> str:
    """What is wrong with the command line ("" when nothing): an unknown flag or an option without
    its value (the full run takes about 15 minutes, so a typo must not start it)."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in OPTIONS:
            if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
                return f"{arg} needs a value"
            i += 2
            continue
        if arg not in FLAGS:
            return f"unknown argument {arg!r}"
        i += 1
    return ""


def main(argv: list[str]) -> int:
    if "--help" in argv or "-h" in argv:
        print(__doc__)
        return 0
    problem = usage_problem(argv)
    if problem:
        print(
            f"placement.py: {problem}; flags: {' '.join(FLAGS)}; options: {' '.join(OPTIONS)} (--help)",
            file=sys.stderr,
        )
        return 2
    if "--advise-cost" in argv:
        return advise_cost.main()
    if "--reuse" in argv and "--grid" not in argv:
        print("placement.py: --reuse is an arm of the packing grid: give --grid --reuse", file=sys.stderr)
        return 2
    if "--traces" in argv:
        return traces_main(argv)
    if "--grid" in argv:
        return reuse_main(argv) if "--reuse" in argv else grid_main(argv)
    seeds = SEEDS[:1] if "--quick" in argv else SEEDS  # --quick: one seed, for trying a change
    # --workload NAME: that workload only (mixed, inference-heavy), for trying a change on it
    only = argv[argv.index("--workload") + 1] if "--workload" in argv[:-1] else None
    if only is not None and only not in {w for w, _, _ in WORKLOADS}:
        print(
            f"--workload: unknown {only!r}; one of {', '.join(w for w, _, _ in WORKLOADS)}", file=sys.stderr
        )
        return 2
    if "--evict-only" in argv:
        return evict_only(argv, only)
    if "--churn-only" in argv:
        return churn_only(seeds, only)
    small = (24, 8)  # churn fleet: 24 nodes × 8 GPUs
    runs: dict[tuple[str, str], list[dict[str, dict]]] = {}
    offered: dict[tuple[str, str], list[float]] = {}
    for wname, mix, loads in (w for w in WORKLOADS if only in (None, w[0])):
        for label, target in loads:
            for seed in seeds:
                print(f"== {wname}, {label}, seed {seed}", file=sys.stderr)
                res, load = run_churn(mix, target, seed, small)
                runs.setdefault((wname, label), []).append(res)
                offered.setdefault((wname, label), []).append(load)
    timing = decision_times()

    print(
        f"churn: {ARRIVALS} arrivals per trace over {small[0]} nodes × {small[1]} GPUs "
        f"({', '.join(MODELS)}), "
        f"seeds {', '.join(map(str, seeds))} (figures are min-max over seeds); decision time at 5000 nodes × "
        "8 GPUs, ~60 % of slices occupied"
    )
    print(ORACLE_MEANS)
    print(eviction.MEANS)
    summary: dict = {}
    for (wname, label), seed_runs in runs.items():
        shown = offered[(wname, label)]
        print(
            f"\n== workload: {wname}, load: {label} (offered work {min(shown):.2f}-{max(shown):.2f}× "
            "the fleet's GPUs, each pod at its cheapest model)"
        )
        summary[f"{wname} / {label}"] = report(seed_runs, timing)
    print("\n== decision time at 5000 nodes × 8 GPUs")
    for name, t in timing.items():
        print(
            f"{name:<15} p50 {t['p50']:>9.3f} ms  p99 {t['p99']:>9.3f} ms  "
            f"(CPU p50 {t['cpu_p50']:.3f}, p99 {t['cpu_p99']:.3f} ms; {t['samples']} samples)"
        )
    ours = timing["dynmig"]
    passes = ", ".join(f"{v:.2f}" for v in ours["p99_passes"])
    print(
        f"dynmig decision p99 {ours['p99']:.2f} ms, median of {len(ours['p99_passes'])} passes ({passes}) "
        f"(target ≤ 5 ms); CPU p99 {ours['cpu_p99']:.2f} ms"
    )
    print("\n== HAMi's MIG E2E sequences (hack/hami-mig-e2e.sh) on one GPU: expectations missed")
    summary["hami e2e"] = e2e_report()
    summary["decision_ms"] = timing
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"\nwrote {RESULTS}")
    return 0


def churn_only(seeds: Sequence[int], only: str | None) -> int:
    """`--churn-only`: the churn traces replayed by dynmig and the baselines alone (no oracle, eviction,
    HAMi sequences or decision time; nothing written), refused work per seed, for measuring a change
    to the engine on these traces without the oracle's and the eviction replays' time."""
    small = (24, 8)
    print(
        f"churn only: refused GPU-minutes per seed ({', '.join(map(str, seeds))}), {ARRIVALS} arrivals per trace"
    )
    for wname, mix, loads in (w for w in WORKLOADS if only in (None, w[0])):
        for label, target in loads:
            work: dict[str, list[float]] = {}
            for seed in seeds:
                unit = trace(ARRIVALS, 1.0, seed, mix)
                arrivals = trace(ARRIVALS, target / offered_load(unit, make_fleet(*small)), seed, mix)
                for cls in POLICIES:
                    work.setdefault(cls.name, []).append(churn(cls, arrivals, *small)["refused_work"])
            best = [min(w[i] for n, w in work.items() if n != Dynmig.name) for i in range(len(seeds))]
            print(f"\n== {wname}, {label}")
            for name, w in work.items():
                print(f"  {name:<16} {', '.join(f'{x:,.0f}' for x in w)}")
            print(f"  dynmig / least of each seed's baselines: {_per_seed_work(work[Dynmig.name], best)}")
    return 0


def _span(values: list[float], fmt: str = "{:.0f}") -> str:
    lo, hi = min(values), max(values)
    return fmt.format(lo) if lo == hi else f"{fmt.format(lo)}-{fmt.format(hi)}"


def _ratio(a: float, b: float) -> float:
    return a / b if b else (0.0 if not a else float("inf"))


def _per_seed(mine: list[int], theirs: list[int]) -> str:
    return "[" + ", ".join(_ratio_cell(a, b) for a, b in zip(mine, theirs, strict=True)) + "]×"


def _per_seed_work(mine: list[float], theirs: list[float]) -> str:
    return (
        "["
        + ", ".join(
            "-" if not a and not b else f"{_ratio(a, b):.2f}" for a, b in zip(mine, theirs, strict=True)
        )
        + "]×"
    )


def _ratio_cell(a: int, b: int) -> str:
    """A ratio for a table cell: '-' when both are 0 (nothing to compare), 'inf' when only b is."""
    if not a and not b:
        return "-"
    return "inf" if not b else f"{a / b:.2f}"


def report(res: list[dict[str, dict]], timing: dict) -> dict:
    head = (
        f"{'policy':<15} {'refused':>10} {'frag.refusals':>14} {'utilisation':>12} {'dynmig/policy':>14}"
        f" {'refused GPU-min':>16} {'dynmig/policy':>14}"
    )
    print(head)
    print("-" * len(head))
    names = [n for n in res[0] if n not in (REPLAY, EVICTING)]
    refused = {n: [r[n]["refused"] for r in res] for n in names}
    work = {n: [r[n]["refused_work"] for r in res] for n in names}
    for n in names:
        util = [r[n]["utilisation"] for r in res]
        ratios = [_ratio(r["dynmig"]["refused"], r[n]["refused"]) for r in res]
        work_ratios = [_ratio(d, w) for d, w in zip(work["dynmig"], work[n], strict=True)]
        print(
            f"{n:<15} {_span(refused[n]):>10} {_span([r[n]['fragmentation_refusals'] for r in res]):>14} "
            f"{_span(util, '{:.3f}'):>12} {_span(ratios, '{:.2f}'):>13}× {_span(work[n]):>16} "
            f"{_span(work_ratios, '{:.2f}'):>13}×"
        )
    baselines = [n for n in names if n != "dynmig"]
    per_seed_best = [min(r[n]["refused"] for n in baselines) for r in res]
    best_ratio = [_ratio(r["dynmig"]["refused"], b) for r, b in zip(res, per_seed_best, strict=True)]
    best = min(baselines, key=lambda n: sum(refused[n]))
    print(
        f"dynmig vs the best baseline of each seed: {_span(best_ratio, '{:.2f}')}× (target ≤ 0.50×), per seed "
        f"{_per_seed(refused['dynmig'], per_seed_best)}"
    )
    least_work = [min(r[n]["refused_work"] for n in baselines) for r in res]
    work_ratio = [_ratio(d, w) for d, w in zip(work["dynmig"], least_work, strict=True)]
    print(
        f"refused work (GPU-minutes: each refused pod's share of a GPU on its cheapest model times its lifetime, "
        f"trace time read as minutes):\n  dynmig vs the least of each seed's baselines "
        f"{_span(work_ratio, '{:.2f}')}×, per seed {_per_seed_work(work['dynmig'], least_work)}"
    )
    # The oracle: dynmig's refusals judged one by one (see ORACLE_MEANS).
    verdicts = {v: [r["dynmig"]["verdicts"][v] for r in res] for v in VERDICTS}
    proved = verdicts[INFEASIBLE]
    most = [sum(r["dynmig"]["verdicts"][v] for v in (INFEASIBLE, UNKNOWN, NOT_SEARCHED)) for r in res]
    lo = [_ratio(d, m) for d, m in zip(refused["dynmig"], most, strict=True)]
    hi = [_ratio(d, p) for d, p in zip(refused["dynmig"], proved, strict=True)]
    seconds = [r["dynmig"]["oracle_seconds"] for r in res]
    how = sum((r["dynmig"]["oracle_how"] for r in res), Counter())
    print(
        f"oracle at dynmig's refusals ({_span(seconds, '{:.1f}')} s per trace): "
        + ", ".join(f"{v} {_span(verdicts[v])}" for v in VERDICTS)
        + " (decided, over seeds, by: "
        + (", ".join(f"{h} {n}" for h, n in sorted(how.items())) or "nothing to decide")
        + ")"
    )
    print(
        f"dynmig refused {_span(refused['dynmig'])}; oracle refused {_span(proved)} (proved) to {_span(most)} "
        f"(proved + unknown + not searched); dynmig/oracle per seed at least {_per_seed(refused['dynmig'], most)}, "
        f"at most {_per_seed(refused['dynmig'], proved)} (target ≤ 1.25× near capacity; inf: the oracle refuses "
        "none; -: neither refuses)"
    )
    replay = {v: [r[REPLAY]["verdicts"][v] for r in res] for v in VERDICTS}
    r_most = [sum(r[REPLAY]["verdicts"][v] for v in (INFEASIBLE, UNKNOWN, NOT_SEARCHED)) for r in res]
    r_lo = [_ratio(d, m) for d, m in zip(refused["dynmig"], r_most, strict=True)]
    r_hi = [_ratio(d, p) for d, p in zip(refused["dynmig"], replay[INFEASIBLE], strict=True)]
    print(
        f"repacker ({_span([r[REPLAY]['seconds'] for r in res], '{:.1f}')} s of oracle per trace): re-laid the "
        f"fleet {_span(replay[PACKED])} times; refused {_span(replay[INFEASIBLE])} (proved) to {_span(r_most)} "
        f"(+ unknown + not searched); dynmig/repacker per seed at least {_per_seed(refused['dynmig'], r_most)}, "
        f"at most {_per_seed(refused['dynmig'], replay[INFEASIBLE])}"
    )
    evicting = {n: [r[EVICTING][n] for r in res] for n in res[0][EVICTING]}
    evicted = eviction.report(evicting, refused["dynmig"], proved, most)
    kinds_head = (
        f"{'by request kind (sum over seeds)':<44}" + "".join(f"{k:>7}" for k in KINDS) + f"{'total':>7}"
    )
    print("\n" + kinds_head)
    print("-" * len(kinds_head))

    def of(r: dict, k: str, *vs: str) -> int:
        return sum(r["dynmig"]["oracle_by_kind"][(k, v)] for v in vs)

    rows: list[tuple[str, Callable[[dict, str], int]]] = [
        ("dynmig refused", lambda r, k: r["dynmig"]["by_kind"][k])
    ]
    rows += [(f"oracle: {v}", lambda r, k, v=v: of(r, k, v)) for v in VERDICTS]
    rows.append(("oracle refused, proved", lambda r, k: of(r, k, INFEASIBLE)))
    rows.append(("oracle refused, at most", lambda r, k: of(r, k, INFEASIBLE, UNKNOWN, NOT_SEARCHED)))
    rows.append(("repacker refused, proved", lambda r, k: r[REPLAY]["by_kind"][(k, INFEASIBLE)]))
    rows.append(
        (
            "repacker refused, at most",
            lambda r, k: sum(r[REPLAY]["by_kind"][(k, v)] for v in (INFEASIBLE, UNKNOWN, NOT_SEARCHED)),
        )
    )
    rows.append((f"{best} refused", lambda r, k: r[best]["by_kind"][k]))
    sums: dict[str, list[int]] = {}
    for text, get in rows:
        vals = [sum(get(r, k) for r in res) for k in KINDS]
        sums[text] = [*vals, sum(vals)]
        print(f"{text:<44}" + "".join(f"{v:>7}" for v in vals) + f"{sum(vals):>7}")
    mine = sums["dynmig refused"]
    for text, against in (
        ("dynmig/oracle, at least", "oracle refused, at most"),
        ("dynmig/oracle, at most", "oracle refused, proved"),
        ("dynmig/repacker, at least", "repacker refused, at most"),
        ("dynmig/repacker, at most", "repacker refused, proved"),
    ):
        cells = [_ratio_cell(d, o) for d, o in zip(mine, sums[against], strict=True)]
        print(f"{text:<44}" + "".join(f"{c:>7}" for c in cells))
    by_kind = {
        k: {"dynmig": mine[n], "oracle_proved": sums["oracle refused, proved"][n]}
        | {"oracle_at_most": sums["oracle refused, at most"][n]}
        | {"repacker_proved": sums["repacker refused, proved"][n]}
        | {"repacker_at_most": sums["repacker refused, at most"][n]}
        for n, k in enumerate([*KINDS, "total"])
    }
    breakdown({n: res for n in ("dynmig", best)})
    return {
        "refused": refused,
        "dynmig_vs_best_baseline": best_ratio,
        "refused_work_gpu_minutes": work,
        "dynmig_vs_least_refused_work": work_ratio,
        "oracle": {v.replace(" ", "_"): verdicts[v] for v in VERDICTS} | {"seconds": seconds},
        "oracle_refused": {"proved": proved, "at_most": most},
        "dynmig_vs_oracle": {"at_least": lo, "at_most": hi},
        "repacker": {v.replace(" ", "_"): replay[v] for v in VERDICTS},
        "repacker_refused": {"proved": replay[INFEASIBLE], "at_most": r_most},
        "dynmig_vs_repacker": {"at_least": r_lo, "at_most": r_hi},
        "defrag_eviction": evicted,
        "by_kind_sum_over_seeds": by_kind,
    }


def breakdown(results: dict[str, list[dict[str, dict]]]) -> None:
    """Fragmentation refusals per policy by request kind and cause (see `cause`), summed over seeds."""
    head = f"{'refusals by kind and cause':<44}" + "".join(f"{k:>7}" for k in KINDS) + f"{'total':>7}"
    print("\n" + head)
    print("-" * len(head))
    for name, res in results.items():
        for n, (code, text) in enumerate(CAUSES):
            row = [sum(r[name]["why"][(k, code)] for r in res) for k in KINDS]
            label = f"{name if n == 0 else '':<11} {text:<32}"
            print(label + "".join(f"{v:>7}" for v in row) + f"{sum(row):>7}")


def e2e_report() -> dict:
    out: dict = {}
    for model, title, steps in TRACES:
        print(f"{title}:")
        for cls in POLICIES:
            nodes = [n for n in make_fleet(len(MODELS), 1) if n.gpus[0].type == find_model(model).nvml_name]
            got = replay(cls(nodes[:1]), steps, apply, release)
            out.setdefault(title, {})[cls.name] = got.missed
            print(
                f"  {cls.name:<15} {len(got.missed)} missed"
                + (f": {'; '.join(got.missed)}" if got.missed else "")
            )
    return out


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
