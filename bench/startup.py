"""Start latency: how long a GPU pod takes from creation to Running through the whole lab, with the
simulated NVML's timing model on (GI/CI creates and destroys take the driver data's estimated
seconds, each GPU's calls in series), idle reuse off and on in the same run.

Run as `python bench/startup.py [--scenarios a,b,c] [--arms today,lockfree] [--churn-seconds 120]`.
Scenarios:
- (a) 56 pods of one 1g.5gb each, created at once, onto one node of 8 x A100-SXM4-40GB. The
  physical limit under the timing model is each GPU's 7 creates in series, the GPUs in parallel.
- (b) 300 mixed pods (1g.5gb, 2g.10gb, 3g.20gb: 75/20/5 %, seeded) created at once over 8 such
  nodes; its physical limit is, from the creates the run made, the busiest GPU's creates in series.
- (c) steady churn: pods of 1g.5gb on that node at about 80 % of its 56 slices; each runs a while,
  is deleted and replaced by a new one of the same service (namespace).
Arms (each its own lab, one after the other in the same run): `today` (the instance is created in
Allocate, HAMi's node lock from bind to the end of Allocate), `precreate` (created as soon as the pod
is bound to the node; the lock kept), `lockfree` (pre-creation, and the plugin finds Allocate's pod
through kubelet's PodResources API, so the scheduler binds without the lock), `reuse` (today with
idle reuse), `lockfree+reuse`, `lockfree+warm` (lockfree with a warm pool sized for (a): 56 x 1g.5gb
per node, `--warm-pool 1g.5gb=56`; the burst starts once the node publishes all 56 as idle, and
the time the pool took to fill is reported apart).

Per scenario and arm it reports creation-to-Running p50/p99, the makespan, the share of Allocates
served without a create (NVML create events against kubelet's Allocate calls), and kubelet's
Allocate p50. For (a) and (b) it also replays the same pods, in creation order, through the placement
engine alone (mig/placement, fed the demand estimate as the extender feeds it; no lock, no kubelet,
nothing in flight) and reports beside the lab's burst: pods refused, slices used, GPUs and nodes
used, and the share of pods the burst put on the node the engine chose offline.
Writes bench/results/startup.json. Nothing here asserts a time: it measures.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lab.cluster import Lab
from lab.kit import Kit, gpu_pod
from lab.nodes import parse_nodes
from sim.nvml import hardware

from mig.annotations import MIG_ALLOCATIONS, NODE_REGISTER, decode_allocations
from mig.idle import IDLE, decode_idle
from mig.placement import ContainerRequest, GpuState, PlacementIndex, PodRequest, Refusal
from mig.reconstruct import node_gpus
from webhooks.demand import DemandFeed

RESULTS = Path(__file__).resolve().parent / "results" / "startup.json"
NODE = "burst=8xA100-SXM4-40GB"
NODES_B = ";".join(f"b{i}=8xA100-SXM4-40GB" for i in range(8))
MIX_B = ((4000, 1, 0.75), (9000, 2, 0.20), (19000, 3, 0.05))  # (MiB -> 1g/2g/3g, slices, share)
PODS_B = 300
POD_RESOURCES = "pod-resources/kubelet.sock"  # the simulated kubelet's, relative to --kubelet-dir
WARM_A = "1g.5gb=56"  # a warm pool sized for scenario (a): every slice of the node, as 1g.5gb
OFF = {"DYNMIG_WARM_POOL": "0"}
ARMS: dict[str, dict[str, str]] = {
    "today": {"DYNMIG_PRECREATE": "off", "DYNMIG_POD_RESOURCES_SOCKET": "", "DYNMIG_IDLE_TTL": "0", **OFF},
    "precreate": {"DYNMIG_PRECREATE": "on", "DYNMIG_POD_RESOURCES_SOCKET": "", "DYNMIG_IDLE_TTL": "0", **OFF},
    "lockfree": {
        "DYNMIG_PRECREATE": "on",
        "DYNMIG_POD_RESOURCES_SOCKET": POD_RESOURCES,
        "DYNMIG_IDLE_TTL": "0",
        **OFF,
    },
    "reuse": {"DYNMIG_PRECREATE": "off", "DYNMIG_POD_RESOURCES_SOCKET": "", "DYNMIG_IDLE_TTL": "300", **OFF},
    "lockfree+reuse": {
        "DYNMIG_PRECREATE": "on",
        "DYNMIG_POD_RESOURCES_SOCKET": POD_RESOURCES,
        "DYNMIG_IDLE_TTL": "300",
        **OFF,
    },
    "lockfree+warm": {
        "DYNMIG_PRECREATE": "on",
        "DYNMIG_POD_RESOURCES_SOCKET": POD_RESOURCES,
        "DYNMIG_IDLE_TTL": "300",
        "DYNMIG_WARM_POOL": WARM_A,
    },
}
WARM_FILL_S = 300.0  # how long the bench waits for the warm pool to fill before it gives up
ONE_G_MEMORY = 4000  # a 1g.5gb on an A100-40GB
SLICES = 56  # 8 GPUs x 7 1g instances


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


class Watch:
    """Polls the pods and records when each was first seen Running (client-side clock)."""

    def __init__(self, kit: Kit, namespaces: list[str]):
        self.kit, self.namespaces = kit, namespaces
        self.created: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Watch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(0.25):  # coarse enough not to load the lab it measures
            for ns in self.namespaces:
                try:
                    pods = Kit(self.kit.lab, ns).pods()
                except Exception:  # noqa: BLE001 - an API hiccup: next poll
                    continue
                now = time.monotonic()
                for pod in pods:
                    key = f"{ns}/{pod['metadata']['name']}"
                    if (pod.get("status") or {}).get("phase") == "Running" and key not in self.running:
                        self.running[key] = now

    def latencies(self) -> list[float]:
        return [self.running[k] - t for k, t in self.created.items() if k in self.running]


def allocates(lab: Lab, since: int = 0) -> list[float]:
    out = []
    for runtime in lab.nodes.values():
        for pod in runtime.kubelet.allocations[since:]:
            out.extend(c.allocate_seconds for c in pod.containers if c.allocate_seconds is not None)
    return out


def creates(lab: Lab) -> int:
    return sum(1 for r in lab.nodes.values() for e in r.nvml.events() if e["op"] == "create_gi")


def physical_limit_a() -> float:
    timing = hardware.model("A100-SXM4-40GB").timing
    return round(7 * (timing.create_gi_s + timing.create_ci_s), 2)  # per GPU in series, GPUs in parallel


def idle_published(lab: Lab) -> int:
    """Idle instances (warm ones included) every node publishes for the scheduler."""
    nodes = Kit(lab, "default").core.list_node().items
    return sum(len(decode_idle((n.metadata.annotations or {}).get(IDLE))) for n in nodes)


def wait_warm(lab: Lab, want: int, echo) -> float | None:
    """Seconds until the nodes publish `want` idle instances (the warm pool is full), None if never."""
    start = time.monotonic()
    while time.monotonic() - start < WARM_FILL_S:
        if idle_published(lab) >= want:
            took = round(time.monotonic() - start, 2)
            echo(f"  warm pool full: {want} idle instances published after {took} s")
            time.sleep(2.0)  # the scheduler's node watch sees the last one
            return took
        time.sleep(0.5)
    echo(f"  warm pool not full after {WARM_FILL_S:.0f} s: {idle_published(lab)} of {want}")
    return None


def offline(lab: Lab, asks: list[tuple[str, int | None]]) -> dict[str, tuple[str, str, int]]:
    """The same pods, in creation order, through the placement engine alone over the lab's empty
    GPUs (as the nodes register them): no lock, nothing in flight, the demand estimate fed as the
    extender feeds it. Per placed pod: (node, GPU, slices)."""
    gpus: list[GpuState] = []
    for node in Kit(lab, "default").core.list_node().items:
        published = node_gpus(node.metadata.name, (node.metadata.annotations or {}).get(NODE_REGISTER))
        gpus.extend(published.gpus)
    index = PlacementIndex(gpus)
    now = [0.0]
    feed = DemandFeed(index, clock=lambda: now[0])
    placed: dict[str, tuple[str, str, int]] = {}  # pod -> (node, GPU, slices)
    for i, (name, memory) in enumerate(asks):
        now[0] = i * 0.01  # a burst: created within about a second, as in the lab
        request = PodRequest((ContainerRequest(1, memory),))
        feed.arrived(name, request)
        plan = index.plan(request)
        if isinstance(plan, Refusal):
            continue
        index.apply(plan)
        feed.placed(name)
        for d in plan.devices:
            placed[name] = (plan.node, d.gpu_uuid, d.placement.size)
    return placed


def in_lab(kit: Kit, namespace: str, names: list[str], running: set[str]) -> dict[str, tuple[str, str, int]]:
    """What the lab's burst got: per Running pod, (node, GPU, slices) from its reservation."""
    out = {}
    for pod in kit.pods():
        name = pod["metadata"]["name"]
        if name not in names or f"{namespace}/{name}" not in running:
            continue
        for a in decode_allocations((pod["metadata"].get("annotations") or {}).get(MIG_ALLOCATIONS)):
            out[name] = (pod["spec"].get("nodeName", ""), a.gpuUUID, a.placement.size)
    return out


def tally(pods: int, placed: dict[str, tuple[str, str, int]]) -> dict[str, Any]:
    return {
        "refused": pods - len(placed),
        "slices_used": sum(s for _, _, s in placed.values()),
        "gpus_used": len({g for _, g, _ in placed.values()}),
        "nodes_used": len({n for n, _, _ in placed.values()}),
    }


def compare(
    lab: Lab, kit: Kit, namespace: str, asks: list[tuple[str, int | None]], running: set[str]
) -> dict[str, Any]:
    """The engine offline beside the lab's burst (same pods), and how many landed where it chose."""
    names = [n for n, _ in asks]
    got = in_lab(kit, namespace, names, running)
    engine = offline(lab, asks)
    same = sum(1 for n, (node, _, _) in got.items() if n in engine and engine[n][0] == node)
    return {
        "engine_offline": tally(len(asks), engine),
        "lab_burst": tally(len(asks), got),
        "on_the_engines_node": round(same / len(got), 3) if got else None,
    }


def burst(lab: Lab, echo, warm: int = 0) -> dict[str, Any]:
    kit = Kit(lab, "burst")
    kit.core.create_namespace({"metadata": {"name": "burst"}})
    warm_fill = wait_warm(lab, warm, echo) if warm else None
    watch = Watch(kit, ["burst"]).start()
    before_alloc = sum(len(r.kubelet.allocations) for r in lab.nodes.values())
    before_creates = creates(lab)
    start = time.monotonic()
    for i in range(SLICES):
        name = f"p{i:02d}"
        kit.create(gpu_pod(name, ONE_G_MEMORY, namespace="burst"))
        watch.created[f"burst/{name}"] = time.monotonic()
    deadline = start + 600
    while len(watch.running) < SLICES and time.monotonic() < deadline:
        time.sleep(0.2)
    makespan = max(watch.running.values(), default=start) - start
    watch.stop()
    calls = allocates(lab)[before_alloc:]
    made = creates(lab) - before_creates
    lat = watch.latencies()
    out = {
        "pods": SLICES,
        "running": len(watch.running),
        "makespan_s": round(makespan, 2),
        "physical_limit_s": physical_limit_a(),
        "to_running_p50_s": pct(lat, 0.5),
        "to_running_p99_s": pct(lat, 0.99),
        "allocates": len(calls),
        "allocates_without_create": round(1 - made / len(calls), 3) if calls else None,
        "allocate_p50_s": pct(calls, 0.5),
        "warm_pool_filled_s": warm_fill,
        "placement": compare(
            lab, kit, "burst", [(f"p{i:02d}", ONE_G_MEMORY) for i in range(SLICES)], set(watch.running)
        ),
    }
    echo(f"  (a) {out}")
    return out


def physical_limit_from_creates(lab: Lab) -> float:
    """The busiest GPU's creates in series (GPUs in parallel), from the creates the run made."""
    timing = hardware.model("A100-SXM4-40GB").timing
    per_gpu: dict[str, int] = {}
    for runtime in lab.nodes.values():
        for e in runtime.nvml.events():
            if e["op"] == "create_gi":
                per_gpu[e["gpu"]] = per_gpu.get(e["gpu"], 0) + 1
    return round(max(per_gpu.values(), default=0) * (timing.create_gi_s + timing.create_ci_s), 2)


def mixed(lab: Lab, seed: int, echo) -> dict[str, Any]:
    rng = random.Random(seed)
    kit = Kit(lab, "mixed")
    kit.core.create_namespace({"metadata": {"name": "mixed"}})
    watch = Watch(kit, ["mixed"]).start()
    before_alloc = sum(len(r.kubelet.allocations) for r in lab.nodes.values())
    start = time.monotonic()
    slices = 0
    asks: list[tuple[str, int | None]] = []
    for i in range(PODS_B):
        memory, size, _ = rng.choices(MIX_B, weights=[m[2] for m in MIX_B])[0]
        slices += size
        name = f"m{i:03d}"
        asks.append((name, memory))
        kit.create(gpu_pod(name, memory, namespace="mixed"))
        watch.created[f"mixed/{name}"] = time.monotonic()
    deadline = start + 900
    last, quiet_since = -1, time.monotonic()
    while len(watch.running) < PODS_B and time.monotonic() < deadline:
        time.sleep(0.5)
        if len(watch.running) != last:
            last, quiet_since = len(watch.running), time.monotonic()
        elif time.monotonic() - quiet_since > 60:
            break  # nothing started for a minute: the rest did not fit
    makespan = max(watch.running.values(), default=start) - start
    watch.stop()
    calls = allocates(lab)[before_alloc:]
    lat = watch.latencies()
    out = {
        "pods": PODS_B,
        "slices_asked": slices,
        "running": len(watch.running),
        "makespan_s": round(makespan, 2),
        "physical_limit_s": physical_limit_from_creates(lab),
        "to_running_p50_s": pct(lat, 0.5),
        "to_running_p99_s": pct(lat, 0.99),
        "allocates": len(calls),
        "allocate_p50_s": pct(calls, 0.5),
        "placement": compare(lab, kit, "mixed", asks, set(watch.running)),
    }
    echo(f"  (b) {out}")
    return out


def churn(lab: Lab, seconds: float, lifetime: tuple[float, float], seed: int, echo) -> dict[str, Any]:
    rng = random.Random(seed)
    services = [f"svc-{i}" for i in range(4)]
    for ns in services:
        Kit(lab, ns).core.create_namespace({"metadata": {"name": ns}})
    watch = Watch(Kit(lab, services[0]), services).start()
    target = int(SLICES * 0.8)
    alive: dict[str, tuple[str, float]] = {}  # key -> (namespace, delete at)
    counter = 0
    before_alloc = sum(len(r.kubelet.allocations) for r in lab.nodes.values())
    before_creates = creates(lab)
    start = time.monotonic()
    warm = start + 30  # the first wave creates everything: measured apart

    def spawn(ns: str | None = None) -> None:
        nonlocal counter
        ns = ns or rng.choice(services)
        name = f"w{counter:04d}"
        counter += 1
        Kit(lab, ns).create(gpu_pod(name, ONE_G_MEMORY, namespace=ns))
        key = f"{ns}/{name}"
        watch.created[key] = time.monotonic()
        alive[key] = (ns, 0.0)

    while len(alive) < target:
        spawn()
    first_wave: tuple[int, int] | None = None  # (Allocates, creates) once the first wave is admitted
    while time.monotonic() - start < seconds:
        now = time.monotonic()
        if first_wave is None and len(allocates(lab)) - before_alloc >= target:
            first_wave = (len(allocates(lab)) - before_alloc, creates(lab) - before_creates)
        for key, (ns, until) in list(alive.items()):
            if key in watch.running and until == 0.0:
                alive[key] = (ns, watch.running[key] + rng.uniform(*lifetime))
            elif until and now >= until:
                Kit(lab, ns).core.delete_namespaced_pod(key.split("/", 1)[1], ns, grace_period_seconds=1)
                del alive[key]
                spawn(ns)  # the service replaces its pod: the same namespace
        time.sleep(0.2)
    watch.stop()
    steady = [watch.running[k] - t for k, t in watch.created.items() if k in watch.running and t >= warm]
    calls = allocates(lab)[before_alloc:]
    made = creates(lab) - before_creates
    out = {
        "seconds": seconds,
        "pods": counter,
        "running": len(watch.running),
        "to_running_p50_s": pct(steady, 0.5),
        "to_running_p99_s": pct(steady, 0.99),
        "allocates": len(calls),
        "creates": made,
        "allocates_without_create": round(1 - made / len(calls), 3) if calls else None,
        "allocate_p50_s": pct(calls, 0.5),
        "allocate_p50_after_warmup_s": pct(calls[target:], 0.5),
        # after the first wave (every one of its pods creates: nothing is idle yet)
        "allocates_after_first_wave": len(calls) - first_wave[0] if first_wave else None,
        "creates_after_first_wave": made - first_wave[1] if first_wave else None,
        "allocates_without_create_after_first_wave": (
            round(1 - (made - first_wave[1]) / (len(calls) - first_wave[0]), 3)
            if first_wave and len(calls) > first_wave[0]
            else None
        ),
    }
    echo(f"  (c) {out}")
    return out


def arm(name: str, scenarios: list[str], churn_seconds: float, seed: int, echo) -> dict[str, Any]:
    os.environ["DYNMIG_SIM_TIMING"] = "driver"  # the timing model on: the driver data's defaults
    os.environ.update(ARMS[name])  # the plugin processes inherit the lab's environment
    os.environ["DYNMIG_IDLE_PER_GPU"] = "7" if ARMS[name]["DYNMIG_IDLE_TTL"] != "0" else "2"
    warm = SLICES if ARMS[name]["DYNMIG_WARM_POOL"] != "0" else 0  # per node: the pool sized for (a)
    results: dict[str, Any] = {}
    for scenario in scenarios:
        echo(f"arm {name}: scenario ({scenario})")
        nodes = NODES_B if scenario == "b" else NODE
        with Lab(parse_nodes(nodes), reconcile_interval=1.0) as lab:
            if scenario == "a":
                results["a"] = burst(lab, echo, warm)
            elif scenario == "b":
                results["b"] = mixed(lab, seed, echo)
            elif scenario == "c":
                results["c"] = churn(lab, churn_seconds, (10.0, 25.0), seed, echo)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default="a,c", help="comma-separated: a, b, c")
    parser.add_argument("--arms", default="today,lockfree", help=f"comma-separated: {', '.join(ARMS)}")
    parser.add_argument("--churn-seconds", type=float, default=120.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"where the JSON goes (default {RESULTS})")
    args = parser.parse_args()
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    report: dict[str, Any] = {"timing": "driver data estimates (testbed/sim/nvml/drivers/ampere.yaml)"}
    for name in [a.strip() for a in args.arms.split(",") if a.strip()]:
        report[name] = arm(name, scenarios, args.churn_seconds, args.seed, print)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
