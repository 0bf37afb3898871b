"""Live page benchmark: what one rendering of the page costs `dynmig serve`, against building the
same slice map from the objects as `dynmig status` does (`fleet_view`), measured in the same run.

Run by `make bench` as `python bench/page.py`. Prints a table and writes bench/results/page.json.

Fleets of 10, 100 and 300 nodes × 8 A100-SXM4-40GB, filled to about 60 % of their slices by the
placement engine with pods carrying the scheduler's own reservation annotations (webhooks.filter's
reservation_annotations) and fed to a real `Fleet`, plus 120 pods waiting for a node (more than the 101
the page diagnoses). Columns: "objects" is `fleet_view` over every node and pod (decode every
annotation, rebuild every GPU, an index per waiting pod), once; "cold" is the page's first
rendering (every node drawn); "steady" a rendering when nothing changed; "one change" a rendering
after one pod left (its node redrawn). Medians of 5 renderings. The page renders at most once a
second and only while a browser watches.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

from serve import catalog_registration  # bench/serve.py: the benches' node registrations

from mig.allowlist import ResourceNames
from mig.annotations import NODE_REGISTER
from mig.fleetview import fleet_view
from mig.placement import ContainerRequest, PlacementIndex, Plan, PodRequest
from mig.reconstruct import node_gpus
from webhooks.fleet import Fleet, reservation_annotations, usage_from_plan
from webhooks.page.view import FleetPage

SEED = 20261201
MODEL = "A100-SXM4-40GB"
SIZES = (10, 100, 300)
WAITING = 120
RUNS = 5
RESULTS = Path(__file__).resolve().parent / "results" / "page.json"


def registration(node: str, gpus: int = 8) -> str:
    return catalog_registration(MODEL, node, gpus)


def pod(name: str, memory: int, node: str = "", annotations: dict[str, str] | None = None) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(memory)}
    spec: dict[str, Any] = {
        "schedulerName": "dynmig-scheduler",
        "containers": [{"name": "main", "image": "cuda", "resources": {"limits": limits}}],
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "team",
            "uid": f"uid-{name}",
            "annotations": annotations or {},
        },
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def fleet(nodes_count: int, rng: random.Random) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes = [
        {"metadata": {"name": f"n{i:04d}", "annotations": {NODE_REGISTER: registration(f"n{i:04d}")}}}
        for i in range(nodes_count)
    ]
    states = [
        g for n in nodes for g in node_gpus(n["metadata"]["name"], registration(n["metadata"]["name"])).gpus
    ]
    index = PlacementIndex(states)
    pods, used, target = [], 0, int(0.6 * 8 * len(states))
    while used < target:
        memory = rng.choice((4000, 4000, 9000, 18000))
        name = f"p{len(pods):06d}"
        plan = index.plan(PodRequest((ContainerRequest(1, memory),)))
        if not isinstance(plan, Plan):
            break
        index.apply(plan)
        used += plan.devices[0].placement.size
        usage = usage_from_plan(f"uid-{name}", "team", name, plan)
        pods.append(pod(name, memory, plan.node, reservation_annotations(plan, usage, 1, time.time())))
    pods += [pod(f"w{i:05d}", 40000) for i in range(WAITING)]
    return nodes, pods


def median_of(fn, runs: int = RUNS) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def measure(size: int, rng: random.Random, names: ResourceNames) -> dict[str, Any]:
    nodes, pods = fleet(size, rng)
    objects = median_of(lambda: fleet_view(nodes, pods, names), runs=1)
    fleet_ = Fleet()
    fleet_.replace_nodes(nodes)
    fleet_.replace_pods(pods)
    fleet_.synced = True
    page = FleetPage(fleet_, lambda: pods, lambda: True, lambda: names, "dynmig-scheduler")
    started = time.perf_counter()
    html = page()
    cold = time.perf_counter() - started
    steady = median_of(page)
    placed = [p for p in pods if p["spec"].get("nodeName")]

    def one_change() -> None:
        fleet_.delete_pod(placed.pop())
        page()

    changed = median_of(one_change)
    return {
        "nodes": size,
        "gpus": size * 8,
        "pods": len(pods),
        "objects_ms": round(objects * 1000, 1),
        "cold_ms": round(cold * 1000, 1),
        "steady_ms": round(steady * 1000, 1),
        "one_change_ms": round(changed * 1000, 1),
        "steady_over_objects": round(steady / objects, 3),
        "html_kib": round(len(html.encode()) / 1024),
    }


def main() -> int:
    rng = random.Random(SEED)
    names = ResourceNames()
    rows = []
    head = ("nodes", "GPUs", "pods", "objects ms", "cold ms", "steady ms", "one change ms", "steady/objects")
    print(" ".join(f"{h:>14}" for h in head))
    for size in SIZES:
        row = measure(size, rng, names)
        rows.append(row)
        keys = ("nodes", "gpus", "pods", "objects_ms", "cold_ms", "steady_ms", "one_change_ms")
        print(" ".join(f"{row[k]:>14}" for k in keys) + f" {row['steady_over_objects']:>14}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"model": MODEL, "waiting": WAITING, "runs": RUNS, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
