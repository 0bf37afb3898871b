"""Placement benchmark: dynmig's engine against first-fit and HAMi-style baselines on one churn trace.

Run by `make bench` as `python bench/placement.py`. Prints a table per policy and writes
bench/results/placement.json. Seeded and deterministic apart from the timings.

- Churn, at two offered loads (near capacity, which feeds the JSON, and overload): Poisson arrivals
  and exponential lifetimes of a mixed request mix (inference 1g-sized,
  notebooks 2g-sized, jobs 3g/4g/7g-sized, a few two-device pods) over a mixed fleet of A100-40GB,
  H100-80GB and RTX PRO 6000 nodes, offered above capacity so that refusals happen. A refused pod is
  dropped (not retried). "Fragmentation refusals" are refusals while the fleet had, in total, at least
  as many free slices as the pod needs on some GPU model (smallest covering placement per device).
  Utilisation is the mean over arrivals of occupied slices / all slices.
  Fairness: every policy gets a fresh copy of the same fleet and replays the same trace (arrivals,
  lifetimes, so the same departure times); departures due by an arrival are released before it is
  decided; a refused pod is dropped for every policy alike; every pick is checked the same way (legal,
  non-overlapping, large enough, one node) and refusals are counted and classified by the same code,
  from the shared fleet model, not from the policy. The breakdown splits fragmentation refusals by
  request kind and cause (`cause`): no GPU had the slices, slices free but no legal placement, or
  every device fits somewhere but not all on one node.
- Decision time: a 5,000-node × 8-GPU fleet filled at random to about 60 % of its slices; each policy
  decides sampled pods against it (nothing applied). dynmig's index is built once beforehand, as the
  scheduler keeps it between requests; the baselines scan the fleet as HAMi does.
"""

from __future__ import annotations

import heapq
import json
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _baselines import BGpu, BNode, FirstFit, Hami2378, Hami2855, Pick

from mig.allowlist import default_allowlist
from mig.catalog import find_model
from mig.placement import ContainerRequest, GpuState, PlacementIndex, PodRequest
from mig.placement.published import from_catalog

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
RESULTS = Path(__file__).resolve().parent / "results" / "placement.json"


# ---- fleet ------------------------------------------------------------------------------------
def make_fleet(nodes: int, gpus_per_node: int) -> list[BNode]:
    allow = default_allowlist()
    out = []
    for n in range(nodes):
        model = find_model(MODELS[n % len(MODELS)])
        profiles = from_catalog(model, allow.profiles_for(model.nvml_name))
        name = f"node-{n:05d}"
        out.append(
            BNode(
                name,
                [
                    BGpu(name, f"GPU-{n:05d}-{i}", i, model.nvml_name, profiles, model.memory_mib)
                    for i in range(gpus_per_node)
                ],
            )
        )
    return out


def gpu_states(nodes: list[BNode]) -> list[GpuState]:
    return [
        GpuState(g.node, g.uuid, g.type, g.profiles, tuple(p for p, _ in g.allocs.values()), True, g.index)
        for n in nodes
        for g in n.gpus
    ]


class Dynmig:
    """Adapter: dynmig's PlacementIndex behind the baselines' interface."""

    name = "dynmig"

    def __init__(self, nodes: list[BNode]):
        self.by_uuid = {g.uuid: g for n in nodes for g in n.gpus}
        self.index = PlacementIndex(gpu_states(nodes))

    def decide(self, mems: list[int | None]) -> list[Pick] | None:
        pod = PodRequest(containers=tuple(ContainerRequest(1, m) for m in mems))
        plan = self.index.plan(pod)
        if not plan.fits:
            return None
        out = []
        for d in plan.devices:
            g = self.by_uuid[d.gpu_uuid]
            out.append((g, d.placement, next(p for p in g.profiles if p.name == d.profile)))
        return out

    def reserved(self, gpu: BGpu, placement) -> None:
        self.index.reserve(gpu.uuid, placement)

    def released(self, gpu: BGpu, placement) -> None:
        self.index.release(gpu.uuid, placement)


POLICIES = (Dynmig, FirstFit, Hami2378, Hami2855)


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
def trace(n_arrivals: int, rate: float, seed: int) -> list[tuple[float, tuple, float]]:
    rng = random.Random(seed)
    weights = [w for w, _, _ in MIX]
    t, out = 0.0, []
    for _ in range(n_arrivals):
        t += rng.expovariate(rate)
        _, mems, life = rng.choices(MIX, weights)[0]
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
    """(some GPU has enough free usable slices for a covering profile, some GPU has a free legal placement)."""
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


def churn(policy_cls, arrivals, nodes_n: int, gpus_n: int) -> dict:
    nodes = make_fleet(nodes_n, gpus_n)
    policy = policy_cls(nodes)
    all_gpus = [g for n in nodes for g in n.gpus]
    capacity = sum(g.axis for g in all_gpus)
    departures: list[tuple[float, int]] = []
    live: dict[int, list[Pick]] = {}
    refused = frag = 0
    why: Counter[tuple[str, str]] = Counter()  # (request kind, cause) of fragmentation refusals
    util = []
    need_cache: dict[tuple, dict[str, int]] = {}
    for key, (t, mems, life) in enumerate(arrivals):
        while departures and departures[0][0] <= t:
            _, k = heapq.heappop(departures)
            release(policy, live.pop(k), k)
        used = sum(g.used_slices for g in all_gpus)
        util.append(used / capacity)
        picks = policy.decide(list(mems))
        if picks is None:
            refused += 1
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
        "utilisation": statistics.fmean(util),
        "why": why,
    }


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


def timings(policy_cls, nodes: list[BNode], pods: list[tuple]) -> tuple[float, float]:
    policy = policy_cls(nodes)
    samples = []
    for mems in pods:
        t0 = time.perf_counter()
        policy.decide(list(mems))
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    p50 = statistics.median(samples)
    p99 = samples[min(len(samples) - 1, round(0.99 * (len(samples) - 1)))]
    return p50, p99


LOADS = (("near capacity", 8.0), ("overload", 9.0))  # arrivals per time unit; the first feeds the JSON


def main() -> int:
    small = (24, 8)  # churn fleet: 24 nodes × 8 GPUs
    tables: dict[str, dict[str, dict]] = {}
    offered: dict[str, float] = {}
    for label, rate in LOADS:
        arrivals = trace(12000, rate=rate, seed=SEED)
        offered[label] = offered_load(arrivals, make_fleet(*small))
        tables[label] = {}
        for cls in POLICIES:
            t0 = time.perf_counter()
            tables[label][cls.name] = churn(cls, arrivals, *small)
            print(f"  churn ({label}) {cls.name}: {time.perf_counter() - t0:.1f}s", file=sys.stderr)

    big = make_fleet(5000, 8)
    fill(big, 0.6, SEED + 1)
    rng = random.Random(SEED + 2)
    weights = [w for w, _, _ in MIX]
    pods = [rng.choices(MIX, weights)[0][1] for _ in range(400)]
    timing: dict[str, tuple[float, float, int]] = {}
    for cls in POLICIES:
        t0 = time.perf_counter()
        sample = pods if cls is Dynmig else pods[:25]  # the baselines scan the fleet: fewer samples
        timing[cls.name] = (*timings(cls, big, sample), len(sample))
        print(f"  timing {cls.name}: {time.perf_counter() - t0:.1f}s", file=sys.stderr)

    print(
        f"churn: 12000 arrivals over {small[0]} nodes × {small[1]} GPUs ({', '.join(MODELS)}); "
        "decision time at 5000 nodes × 8 GPUs, ~60 % of slices occupied"
    )
    for label, rate in LOADS:
        for name, (p50, p99, n) in timing.items():
            tables[label][name].update(decision_p50_ms=p50, decision_p99_ms=p99, decision_samples=n)
        print(
            f"\n== load: {label} ({rate} arrivals per time unit; offered work {offered[label]:.2f}× the fleet's "
            "GPUs, each pod at its cheapest model)"
        )
        report(tables[label])
    results = tables[LOADS[0][0]]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    keys = ("fragmentation_refusals", "utilisation", "decision_p50_ms", "decision_p99_ms")
    RESULTS.write_text(json.dumps({p: {k: r[k] for k in keys} for p, r in results.items()}, indent=2) + "\n")
    print(f"\nwrote {RESULTS} (load: {LOADS[0][0]})")
    return 0


def report(results: dict[str, dict]) -> None:
    head = (
        f"{'policy':<11} {'refused':>8} {'frag.refusals':>14} {'utilisation':>12} {'p50 ms':>9} "
        f"{'p99 ms':>9} {'samples':>8}"
    )
    print(head)
    print("-" * len(head))
    for name, r in results.items():
        print(
            f"{name:<11} {r['refused']:>8} {r['fragmentation_refusals']:>14} {r['utilisation']:>12.3f} "
            f"{r['decision_p50_ms']:>9.3f} {r['decision_p99_ms']:>9.3f} {r['decision_samples']:>8}"
        )
    ours = results["dynmig"]
    baselines = {k: v for k, v in results.items() if k != "dynmig"}
    best = min(baselines, key=lambda k: baselines[k]["fragmentation_refusals"])
    b = baselines[best]
    ratio = (
        ours["fragmentation_refusals"] / b["fragmentation_refusals"] if b["fragmentation_refusals"] else 0.0
    )
    print(f"fragmentation refusals vs best baseline ({best}): {ratio:.2f}× (target ≤ 0.50×)")
    for k, v in baselines.items():
        print(
            f"  vs {k}: refusals {ours['fragmentation_refusals']}/{v['fragmentation_refusals']}, "
            f"utilisation {ours['utilisation'] / v['utilisation']:.2f}×, "
            f"decision p99 {ours['decision_p99_ms'] / v['decision_p99_ms']:.3f}×"
        )
    print(f"dynmig decision p99 {ours['decision_p99_ms']:.2f} ms (target ≤ 5 ms)")
    breakdown(results)


def breakdown(results: dict[str, dict]) -> None:
    """Fragmentation refusals per policy by request kind and cause (see `cause`)."""
    head = f"{'refusals by kind and cause':<44}" + "".join(f"{k:>7}" for k in KINDS) + f"{'total':>7}"
    print("\n" + head)
    print("-" * len(head))
    for name, r in results.items():
        for n, (code, text) in enumerate(CAUSES):
            row = [r["why"][(k, code)] for k in KINDS]
            label = f"{name if n == 0 else '':<11} {text:<32}"
            print(label + "".join(f"{v:>7}" for v in row) + f"{sum(row):>7}")


if __name__ == "__main__":
    raise SystemExit(main())
