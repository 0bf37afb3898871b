"""Device-plugin benchmark: Allocate overhead and one reconcile pass over a full node.

Run as `python bench/plugin_bench.py`. Everything runs in this process against the simulated world
(simulated NVML under pynvml, simulated kubelet over gRPC unix sockets, simulated API server over
HTTP through the official client), with the plugin's production code unchanged.

- Allocate overhead: kubelet's Allocate for a one-device pod (1g instance), timed inside the plugin's
  Allocate handler, minus the time spent inside NVML during that call (the adapter times every NVML
  call). The rest is the plugin's own work plus its API round-trips (find pod, list pods for the
  reconcile-first pass, patch runtime identity, release node lock). Also reported end to end from the
  simulated kubelet (gRPC included).
- Baselines measured in this run: the same NVML call sequence run directly (create GI at the
  placement, create CI, find the MIG UUID, destroy CI and GI), and one GET of a pod through the
  official client against the simulated API server (the unit price of an API round-trip).
- A wave: 8 A100 GPUs with 3 one-slice instances each, every pod ended, under the simulated
  driver's timing (a CI destroy 0.2 s, a GI destroy 0.8 s, each GPU's calls in series: the
  simulator's drivers/ampere.yaml); one reconcile pass, against the same destroys one after another
  (what a pass did before it handled the GPUs at once), measured in the same run on a fresh node.
- Reconcile: a node with 8 A100 GPUs and 110 pods (56 with realized MIG reservations, 54 without GPUs);
  one full pass (list pods, decode every reservation, plan; nothing to destroy), and its pure part.

Targets: Allocate overhead p99 <= 20 ms; reconcile pass <= 20 ms. Writes bench/results/plugin.json.
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kubernetes import client as k8s
from sim.apiserver import ApiServer
from sim.kubelet import SimulatedKubelet
from sim.nvml import SimulatedNvml

from base.policyfiles import default_allowlist
from mig.allowlist import DeviceConfig
from mig.annotations import (
    BIND_PHASE,
    DEVICES_TO_ALLOCATE,
    MIG_ALLOCATIONS,
    NODE_LOCK,
    VGPU_NODE,
    ContainerDevice,
    MigAllocation,
    encode_allocations,
    encode_devices,
)
from mig.types import Placement
from plugin.config import NodeConfig, PluginConfig
from plugin.instances import InstanceKey
from plugin.journal import Entry, Journal, Owner
from plugin.kube import Kube
from plugin.main import DevicePluginApp
from plugin.nvml import Nvml
from plugin.reconcile import active_reservations, plan_reclaim

NODE = "bench-node"
RESOURCE = "nvidia.com/gpu"
RESULTS = Path(__file__).resolve().parent / "results" / "plugin.json"
ALLOCATES = 120
PASSES = 40
WAVE_PER_GPU = 3
TARGET_MS = 20.0


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


def ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def pod_object(
    name: str, gpu: str, profile: str, start: int, size: int, runtime: tuple | None = None
) -> dict:
    allocation = MigAllocation.model_validate(
        {
            "containerIndex": 0,
            "deviceIndex": 0,
            "gpuUUID": gpu,
            "profile": profile,
            "placement": {"start": start, "size": size},
        }
    )
    if runtime:
        allocation = allocation.with_runtime(*runtime)
    devices = encode_devices([[ContainerDevice(gpu, "NVIDIA", 4864, 15)]])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "annotations": {
                VGPU_NODE: NODE,
                DEVICES_TO_ALLOCATE: devices,
                "hami.io/vgpu-devices-allocated": devices,
                MIG_ALLOCATIONS: encode_allocations([allocation]) or "",
                BIND_PHASE: "allocating",
                "hami.io/bind-time": "1",
            },
        },
        "spec": {
            "nodeName": NODE,
            "containers": [{"name": "c", "image": "cuda", "resources": {"limits": {RESOURCE: "1"}}}],
        },
    }


def plain_pod(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox"}]},
    }


class World:
    def __init__(self, gpus: int):
        self.tmp = Path(tempfile.mkdtemp(prefix="dpb-", dir="/tmp"))
        self.api = ApiServer(workdir=self.tmp / "api").start()
        self.sim = SimulatedNvml(
            {"node": NODE, "gpus": [{"model": "A100-SXM4-40GB", "count": gpus}]}
        ).install()
        self.kubelet = SimulatedKubelet(self.tmp / "dp").start()
        self.core = k8s.CoreV1Api(self.api.api_client("scheduler"))
        self.api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
        config = PluginConfig(
            node_name=NODE,
            device_config=DeviceConfig(default_allowlist()),
            node=NodeConfig("mig"),
            kubelet_dir=self.tmp / "dp",
            reconcile_interval=3600.0,
            state_dir=self.tmp / "state",
        )  # the ownership journal, fsync included
        self.app = DevicePluginApp(config, Kube(self.api.api_client("device-plugin"), NODE)).start()
        self.kubelet.wait_for_devices(RESOURCE, healthy=7 * gpus)
        self.uuids = self.sim.gpu_uuids

    def close(self) -> None:
        self.app.stop()
        self.kubelet.stop()
        self.sim.uninstall()
        self.api.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


def bench_allocate() -> dict:
    world = World(gpus=1)
    try:
        gpu = world.uuids[0]
        handler, end_to_end, overhead, nvml_in_call = [], [], [], []
        original = world.app.allocator.allocate

        def timed(device_ids):
            nvml_before = world.app.nvml.nvml_seconds
            started = time.perf_counter()
            try:
                return original(device_ids)
            finally:
                took = time.perf_counter() - started
                inside = world.app.nvml.nvml_seconds - nvml_before
                handler.append(took)
                nvml_in_call.append(inside)
                overhead.append(took - inside)

        world.app.allocator.allocate = timed  # measurement only: wraps the production handler
        for i in range(ALLOCATES + 5):
            name = f"p{i}"
            world.api.create(pod_object(name, gpu, "1g.5gb", i % 7, 1))
            world.core.patch_node(
                NODE, {"metadata": {"annotations": {NODE_LOCK: f"2026-01-01T00:00:00Z,default,{name}"}}}
            )
            started = time.perf_counter()
            result = world.kubelet.allocate(RESOURCE, [("c", 1)], pod_uid=name)
            end_to_end.append(time.perf_counter() - started)
            if not result.ok:
                raise SystemExit(f"Allocate failed: {result.error}")
            world.core.delete_namespaced_pod(name, "default")
            world.api.finish_deletions()
            world.kubelet.release(name)
        for series in (handler, end_to_end, overhead, nvml_in_call):
            del series[:5]  # warm-up

        world.app.tick()  # reclaim the last pod's instance before the direct NVML baseline
        # Baseline 1: the same NVML call sequence, run directly through the adapter.
        nvml = Nvml()
        handle = nvml.devices()[0].handle
        profile = next(p for p in nvml.gi_profiles(handle) if p.name == "1g.5gb")
        direct = []
        for i in range(ALLOCATES):
            started = time.perf_counter()
            nvml.mig_mode(handle)
            nvml.possible_placements(handle, profile.id)
            gi = nvml.create_gi(handle, profile.id, Placement(i % 7, 1))
            ci = nvml.create_ci(gi.handle, profile.slice_count)
            nvml.mig_uuid(handle, gi.gi_id, ci.ci_id)
            again = nvml.gi_by_id(handle, gi.gi_id)
            nvml.destroy_ci(nvml.ci_by_id(again.handle, ci.ci_id).handle)
            nvml.destroy_gi(again.handle)
            direct.append(time.perf_counter() - started)

        # Baseline 2: one API round-trip (GET pod) through the official client.
        world.api.create(plain_pod("probe"))
        api_get = []
        for _ in range(ALLOCATES):
            started = time.perf_counter()
            world.core.read_namespaced_pod("probe", "default")
            api_get.append(time.perf_counter() - started)

        # Baseline 3: one durable write of the ownership journal (write, fsync, rename, fsync dir),
        # which Allocate makes before each create: the disk's price, not the plugin's.
        journal = Journal(world.tmp / "journal-baseline")
        journal.load()
        durable = []
        for i in range(ALLOCATES):
            started = time.perf_counter()
            journal.record(Entry.intent((gpu, "1g.5gb", i % 7, 1), Owner("uid", "default", "probe")))
            durable.append(time.perf_counter() - started)
    finally:
        world.close()
    return {
        "allocations": len(handler),
        "overhead_ms": {"p50": ms(pct(overhead, 50)), "p99": ms(pct(overhead, 99))},
        "handler_ms": {"p50": ms(pct(handler, 50)), "p99": ms(pct(handler, 99))},
        "nvml_in_allocate_ms": {"p50": ms(pct(nvml_in_call, 50)), "p99": ms(pct(nvml_in_call, 99))},
        "kubelet_end_to_end_ms": {"p50": ms(pct(end_to_end, 50)), "p99": ms(pct(end_to_end, 99))},
        "baseline_direct_nvml_sequence_ms": {"p50": ms(pct(direct, 50)), "p99": ms(pct(direct, 99))},
        "baseline_api_get_pod_ms": {"p50": ms(pct(api_get, 50)), "p99": ms(pct(api_get, 99))},
        "ratio_overhead_p50_to_api_get_p50": round(pct(overhead, 50) / pct(api_get, 50), 2),
        "baseline_durable_journal_write_ms": {"p50": ms(pct(durable, 50)), "p99": ms(pct(durable, 99))},
        "overhead_minus_journal_write_p50_ms": ms(pct(overhead, 50) - pct(durable, 50)),
        "ratio_handler_p50_to_direct_nvml_p50": round(pct(handler, 50) / pct(direct, 50), 2),
        "target_overhead_p99_ms": TARGET_MS,
        "meets_target": ms(pct(overhead, 99)) <= TARGET_MS,
    }


def bench_reconcile() -> dict:
    world = World(gpus=8)
    try:
        app = world.app
        realized = 0
        for g, gpu in enumerate(world.uuids):
            for start in range(7):
                name = f"gpu{g}-{start}"
                world.api.create(pod_object(name, gpu, "1g.5gb", start, 1))
                app.manager.ensure(InstanceKey(gpu, "1g.5gb", start, 1))
                realized += 1
        for i in range(110 - realized):
            world.api.create(plain_pod(f"cpu-{i}"))
        passes, pure, lists = [], [], []
        for _ in range(PASSES):
            started = time.perf_counter()
            result = app.reconciler.run_once()
            passes.append(time.perf_counter() - started)
            if result.skipped or result.destroyed:
                raise SystemExit(f"unexpected reconcile result: {result}")
            pods = result.pods or []
            started = time.perf_counter()
            node = active_reservations(pods, frozenset(world.uuids))
            plan_reclaim(app.manager.managed(), node.keys)
            pure.append(time.perf_counter() - started)
            started = time.perf_counter()
            app.kube.list_node_pods()
            lists.append(time.perf_counter() - started)
        pod_count = len(result.pods or [])
        managed = len(app.manager.managed())
    finally:
        world.close()
    return {
        "pods_on_node": pod_count,
        "managed_instances": managed,
        "passes": PASSES,
        "pass_ms": {"p50": ms(statistics.median(passes)), "p99": ms(pct(passes, 99))},
        "pure_part_ms": {"p50": ms(statistics.median(pure)), "p99": ms(pct(pure, 99))},
        "baseline_list_pods_ms": {"p50": ms(statistics.median(lists)), "p99": ms(pct(lists, 99))},
        "ratio_pass_p50_to_list_p50": round(statistics.median(passes) / statistics.median(lists), 2),
        "target_pass_ms": TARGET_MS,
        "meets_target": ms(statistics.median(passes)) <= TARGET_MS,
    }


def bench_wave() -> dict:
    seconds = {}
    for how in ("one pass", "one after another"):
        world = World(gpus=8)
        try:
            keys, names = [], []
            for g, gpu in enumerate(world.uuids):
                for start in range(WAVE_PER_GPU):
                    names.append(f"wave{g}-{start}")
                    world.api.create(pod_object(names[-1], gpu, "1g.5gb", start, 1))
                    keys.append(InstanceKey(gpu, "1g.5gb", start, 1))
                    world.app.manager.ensure(keys[-1])
            for name in names:  # the wave ends: every pod at once
                world.core.patch_namespaced_pod_status(name, "default", {"status": {"phase": "Succeeded"}})
            world.sim.set_timing("driver")
            started = time.perf_counter()
            if how == "one pass":
                destroyed = len(world.app.reconciler.run_once().destroyed)
            else:
                for key in keys:
                    world.app.manager.release(key)
                destroyed = len(keys)
            seconds[how] = round(time.perf_counter() - started, 2)
            if destroyed != len(keys) or world.app.manager.managed():
                raise SystemExit(f"{how}: {destroyed} of {len(keys)} destroyed")
        finally:
            world.close()
    return {
        "instances": 8 * WAVE_PER_GPU,
        "seconds": seconds,
        "ratio": round(seconds["one pass"] / seconds["one after another"], 2),
    }


def main() -> int:
    allocate = bench_allocate()
    reconcile = bench_reconcile()
    wave = bench_wave()
    out = {"allocate": allocate, "reconcile": reconcile, "wave": wave}
    a, r = allocate, reconcile
    print(f"Allocate ({a['allocations']} one-device pods, A100 1g.5gb)")
    print(
        f"  overhead excl. NVML   p50 {a['overhead_ms']['p50']:7.2f} ms   p99 {a['overhead_ms']['p99']:7.2f} ms"
        f"   (target p99 <= {TARGET_MS:.0f} ms: {'met' if a['meets_target'] else 'MISSED'})"
    )
    print(
        f"  handler total         p50 {a['handler_ms']['p50']:7.2f} ms   p99 {a['handler_ms']['p99']:7.2f} ms"
    )
    print(f"  NVML inside Allocate  p50 {a['nvml_in_allocate_ms']['p50']:7.2f} ms")
    print(
        f"  kubelet end to end    p50 {a['kubelet_end_to_end_ms']['p50']:7.2f} ms   "
        f"p99 {a['kubelet_end_to_end_ms']['p99']:7.2f} ms"
    )
    print(
        f"  baseline: direct NVML sequence p50 {a['baseline_direct_nvml_sequence_ms']['p50']:.2f} ms; "
        f"API GET pod p50 {a['baseline_api_get_pod_ms']['p50']:.2f} ms"
    )
    print(
        f"  baseline: one durable journal write p50 {a['baseline_durable_journal_write_ms']['p50']:.2f} ms "
        f"p99 {a['baseline_durable_journal_write_ms']['p99']:.2f} ms; overhead minus it p50 "
        f"{a['overhead_minus_journal_write_p50_ms']:.2f} ms"
    )
    print(
        f"  ratios: overhead/API-GET {a['ratio_overhead_p50_to_api_get_p50']}x; "
        f"handler/direct-NVML {a['ratio_handler_p50_to_direct_nvml_p50']}x"
    )
    print(
        f"Reconcile pass ({r['pods_on_node']} pods, {r['managed_instances']} managed instances, {r['passes']} passes)"
    )
    print(
        f"  pass                  p50 {r['pass_ms']['p50']:7.2f} ms   p99 {r['pass_ms']['p99']:7.2f} ms"
        f"   (target <= {TARGET_MS:.0f} ms: {'met' if r['meets_target'] else 'MISSED'})"
    )
    print(f"  pure part             p50 {r['pure_part_ms']['p50']:7.2f} ms")
    print(
        f"  baseline: list pods   p50 {r['baseline_list_pods_ms']['p50']:7.2f} ms; "
        f"ratio pass/list {r['ratio_pass_p50_to_list_p50']}x"
    )
    print(
        f"A wave of {wave['instances']} ended pods' instances on 8 GPUs (the driver's timing): one pass "
        f"{wave['seconds']['one pass']:.2f} s; baseline, the same destroys one after another "
        f"{wave['seconds']['one after another']:.2f} s; ratio {wave['ratio']}x"
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
