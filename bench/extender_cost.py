"""The extender's cost (issue 29, item 4): API writes per pod, against HAMi's protocol, and the
extender's own CPU per pod at 1,000 and 5,000 nodes.

    nice .venv/bin/python bench/extender_cost.py     (about six minutes on two shared cores; --cpu-only: that part)

- API writes per pod, counted where they arrive: the simulated API server runs in a child process
  of this bench (`--child-apiserver`) whose request path counts every write (create, update, patch,
  delete) by the caller's identity, verb and resource. Through the real `dynmig serve` process (the
  "scheduler" identity) driven by the simulated kube-scheduler (bench/serve.py's
  `bench_end_to_end`) on 1,000 nodes: the extender's writes over the bound pods (filter, node lock,
  Binding, events). The device plugin's writes (its patch after Allocate, the lock release) come
  from the real plugin code (plugin.main.DevicePluginApp, "device-plugin" identity) serving kubelet's
  Allocate on a simulated node, as bench/plugin_bench.py runs it, each pod holding its node lock as the
  extender leaves it; counted the same way (an in-process API server, the same counter). One
  process holds one simulated NVML, so the plugin's part is a run of its own.
- HAMi's count per pod (`HAMI_WRITES`), derived from the protocol reference
  (/work/shared/reference/hami-protocol.md, sections 3.2, 3.3, 4 and 5) for a one-container MIG pod
  whose node lock is free, as the table in docs/packing.md states it.
- Own CPU per pod: the extender's Service (the same code `dynmig serve` runs, in this process
  against the counting API server) handed what kube-scheduler sends (the pod, its sample of node
  names), per pod the CPU time of the calling thread (`time.thread_time`) over filter + bind
  (decode, plan, reserve, encode; bind's API calls' client work included, their wait not), at
  1,000 and 5,000 nodes x 8 GPUs; p50 and p99. Beside it the serve process's whole CPU per bound pod
  in the end-to-end run (every thread: HTTP and TLS, watches, the cache), a mean from /proc.

Targets: API writes per pod <= HAMi's; own CPU per pod p50 <= 1.5 ms at 1,000 nodes.
Writes bench/results/extender-cost.json (not committed).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import plugin_bench as pb  # noqa: E402 - bench/plugin_bench.py: the device plugin's simulated node
import serve as serve_bench  # noqa: E402 - bench/serve.py's helpers: PKI, children, nodes, pods, e2e

RESULTS = ROOT / "bench" / "results" / "extender-cost.json"
TARGETS = {"writes_per_pod_vs_hami": 1.0, "own_cpu_p50_ms_1000": 1.5}
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")

# HAMi v2.10's writes per MIG pod (one container, node lock free), from the protocol reference:
# (step, verb, resource, where the reference says so).
HAMI_WRITES = (
    ("filter: pod annotations + vgpu-node label", "patch", "pods", "3.2 step 5"),
    ("filter: FilteringSucceed event", "create", "events", "3.2 step 6"),
    ("bind: node lock hami.io/mutex.lock", "patch", "nodes", "3.3 step 3"),
    ("bind: bind-phase allocating, bind-time", "patch", "pods", "3.3 step 4"),
    ("bind: Binding", "create", "pods/binding", "3.3 step 5"),
    ("bind: BindingSucceed event", "create", "events", "3.3 step 6"),
    ("plugin: MIG runtime identity (annotateMigRuntimeInfo)", "patch", "pods", "4, after realization"),
    ("plugin: devices-to-allocate erased", "patch", "pods", "5, after the container responses"),
    ("plugin: bind-phase success", "patch", "pods", "5, try success"),
    ("plugin: node lock release", "patch", "nodes", "5, try success (owner-checked)"),
)


def hami_count(events: bool) -> int:
    return sum(1 for _, _, res, _ in HAMI_WRITES if events or res != "events")


# ---------------------------------------------------------------- the counting API server


def install_counter(server: Any) -> Counter:
    """Count every write `server` (a sim.apiserver.ApiServer) serves over HTTP, by (identity, verb,
    resource): wraps its authentication (the caller, per request thread) and its per-request check
    (called with the verb and resource of every request before it is served). Measurement only."""
    counts: Counter = Counter()
    lock = threading.Lock()
    local = threading.local()
    authenticate, check = server._authenticate, server.faults.check

    def counted_authenticate(header: str):
        ident = authenticate(header)
        local.who = getattr(ident, "name", "?")
        return ident

    def counted_check(verb: str, resource: str, namespace: str) -> None:
        if verb in WRITE_VERBS:
            with lock:
                counts[(getattr(local, "who", "?"), verb, resource)] += 1
        check(verb, resource, namespace)

    server._authenticate = counted_authenticate
    server.faults.check = counted_check
    return counts


def child_apiserver(workdir: str) -> None:
    """The simulated API server with the write counter; one JSON line of kubeconfigs when it serves,
    then on each line read from stdin one JSON line of the counts so far."""
    from sim.apiserver.identities import write_kubeconfig
    from sim.apiserver.server import ApiServer

    server = ApiServer(workdir=Path(workdir) / "api").start()
    counts = install_counter(server)
    written = {
        name: str(write_kubeconfig(Path(workdir) / f"kubeconfig-{name}.yaml", server.url, ident))
        for name, ident in server.identities.items()
    }
    print(json.dumps({"ready": True, "url": server.url, "kubeconfigs": written}), flush=True)
    for _ in sys.stdin:
        print(json.dumps([[*k, v] for k, v in counts.items()]), flush=True)
    server.stop()


class CountingApi:
    """The counting API server as a child process; the interface bench/serve.py's helpers use."""

    def __init__(self, workdir: Path):
        workdir.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--child-apiserver", str(workdir)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        line = self.process.stdout.readline() if self.process.stdout else ""
        if not line:
            raise RuntimeError("the counting API server did not start")
        self.kubeconfigs = json.loads(line)["kubeconfigs"]

    def kubeconfig(self, identity: str) -> str:
        return self.kubeconfigs[identity]

    def api_client(self, identity: str):
        from kubernetes import config

        return config.new_client_from_config(config_file=self.kubeconfig(identity))

    def counts(self) -> Counter:
        assert self.process.stdin and self.process.stdout
        self.process.stdin.write("counts\n")
        self.process.stdin.flush()
        return Counter({tuple(row[:3]): row[3] for row in json.loads(self.process.stdout.readline())})


def cluster(work: Path, nodes: int, lock_free: bool = False) -> CountingApi:
    """`lock_free`: every node's plugin says it finds Allocate's pod through kubelet's PodResources
    (the chart's default device plugin does), so bind takes no node lock there."""
    from kubernetes import client

    from mig.annotations import PLUGIN_CLAIMS, PLUGIN_CLAIMS_PODRESOURCES

    api = CountingApi(work)
    admin = client.CoreV1Api(api.api_client("admin"))
    for ns in ("team", "dynmig"):
        admin.create_namespace({"metadata": {"name": ns}}, _preload_content=False)
    for n in serve_bench.fleet_nodes(nodes, 8, random.Random(7)):
        if lock_free:
            n["metadata"].setdefault("annotations", {})[PLUGIN_CLAIMS] = PLUGIN_CLAIMS_PODRESOURCES
        admin.create_node(serve_bench.ready_node(n), _preload_content=False)
    return api


def per_pod(delta: Counter, who: str, pods: int) -> dict[str, float]:
    """`who`'s writes per pod, by 'verb resource'."""
    out: dict[str, float] = {}
    for (ident, verb, resource), n in sorted(delta.items()):
        if ident == who and n:
            out[f"{verb} {resource}"] = round(n / pods, 3)
    return out


# ---------------------------------------------------------------- writes through the real serve process


def bench_serve_writes(work: Path, cert: Path, key: Path, ca, ctx, pods: int = 300, warmup: int = 20) -> dict:
    api = cluster(work / "writes", 1000)
    children: list[subprocess.Popen] = [api.process]
    try:
        child = serve_bench.start_serve(api.kubeconfig("scheduler"), cert, key, work)
        children.append(child.process)
        serve_bench.wait_ready(f"https://127.0.0.1:{child.port}/readyz", ctx)
        before = api.counts()
        result = serve_bench.bench_end_to_end(
            api,
            f"https://127.0.0.1:{child.extender_port}",
            ca.cert_pem(),
            pods=pods,
            warmup=warmup,
            extender_pid=child.process.pid,
        )
        time.sleep(1.0)  # writes the last binding set off (events) arrive
        delta = api.counts() - before
    finally:
        serve_bench.stop_children(children[::-1])
    bound = warmup + result["bound"]
    return {
        "nodes": 1000,
        "pods_bound": bound,
        "scheduling_attempts": result["attempts"],
        "unschedulable_attempts": result["unschedulable_attempts"],
        "errors": result["errors"],
        "extender": per_pod(delta, "scheduler", bound),
        "kube_scheduler": per_pod(delta, "kube-scheduler", bound),
        "pod_creator": per_pod(delta, "alice", bound),
        "serve_process_cpu_ms_per_pod": result["cpu_ms_per_pod"].get("extender"),
        "pods_per_second": result["pods_per_second"],
    }


# ---------------------------------------------------------------- the device plugin's writes


def bench_plugin_writes(pods: int = 40) -> dict:
    """Kubelet's Allocate for `pods` one-device MIG pods (A100 1g.5gb) on a simulated node, each pod as
    the extender leaves it (annotations, bind-phase allocating, the node lock naming it); the plugin's
    writes per Allocate, counted at the API server."""
    world = pb.World(gpus=1)
    counts = install_counter(world.api)
    allocating: Counter = Counter()
    ending: Counter = Counter()
    try:
        gpu = world.uuids[0]
        failed = 0
        for i in range(pods):
            name = f"w{i}"
            world.api.create(pb.pod_object(name, gpu, "1g.5gb", i % 7, 1))  # not over HTTP: not counted
            world.core.patch_node(  # the extender's lock ("scheduler" identity: not the plugin's count)
                pb.NODE, {"metadata": {"annotations": {pb.NODE_LOCK: f"2026-01-01T00:00:00Z,default,{name}"}}}
            )
            before = Counter(counts)
            result = world.kubelet.allocate(pb.RESOURCE, [("c", 1)], pod_uid=name)
            failed += not result.ok
            time.sleep(0.05)  # the plugin's post-Allocate writes land
            allocating.update(Counter(counts) - before)
            before = Counter(counts)
            world.core.delete_namespaced_pod(name, "default")
            world.api.finish_deletions()
            world.kubelet.release(name)
            world.app.tick()  # the reconcile pass that reclaims the ended pod's instance
            ending.update(Counter(counts) - before)
    finally:
        world.close()
    return {
        "allocates": pods,
        "failed": failed,
        "plugin": per_pod(allocating, "device-plugin", pods),
        "plugin_at_pod_end": per_pod(ending, "device-plugin", pods),
    }


# ---------------------------------------------------------------- own CPU per pod


def bench_own_cpu(work: Path, nodes: int, pods: int = 300, lock_free: bool = False) -> dict:
    """Filter + bind per pod inside the Service, CPU time of the calling thread (see the docstring);
    `lock_free`: on nodes whose plugin reads PodResources, where bind makes one API call (the Binding)
    instead of HAMi's two (the node lock, then the Binding)."""
    from kubernetes import client
    from sim.scheduler.fit import num_feasible_nodes_to_find

    from kube.rest import JsonRequests
    from webhooks.config import ServeConfig
    from webhooks.main import Service

    api = cluster(work / f"cpu-{nodes}-{'free' if lock_free else 'lock'}", nodes, lock_free)
    original = JsonRequests.request
    in_calls = [0.0]  # thread CPU inside the client's API calls (bind's node lock and Binding)

    def timed(self, *args, **kwargs):  # measurement only: wraps the client's one request method
        c0 = time.thread_time()
        try:
            return original(self, *args, **kwargs)
        finally:
            in_calls[0] += time.thread_time() - c0

    JsonRequests.request = timed  # type: ignore[method-assign]
    try:
        service = Service(ServeConfig(leader_elect=False), api_client=api.api_client("scheduler"))
        service.start(wait=120)
        core = client.CoreV1Api(api.api_client("alice"))
        names = sorted(service.cache.nodes)
        sample, start = num_feasible_nodes_to_find(0, len(names)), 0
        filters, binds, walls, clients = [], [], [], []
        try:
            for i in range(pods + 10):
                created = json.loads(
                    core.create_namespaced_pod(
                        "team", serve_bench.gpu_pod(f"cpu-{i}", i), _preload_content=False
                    ).data
                )
                meta = created["metadata"]
                while service.cache.pod("team", meta["name"]) is None:
                    time.sleep(0.001)
                sent = [names[(start + k) % len(names)] for k in range(sample)]
                start = (start + sample) % len(names)
                body = json.dumps({"Pod": created, "Nodes": None, "NodeNames": sent}).encode()
                w0, c0 = time.perf_counter(), time.thread_time()
                reply = service.server.extender.filter(json.loads(body))
                json.dumps(reply)
                c1 = time.thread_time()
                chosen = (reply.get("NodeNames") or [None])[0]
                if not chosen:
                    raise RuntimeError(f"pod {meta['name']} not placed: {reply}")
                bind_body = json.dumps(
                    {"PodName": meta["name"], "PodNamespace": "team", "PodUID": meta["uid"], "Node": chosen}
                ).encode()
                c2, k0 = time.thread_time(), in_calls[0]
                bound = service.server.extender.bind(json.loads(bind_body))
                json.dumps(bound)
                c3, w3 = time.thread_time(), time.perf_counter()
                k1 = in_calls[0]
                if bound.get("Error"):
                    raise RuntimeError(f"bind of {meta['name']} failed: {bound['Error']}")
                while not _seen_bound(service, meta["name"], chosen, lock_free):
                    time.sleep(0.001)
                if i >= 10:  # warm-up
                    filters.append(c1 - c0)
                    binds.append(c3 - c2)
                    walls.append(w3 - w0)
                    clients.append(k1 - k0)
        finally:
            service.stop()
    finally:
        JsonRequests.request = original  # type: ignore[method-assign]
        serve_bench.stop_children([api.process])
    own = [f + b for f, b in zip(filters, binds, strict=True)]
    pct, ms = serve_bench.pct, serve_bench.ms
    return {
        "nodes": nodes,
        "bind": bind_kind(lock_free),
        "pods": len(own),
        "node_names_sent": sample,
        "cpu_p50_ms": ms(pct(own, 0.5)),
        "cpu_p99_ms": ms(pct(own, 0.99)),
        "filter_cpu_p50_ms": ms(pct(filters, 0.5)),
        "filter_cpu_p99_ms": ms(pct(filters, 0.99)),
        "bind_cpu_p50_ms": ms(pct(binds, 0.5)),
        "bind_cpu_p99_ms": ms(pct(binds, 0.99)),
        "wall_p50_ms": ms(pct(walls, 0.5)),
        "bind_client_calls_cpu_p50_ms": ms(pct(clients, 0.5)),
        "cpu_without_client_calls_p50_ms": ms(pct([o - c for o, c in zip(own, clients, strict=True)], 0.5)),
        "cpu_without_client_calls_p99_ms": ms(pct([o - c for o, c in zip(own, clients, strict=True)], 0.99)),
    }


def bind_kind(lock_free: bool) -> str:
    return "lock-free (PodResources)" if lock_free else "HAMi's node lock"


def _seen_bound(service: Any, name: str, node: str, lock_free: bool) -> bool:
    """The next filter sees this bind: the node locked, or on a lock-free node the pod on it."""
    if not lock_free:
        return node in service.cache.locks
    pod = service.cache.pod("team", name) or {}
    return (pod.get("spec") or {}).get("nodeName") == node


# ---------------------------------------------------------------- main


def main(cpu_only: bool = False) -> int:
    import logging

    logging.basicConfig(level=logging.ERROR)
    work = Path(tempfile.mkdtemp(prefix="bench-extender-cost-"))
    ca, cert, key, ctx = serve_bench.serving_pki(work)
    results: dict[str, Any] = {"targets": TARGETS}
    if cpu_only:
        for nodes in (1000, 5000):
            for lock_free in (False, True):
                print(json.dumps(bench_own_cpu(work, nodes, lock_free=lock_free)), flush=True)
        return 0
    print("API writes per pod, counted at the API server:", flush=True)
    results["serve"] = s = bench_serve_writes(work, cert, key, ca, ctx)
    print(
        f"  dynmig serve (real process, simulated kube-scheduler, 1,000 nodes): {s['pods_bound']} pods bound "
        f"({s['scheduling_attempts']} attempts after warm-up, {s['errors']} errors); per pod: {s['extender']}; "
        f"kube-scheduler's own per pod: {s['kube_scheduler'] or 'none'}; serve's process CPU per bound pod "
        f"{s['serve_process_cpu_ms_per_pod']} ms",
        flush=True,
    )
    results["plugin"] = p = bench_plugin_writes()
    print(
        f"  device plugin (real code, {p['allocates']} Allocates, {p['failed']} failed): per pod, Allocate and "
        f"what follows it {p['plugin']}; once the pod has ended (reclaim) {p['plugin_at_pod_end'] or 'none'}",
        flush=True,
    )
    ours = {**s["extender"]}
    for k, v in p["plugin"].items():
        ours[k] = round(ours.get(k, 0) + v, 3)
    total = round(sum(ours.values()), 2)
    no_events = round(sum(v for k, v in ours.items() if not k.endswith(" events")), 2)
    results["writes"] = {
        "dynmig_per_pod": ours,
        "dynmig_total": total,
        "dynmig_without_events": no_events,
        "hami_total": hami_count(True),
        "hami_without_events": hami_count(False),
        "hami_steps": [list(step) for step in HAMI_WRITES],
    }
    print(
        f"  per pod, extender + plugin: dynmig {total} ({no_events} without events) against HAMi's protocol "
        f"{hami_count(True)} ({hami_count(False)} without events); dynmig by verb and resource: {ours}",
        flush=True,
    )
    results["own_cpu"] = []
    for nodes, lock_free in ((1000, False), (1000, True), (5000, False), (5000, True)):
        print(
            f"extender's own CPU per pod (filter + bind, thread CPU), {nodes} nodes x 8 GPUs, "
            f"{bind_kind(lock_free)} ...",
            flush=True,
        )
        o = bench_own_cpu(work, nodes, lock_free=lock_free)
        results["own_cpu"].append(o)
        print(
            f"  p50 {o['cpu_p50_ms']} ms, p99 {o['cpu_p99_ms']} ms (filter p50 {o['filter_cpu_p50_ms']} / p99 "
            f"{o['filter_cpu_p99_ms']} ms, bind p50 {o['bind_cpu_p50_ms']} / p99 {o['bind_cpu_p99_ms']} ms; "
            f"{o['node_names_sent']} node names sent; wall p50 {o['wall_p50_ms']} ms); of it bind's API "
            f"calls' client CPU (request, urllib3, JSON) p50 {o['bind_client_calls_cpu_p50_ms']} ms; without it "
            f"p50 {o['cpu_without_client_calls_p50_ms']} ms, p99 {o['cpu_without_client_calls_p99_ms']} ms",
            flush=True,
        )
    results["verdict"] = {
        "writes_ok": total <= hami_count(True) and no_events <= hami_count(False),
        "own_cpu_p50_ok": results["own_cpu"][0]["cpu_p50_ms"] <= TARGETS["own_cpu_p50_ms_1000"],
        "own_cpu_p50_ok_lock_free": results["own_cpu"][1]["cpu_p50_ms"] <= TARGETS["own_cpu_p50_ms_1000"],
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"verdict: {results['verdict']}\nwrote {RESULTS.relative_to(ROOT)}")
    return 0


def parse(argv: list[str]) -> argparse.Namespace:
    """The command line; a typo or `--help` must not start the six-minute run (exit 2 naming it)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="See the module docstring.")
    parser.add_argument("--cpu-only", action="store_true", help="the own-CPU part alone (about 45 s)")
    parser.add_argument("--child-apiserver", metavar="WORKDIR", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = parse(sys.argv[1:])
    if args.child_apiserver:
        child_apiserver(args.child_apiserver)
        sys.exit(0)
    sys.exit(main(cpu_only=args.cpu_only))
