"""What one defrag advice costs on a packed fleet: CPU time of `mig.defrag.advise` per pending pod.

A fleet of `nodes` × 8 A100-SXM4-40GB GPUs is filled by dynmig's engine with the mixed workload's
one-device requests (1g to whole GPU, drawn by weight) until 400 arrivals in a row are refused; every
placed pod is a running `Holder` that may be evicted and whose controller recreates it. Then each
pending request that does not fit (1g, 2g, 3g, whole GPU, two 3g devices) is advised as the
controller's pass asks (move only, `Homes` shared per pass) and as `dynmig status` asks (strand
allowed); the figure is this thread's CPU time per advice, so other processes on the machine do not
count. Seeded and deterministic apart from the timings.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

from base.policyfiles import default_allowlist
from mig.catalog import find_model
from mig.defrag import Holder, Homes, advise
from mig.placement import ContainerRequest, GpuState, PlacementIndex, Plan, PodRequest
from mig.placement.published import from_catalog

MODEL = "A100-SXM4-40GB"
FILL = ((40, 4000), (22, 9000), (12, 18000), (8, 30000), (5, None))  # (weight, MiB) of the fill
PENDING = {"1g": (4000,), "2g": (9000,), "3g": (18000,), "whole": (None,), "2×3g": (18000, 18000)}


@dataclass(frozen=True)
class Cost:
    kind: str
    mode: str  # "move only" (the controller's pass) or "strand allowed" (status)
    cpu_s: float
    found: bool
    victims: int


def request(mems: Sequence[int | None]) -> PodRequest:
    return PodRequest(containers=tuple(ContainerRequest(1, m) for m in mems))


def packed_fleet(nodes: int, seed: int) -> tuple[list[GpuState], list[Holder]]:
    """GPUs and the holders of what the engine placed until the fleet refused 400 arrivals in a row."""
    model = find_model(MODEL)
    profiles = from_catalog(model, default_allowlist().profiles_for(model.nvml_name))
    gpus = [
        GpuState(f"n{n:04d}", f"GPU-{n:04d}-{i}", model.nvml_name, profiles, (), True, i, model.memory_mib)
        for n in range(nodes)
        for i in range(8)
    ]
    index = PlacementIndex(gpus)
    rng = random.Random(seed)
    weights = [w for w, _ in FILL]
    holders: list[Holder] = []
    misses = 0
    while misses < 400:
        mem = rng.choices(FILL, weights)[0][1]
        pod = request((mem,))
        plan = index.plan(pod)
        if not isinstance(plan, Plan) or not plan.devices:
            misses += 1
            continue
        misses = 0
        index.apply(plan)
        k = len(holders)
        holders.append(
            Holder(
                f"bench/fill-{k:06d}",
                plan.node,
                tuple((d.gpu_uuid, d.placement) for d in plan.devices),
                started=float(k),
                request=pod,
            )
        )
    held: dict[str, list] = {}
    for h in holders:
        for u, p in h.placements:
            held.setdefault(u, []).append(p)
    packed = [
        GpuState(g.node, g.uuid, g.type, g.profiles, tuple(held.get(g.uuid, ())), True, g.index, g.memory_mb)
        for g in gpus
    ]
    return packed, holders


def measure(nodes: int = 1000, seed: int = 20240611) -> list[Cost]:
    """One advice per pending kind and mode on a packed fleet (see the module docstring)."""
    return _measured(*packed_fleet(nodes, seed))


def _measured(gpus: list[GpuState], holders: list[Holder]) -> list[Cost]:
    out = []
    for mode, move_only in (("move only", True), ("strand allowed", False)):
        homes = Homes(gpus)  # one per pass, as the controller and status share it
        for kind, mems in PENDING.items():
            pod = request(mems)
            c0 = time.thread_time()
            advice = advise(
                pod, gpus, holders, {}, 1e9, known_unplaceable=True, require_homes=move_only, homes=homes
            )
            out.append(Cost(kind, mode, time.thread_time() - c0, advice.found, len(advice.victims)))
    return out


def main(nodes: int = 1000, repeats: int = 3) -> int:
    """Print the CPU time per advice, the least of `repeats` runs per pending kind and mode."""
    t0 = time.thread_time()
    gpus, holders = packed_fleet(nodes, 20240611)
    free = sum(bin(~g.occupied_mask & 0xFF).count("1") for g in gpus)
    print(
        f"defrag advice on {nodes} nodes × 8 {MODEL}: {len(holders)} running pods, {free} free slices "
        f"(filled in {time.thread_time() - t0:.1f} s CPU); CPU s per advice, least of {repeats} runs"
    )
    runs = [_measured(gpus, holders) for _ in range(repeats)]
    for n, first in enumerate(runs[0]):
        least = min(r[n].cpu_s for r in runs)
        print(
            f"  {first.mode:<15} {first.kind:<6} {least:6.2f} s  "
            + (f"found, {first.victims} pod(s)" if first.found else "no set")
        )
    return 0
