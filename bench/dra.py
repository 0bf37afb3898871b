"""DRA bench: steered first fit against NVIDIA's natural-order publishing, through kube-scheduler's allocator.

Run as `python bench/dra.py` (`--quick`: the tuning seed only, 1,500 arrivals, for trying a change;
`--seeds A,B`: those seeds; `--arrivals N`; `--burst`: the burst scenario instead, `burst_main`).
Prints a table per workload and load and writes bench/results/dra.json. Deterministic: every
random draw (slice order, node choice) comes from a seeded RNG, the same seed for every arm.

- Traces: the packing bench's (bench/placement.py `trace`, `offered_load`, `WORKLOADS`: Poisson
  arrivals, exponential lifetimes, the mixed and inference-heavy shapes at near-capacity and
  overload), on its fleet (24 nodes × 8 GPUs of A100-40GB, H100-80GB and RTX PRO 6000, the default
  allowlist). Departures due by an arrival are released first; a refused pod is dropped.
- Claims: one ResourceClaim per pod, one exactly-count request per distinct device size, its CEL
  selector naming the smallest allowlisted profile covering the size on each model
  (`device.attributes["gpu.nvidia.com"].profile in [...]`; a whole-GPU ask names the largest), under a
  DeviceClass selecting the driver's MIG devices. No fallback to larger profiles (no firstAvailable):
  the same for every arm.
- Allocation: sim/dra (kube-scheduler's structured allocator, read from the ResourceSlices alone:
  first fit over pools, slices and devices, counters, CEL), every node tried, ties between feasible
  nodes broken at random as selectHost does; the slice list is drawn in a fresh order each cycle (the
  informer cache's list is a map's). See testbed/sim/dra.
- Arms, in the same run on the same trace: `natural` publishes what NVIDIA's driver publishes (one
  slice per GPU, every allowed profile × placement sorted by name); `natural, published order` is the
  same with the slices kept in publish order (the driver's best case: GPUs in minor order);
  `steered` publishes mig/dra's steered slices (a profile's candidates best first across the node's
  GPUs in one slice, in the engine's one-by-one order, allocated devices apart). Every arm republishes
  the node's pool (generation + 1) after each allocation and release on it; `steered + dynmig
  prioritize` publishes the same steered slices, and kube-scheduler's node choice among the feasible
  nodes adds dynmig's extender `prioritize` scores (mig/dra/score.py, from the claim's CEL selector
  and the nodes' occupancy: the rank of the engine's loss of the claim's best placements, fuller node
  first between equal losses, 0..10) to tied plugin scores; ties by reservoir sampling as selectHost
  does (schedule_one.go: an extender's score × weight × MaxNodeScore/MaxExtenderPriority is added to
  the plugins' sum, so with tied plugins the highest extender score wins). Reference row: dynmig's
  extender (bench/placement.py's `Dynmig`, which also chooses the node), same trace.
- Judged: refused GPU-work (each refused pod's share of a GPU on its cheapest model times its
  lifetime, GPU-minutes, as the packing bench counts it); refused pods second. Every allocation is
  checked: a placement overlapping a live instance on its GPU fails the run.
- Seeds: TUNING (used while writing the steering: pruning depth, order keys) and HELD_OUT (never
  looked at before the final run); the target (steered ≤ 0.5× natural refused GPU-work) is judged on
  held-out seeds.
"""

from __future__ import annotations

import heapq
import json
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "testbed"))

import placement as packing  # the packing bench: traces, fleet, workloads (read only)
from _packing import eviction
from sim.dra.scheduler import Scheduler, SliceStore

from base.policyfiles import default_allowlist
from mig.catalog import GpuModel, find_model
from mig.dra import Gpu, Instance, natural_slices, steered_slices
from mig.dra.devices import MigDevice, by_name
from mig.dra.score import claim_asks, node_key, scores

DRIVER = "gpu.nvidia.com"
DEVICE_CLASS = "mig.nvidia.com"
CLASSES = {
    DEVICE_CLASS: {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DEVICE_CLASS},
        "spec": {
            "selectors": [
                {
                    "cel": {
                        "expression": f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == "mig"'
                    }
                }
            ]
        },
    }
}
SMALL = (24, 8)  # the packing bench's churn fleet
TUNING = (packing.SEED,)
HELD_OUT = (packing.SEED + 1001, packing.SEED + 1002, packing.SEED + 1003)
PRIORITIZED = "steered + dynmig prioritize"
ARMS = ("natural", "natural, published order", "steered", PRIORITIZED)
REFERENCE = "dynmig extender"
RESULTS = Path(__file__).resolve().parent / "results" / "dra.json"
BURST_RESULTS = RESULTS.with_name("dra-burst.json")
# per trace: 3,000 arrivals (the packing bench replays 5,000; the simulated allocator tries every node
# for every pod in Python, so 3,000 keeps a full run of the four arms near 30 minutes on two shared cores)
ARRIVALS = 3000

Mems = tuple[int | None, ...]


def _covering(model: GpuModel, allowed: Sequence[str], mem: int | None) -> str | None:
    specs = sorted(
        (s for s in (model.profile(n) for n in allowed) if s is not None),
        key=lambda s: (s.memory_mib, s.slice_count, s.placement_size, s.name),
    )
    if not specs:
        return None
    if mem is None:
        return specs[-1].name
    return next((s.name for s in specs if s.memory_mib >= mem), None)


def claim_for(mems: Mems, models: Sequence[tuple[GpuModel, tuple[str, ...]]], name: str) -> dict[str, Any]:
    """The pod's ResourceClaim: per distinct size, `count` devices of its smallest covering profile."""
    requests = []
    for i, mem in enumerate(dict.fromkeys(mems)):
        profiles = sorted({p for m, allowed in models if (p := _covering(m, allowed, mem)) is not None})
        names = ", ".join(f'"{p}"' for p in profiles)
        requests.append(
            {
                "name": f"gpu-{i}",
                "exactly": {
                    "deviceClassName": DEVICE_CLASS,
                    "allocationMode": "ExactCount",
                    "count": mems.count(mem),
                    "selectors": [
                        {"cel": {"expression": f'device.attributes["{DRIVER}"].profile in [{names}]'}}
                    ],
                },
            }
        )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": requests}},
    }


class Prioritized(Scheduler):
    """kube-scheduler with dynmig's extender consulted for `prioritize`: among the feasible nodes the
    highest extender score wins (the plugins' scores tie, as in `Scheduler`), ties by reservoir
    sampling (schedule_one.go `selectHost`)."""

    score: Callable[[list[str]], dict[str, int]] = staticmethod(lambda nodes: dict.fromkeys(nodes, 0))

    def _select(
        self, feasible: list[tuple[str, list[dict[str, Any]]]], pods_on: dict[str, int]
    ) -> tuple[str, list[dict[str, Any]]]:
        points = self.score([node for node, _ in feasible])
        best, count, chosen = points[feasible[0][0]], 1, feasible[0]
        for cand in feasible[1:]:
            s = points[cand[0]]
            if s > best:
                best, count, chosen = s, 1, cand
            elif s == best:
                count += 1
                if self.rng.randrange(count) == 0:
                    chosen = cand
        return chosen


class World:
    """One arm's cluster: the node's GPUs and instances, the published slices, the allocated devices."""

    def __init__(self, arm: str, seed: int):
        self.arm = arm
        self.fleet = packing.make_fleet(*SMALL)
        allow = default_allowlist()
        self.gpus: dict[str, list[Gpu]] = {}
        for n in self.fleet:
            self.gpus[n.name] = [
                Gpu(g.index, g.uuid, find_model(g.type), allow.profiles_for(g.type)) for g in n.gpus
            ]
        self.models = list(
            {g.model.key: (g.model, g.allowed) for gs in self.gpus.values() for g in gs}.values()
        )
        self.devices = {node: by_name(gs) for node, gs in self.gpus.items()}
        self.store = SliceStore()
        self.generation = dict.fromkeys(self.gpus, 0)
        self.allocated: set[tuple[str, str, str]] = set()
        self.pods_on = dict.fromkeys(self.gpus, 0)
        kind = Prioritized if arm == PRIORITIZED else Scheduler
        self.scheduler = kind(
            random.Random(seed * 7919 + 1), shuffle_slices=arm != "natural, published order"
        )
        for node in self.gpus:
            self.publish(node)

    def publish(self, node: str) -> None:
        self.generation[node] += 1
        steered = self.arm in ("steered", PRIORITIZED)
        build = steered_slices if steered else natural_slices
        self.store.replace_pool(node, DRIVER, build(node, DRIVER, self.gpus[node], self.generation[node]))

    def _set(self, node: str, minor: int, instances: tuple[Instance, ...]) -> None:
        gs = self.gpus[node]
        i = next(k for k, g in enumerate(gs) if g.minor == minor)
        g = gs[i]
        gs[i] = Gpu(g.minor, g.uuid, g.model, g.allowed, instances)

    def place(self, mems: Mems, key: int) -> tuple[str, list[MigDevice]] | None:
        claim = claim_for(mems, self.models, f"pod-{key}")
        if isinstance(self.scheduler, Prioritized):
            self.scheduler.score = self._prioritize(claim)
        got = self.scheduler.schedule(
            [claim], list(self.gpus), self.store, CLASSES, self.allocated, self.pods_on
        )
        if got is None:
            return None
        node, results = got
        taken = []
        for r in results[0]["devices"]["results"]:
            gpu, dev = self.devices[node][r["device"]]
            current = next(g for g in self.gpus[node] if g.minor == gpu.minor)
            assert not current.mask & dev.placement.mask, f"{self.arm}: {dev.name} overlaps on {node}"
            self._set(node, gpu.minor, (*current.instances, Instance(dev.profile, dev.placement)))
            self.allocated.add((DRIVER, node, dev.name))
            taken.append(dev)
        self.pods_on[node] += 1
        self.publish(node)
        return node, taken

    def _prioritize(self, claim: dict[str, Any]) -> Callable[[list[str]], dict[str, int]]:
        """What dynmig's extender answers for this claim's pod: scores of the nodes it is sent."""
        asks = claim_asks(claim, DRIVER)

        def score(nodes: list[str]) -> dict[str, int]:
            if asks is None:
                return dict.fromkeys(nodes, 0)
            return scores({n: node_key(self.gpus[n], asks) for n in nodes})

        return score

    def release(self, node: str, taken: list[MigDevice]) -> None:
        for dev in taken:
            current = next(g for g in self.gpus[node] if g.minor == dev.gpu_minor)
            inst = Instance(dev.profile, dev.placement)
            self._set(node, dev.gpu_minor, tuple(i for i in current.instances if i != inst))
            self.allocated.discard((DRIVER, node, dev.name))
        self.pods_on[node] -= 1
        self.publish(node)


def replay(arm: str, arrivals: list[tuple[float, Mems, float]], seed: int) -> dict[str, Any]:
    world = World(arm, seed)
    departures: list[tuple[float, int]] = []
    live: dict[int, tuple[str, list[MigDevice]]] = {}
    refused = 0
    work = 0.0
    share: dict[Mems, float] = {}
    for key, (t, mems, life) in enumerate(arrivals):
        while departures and departures[0][0] <= t:
            _, k = heapq.heappop(departures)
            world.release(*live.pop(k))
        got = world.place(mems, key)
        if got is None:
            refused += 1
            if mems not in share:
                share[mems] = eviction.gpu_share(world.fleet, mems)
            work += share[mems] * life * eviction.SECONDS_PER_UNIT / 60.0
            continue
        live[key] = got
        heapq.heappush(departures, (t + life, key))
    return {"refused": refused, "refused_work": work}


def run_cell(
    mix: Any, target: float, seed: int, arrivals_n: int, reference: bool
) -> dict[str, dict[str, Any]]:
    unit = packing.trace(arrivals_n, 1.0, seed, mix)
    rate = target / packing.offered_load(unit, packing.make_fleet(*SMALL))
    arrivals = packing.trace(arrivals_n, rate, seed, mix)
    out = {}
    for arm in ARMS:
        t0 = time.perf_counter()
        out[arm] = replay(arm, arrivals, seed)
        print(f"  {arm}: {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    if reference:
        r = packing.churn(packing.Dynmig, arrivals, *SMALL)
        out[REFERENCE] = {"refused": r["refused"], "refused_work": r["refused_work"]}
    return out


# ---- burst scenario ------------------------------------------------------------------------------
BURST_SHAPES = tuple((m, n) for m in ("A100-SXM4-40GB", "H100-SXM5-80GB") for n in (2, 4, 8))
BURST_SIZES = (5, 7, 14)
BURST_ARMS = ("natural", "natural, published order", "steered", "engine, one by one")


def _profile_claim(profile: str, i: int) -> dict[str, Any]:
    sel = f'device.attributes["{DRIVER}"].profile == "{profile}"'
    request = {
        "name": "mig",
        "exactly": {"deviceClassName": DEVICE_CLASS, "selectors": [{"cel": {"expression": sel}}]},
    }
    return {"metadata": {"name": f"burst-{i}"}, "spec": {"devices": {"requests": [request]}}}


class BurstNode:
    """One node of the burst scenario: its GPUs, its published pool and its allocated devices. The
    `natural` arms publish NVIDIA's layout (`natural` in a fresh slice order per cycle); `steered`
    and `engine, one by one` publish dynmig's; the last republishes after every claim (the engine
    placing them one by one), the others allocate the whole burst from one publication."""

    def __init__(self, arm: str, gpus: list[Gpu], seed: int):
        self.arm, self.gpus, self.node = arm, list(gpus), "burst-node"
        self.names = by_name(self.gpus)
        held = {(i.profile, i.placement, g.minor) for g in gpus for i in g.instances}
        self.allocated = {
            (DRIVER, self.node, name)
            for name, (g, d) in self.names.items()
            if (d.profile, d.placement, g.minor) in held
        }
        self.store, self.generation = SliceStore(), 0
        self.scheduler = Scheduler(random.Random(seed), shuffle_slices=arm == "natural")
        self.publish()

    def publish(self) -> None:
        self.generation += 1
        build = natural_slices if self.arm.startswith("natural") else steered_slices
        self.store.replace_pool(self.node, DRIVER, build(self.node, DRIVER, self.gpus, self.generation))

    def take(self, got: tuple[str, list[dict[str, Any]]] | None) -> int:
        """Record the claim's instance; 1 when it broke an empty GPU while a GPU in use had room."""
        if got is None:
            return 0
        gpu, dev = self.names[got[1][0]["devices"]["results"][0]["device"]]
        k = next(i for i, g in enumerate(self.gpus) if g.minor == gpu.minor)
        g = self.gpus[k]
        assert not g.mask & dev.placement.mask, f"{self.arm}: {dev.name} overlaps"
        spec = g.model.profile(dev.profile)
        placements = [p for p in spec.placements if p.size] if spec is not None else []
        room = any(o.instances and any(not p.mask & o.mask for p in placements) for o in self.gpus)
        self.gpus[k] = Gpu(
            g.minor, g.uuid, g.model, g.allowed, (*g.instances, Instance(dev.profile, dev.placement))
        )
        self.allocated.add((DRIVER, self.node, dev.name))
        return int(not g.instances and room)

    def burst(self, profiles: list[str]) -> dict[str, int]:
        pods = [[_profile_claim(p, i)] for i, p in enumerate(profiles)]
        broken, refused = 0, 0
        if self.arm == "engine, one by one":
            for pod in pods:
                got = self.scheduler.schedule(pod, [self.node], self.store, CLASSES, self.allocated)
                broken, refused = broken + self.take(got), refused + (got is None)
                self.publish()
        else:
            for got in self.scheduler.burst(pods, [self.node], self.store, CLASSES, self.allocated):
                broken, refused = broken + self.take(got), refused + (got is None)
        whole = sum(1 for g in self.gpus if not g.instances)
        return {"refused": refused, "broken_with_room": broken, "whole_left": whole}


def _burst_cases(seed: int) -> list[tuple[str, int, list[Gpu], list[str]]]:
    """Per node shape and burst size: an identical burst (the smallest profile) and a mixed one
    (1g/2g/3g drawn from the seed), on a node that already runs what the engine placed for a few
    earlier claims (also drawn from the seed; none on half the cases)."""
    rng, allow, out = random.Random(seed), default_allowlist(), []
    for model_name, count in BURST_SHAPES:
        model = find_model(model_name)
        gpus = [
            Gpu(i, f"GPU-{model_name}-{i}", model, allow.profiles_for(model.nvml_name)) for i in range(count)
        ]
        small = [s.name for s in gpus[0].specs() if s.slice_count < 7][:3]
        for n in BURST_SIZES:
            before = [rng.choice(small) for _ in range(rng.choice((0, count)))]
            start = BurstNode("engine, one by one", gpus, seed)
            start.burst(before)
            for kind, profiles in (("1g", [small[0]] * n), ("mixed", [rng.choice(small) for _ in range(n)])):
                out.append((f"{model_name} ×{count}, {n} {kind}", n, list(start.gpus), profiles))
    return out


def burst_main(seeds: Sequence[int], label: str) -> dict[str, Any]:
    """The burst scenario: every case of every seed allocated by each arm from the same start."""
    kinds = ("1g", "mixed")
    totals = {
        k: {a: {"refused": 0, "broken_with_room": 0, "whole_left": 0} for a in BURST_ARMS} for k in kinds
    }
    cases = 0
    for seed in seeds:
        for name, _, gpus, profiles in _burst_cases(seed):
            cases += 1
            kind = name.rsplit(" ", 1)[-1]
            for arm in BURST_ARMS:
                for k, v in BurstNode(arm, gpus, seed).burst(profiles).items():
                    totals[kind][arm][k] += v
    print(f"DRA burst scenario: {cases} bursts of 5, 7 and 14 claims (1g, and mixed 1g/2g/3g) on nodes")
    print(f"of 2, 4 and 8 A100-40GB or H100-80GB GPUs, {label} seeds {', '.join(map(str, seeds))}")
    print(
        f"{'burst':<7}{'arm':<27}{'broke a GPU while one in use had room':>38}{'whole GPUs left':>17}{'refused':>9}"
    )
    for kind in kinds:
        for arm, t in totals[kind].items():
            print(f"{kind:<7}{arm:<27}{t['broken_with_room']:>38}{t['whole_left']:>17}{t['refused']:>9}")
    return {"seeds": list(seeds), "seed_kind": label, "bursts": cases, "totals": totals}


def _option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv[:-1] else None


def main(argv: list[str]) -> int:
    if "--help" in argv or "-h" in argv:
        print(__doc__)
        return 0
    quick = "--quick" in argv
    seeds_opt = _option(argv, "--seeds")
    seeds = tuple(int(s) for s in seeds_opt.split(",")) if seeds_opt else (TUNING if quick else HELD_OUT)
    arrivals_n = int(_option(argv, "--arrivals") or (1500 if quick else ARRIVALS))
    held = all(s in HELD_OUT for s in seeds)
    label = "held-out" if held else ("tuning" if all(s in TUNING for s in seeds) else "mixed")
    if "--burst" in argv:
        result = burst_main(seeds, label)
        if not quick and seeds_opt is None:
            BURST_RESULTS.parent.mkdir(parents=True, exist_ok=True)
            BURST_RESULTS.write_text(json.dumps(result, indent=2) + "\n")
            print(f"wrote {BURST_RESULTS}")
        return 0
    summary: dict[str, Any] = {"seeds": list(seeds), "seed_kind": label, "arrivals": arrivals_n, "cells": {}}
    print(
        f"DRA bench: {arrivals_n} arrivals per trace over {SMALL[0]} nodes × {SMALL[1]} GPUs, "
        f"{label} seeds {', '.join(map(str, seeds))}; refused GPU-work in GPU-minutes (refused pods)"
    )
    totals = {a: 0.0 for a in (*ARMS, REFERENCE)}
    for wname, mix, loads in packing.WORKLOADS:
        for load_label, target in loads:
            cell = f"{wname} / {load_label}"
            rows: dict[str, list[dict[str, Any]]] = {}
            for seed in seeds:
                print(f"== {cell}, seed {seed}", file=sys.stderr)
                for arm, r in run_cell(mix, target, seed, arrivals_n, reference=True).items():
                    rows.setdefault(arm, []).append(r)
            summary["cells"][cell] = rows
            print(f"\n== {cell}")
            nat = sum(r["refused_work"] for r in rows["natural"])
            for arm, rs in rows.items():
                w = sum(r["refused_work"] for r in rs)
                totals[arm] += w
                per_seed = ", ".join(f"{r['refused_work']:.0f} ({r['refused']})" for r in rs)
                ratio = f"{w / nat:.2f}× natural" if nat else "natural refused nothing"
                print(f"{arm:<28} {w:>9.0f} GPU-min  {ratio:<16} per seed: {per_seed}")
    nat = totals["natural"]
    ratio = totals["steered"] / nat if nat else 0.0
    prio = totals[PRIORITIZED] / nat if nat else 0.0
    print(
        f"\nall cells: steered {totals['steered']:.0f} / natural {nat:.0f} GPU-min = {ratio:.2f}×; "
        f"steered + dynmig prioritize {totals[PRIORITIZED]:.0f} = {prio:.2f}× "
        f"(target ≤ 0.5×, {label} seeds); natural in published order {totals['natural, published order']:.0f}; "
        f"dynmig extender {totals[REFERENCE]:.0f}"
    )
    summary["totals"] = totals
    summary["steered_over_natural"] = ratio
    summary["prioritized_over_natural"] = prio
    if not quick and seeds_opt is None:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(summary, indent=2) + "\n")
        print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
