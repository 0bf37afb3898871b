"""Benchmark of `dynmig serve`: admission over TLS, filter decisions at fleet scale, pods/s end to end.

    python bench/serve.py            (what `make bench` runs; about two minutes on two cores)

Every figure is set against a baseline measured in the same run on the same machine:
- admission (/mutate over real uvicorn + TLS, keep-alive) against a bare uvicorn JSON echo over the
  same TLS: throughput ratio, and p50/p99 at a paced 200 requests/s (latency from the *scheduled*
  send time, so a slow reply delays the next ones and shows up);
- filter decisions at 1,000 and 5,000 nodes × 8 GPUs (decode the ExtenderArgs JSON, plan with the
  placement engine, reserve; the pod patch is an API round trip and is left out) against the time to
  `json.loads` the same request body;
- pods bound per second by the simulated kube-scheduler calling `dynmig serve` (a child process,
  HTTPS) on 1,000 nodes: after a warm-up, a creator process creates GPU pods back to back while the
  scheduler runs; pods bound / wall time from the first create to the last binding.

Writes bench/results/serve.json (not committed).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime as dt
import http.client
import json
import os
import random
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "tests"))  # appended: nothing there shadows a package

from lab.cluster import free_ports  # noqa: E402 - the lab's: distinct ports, chosen together
from registration_testkit import registration  # noqa: E402 - found through the path set just above

RESULTS = ROOT / "bench" / "results" / "serve.json"
TARGETS = {
    "admission_p99_ms": 10.0,
    "admission_vs_echo": 0.5,
    "filter_p99_ms": 10.0,
    "filter_vs_decode": 5.0,
    "pods_per_second": 100.0,
}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


# ---------------------------------------------------------------- child processes: servers


def _echo_app():
    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        out = json.dumps(json.loads(body)).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(out)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": out})

    return app


def child_echo(cert: str, key: str, port_file: str) -> None:
    serve_tls_app(_echo_app(), cert, key, port_file)


def serve_tls_app(app, cert: str, key: str, port_file: str) -> None:
    """Serve `app` with uvicorn over TLS on a free port, written to `port_file` once it listens."""
    import uvicorn

    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        log_level="warning",
        lifespan="off",
        ssl_certfile=cert,
        ssl_keyfile=key,
        access_log=False,
    )
    server = uvicorn.Server(config)

    async def run():
        task = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        Path(port_file).write_text(str(server.servers[0].sockets[0].getsockname()[1]))
        await task

    asyncio.run(run())


def serving_pki(work: Path):
    """A CA and a serving certificate for the dynmig Service in `work`, and a client context trusting
    the CA: (ca, cert file, key file, context)."""
    from certs.authority import ServiceIdentity, make_ca, make_serving

    now = dt.datetime.now(dt.UTC)
    ca = make_ca(now)
    pair = make_serving(ca, ServiceIdentity("dynmig", "dynmig"), now)
    cert, key = work / "tls.crt", work / "tls.key"
    cert.write_bytes(pair.cert_pem())
    key.write_bytes(pair.key_pem())
    return ca, cert, key, ssl.create_default_context(cadata=ca.cert_pem().decode())


def stop_children(children: list[subprocess.Popen]) -> None:
    """SIGTERM each child still running, SIGKILL what has not exited 10 s later."""
    for child in children:
        if child.poll() is None:
            child.terminate()
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()


def start_child(args: list[str], port_file: Path, timeout: float = 30.0) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, *args], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + timeout
    while not port_file.exists() or not port_file.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"child {args} did not start: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.05)
    return proc


def wait_ready(url: str, ctx: ssl.SSLContext, timeout: float = 60.0) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        try:
            if urllib.request.urlopen(url, context=ctx, timeout=2).status == 200:
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} never became ready")
        time.sleep(0.1)


# ---------------------------------------------------------------- load generation


def _connection(port: int, ctx: ssl.SSLContext) -> http.client.HTTPSConnection:
    return http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)


def closed_loop(
    port: int, path: str, body: bytes, ctx: ssl.SSLContext, seconds: float, threads: int = 4
) -> float:
    """Requests per second with `threads` keep-alive connections sending back to back."""
    counts = [0] * threads
    stop = time.monotonic() + seconds
    headers = {"Content-Type": "application/json"}

    def run(i: int) -> None:
        conn = _connection(port, ctx)
        while time.monotonic() < stop:
            conn.request("POST", path, body, headers)
            reply = conn.getresponse()
            reply.read()
            assert reply.status == 200, reply.status
            counts[i] += 1
        conn.close()

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    started = time.monotonic()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return sum(counts) / (time.monotonic() - started)


def paced(port: int, path: str, body: bytes, ctx: ssl.SSLContext, rate: float, seconds: float) -> list[float]:
    """Latencies at a fixed request rate, measured from each request's scheduled send time."""
    conn = _connection(port, ctx)
    headers = {"Content-Type": "application/json"}
    conn.request("POST", path, body, headers)
    conn.getresponse().read()  # handshake outside the measurement
    out = []
    start = time.monotonic() + 0.05
    for i in range(int(rate * seconds)):
        due = start + i / rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        conn.request("POST", path, body, headers)
        reply = conn.getresponse()
        reply.read()
        out.append(time.monotonic() - due)
    conn.close()
    return out


def admission_review() -> bytes:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "train",
            "namespace": "team",
            "annotations": {"nvidia.com/mig-profile-preference": "3g"},
        },
        "spec": {
            "schedulerName": "default-scheduler",
            "containers": [
                {"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpumem": "30000"}}}
            ],
        },
    }
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "b3c1",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": "team",
                "name": "train",
                "operation": "CREATE",
                "userInfo": {"username": "alice"},
                "object": pod,
                "oldObject": None,
                "dryRun": False,
            },
        }
    ).encode()


def bench_admission(serve_port: int, echo_port: int, ctx: ssl.SSLContext) -> dict:
    body = admission_review()
    for port, path in ((serve_port, "/mutate"), (echo_port, "/")):
        closed_loop(port, path, body, ctx, 0.5)  # warm up
    echo = closed_loop(echo_port, "/", body, ctx, 4.0)
    mutate = closed_loop(serve_port, "/mutate", body, ctx, 4.0)
    lat = paced(serve_port, "/mutate", body, ctx, 200, 4.0)
    echo_lat = paced(echo_port, "/", body, ctx, 200, 2.0)
    return {
        "echo_rps": round(echo),
        "mutate_rps": round(mutate),
        "vs_echo": round(mutate / echo, 3),
        "p50_ms_at_200rps": ms(pct(lat, 0.5)),
        "p99_ms_at_200rps": ms(pct(lat, 0.99)),
        "echo_p50_ms_at_200rps": ms(pct(echo_lat, 0.5)),
        "echo_p99_ms_at_200rps": ms(pct(echo_lat, 0.99)),
    }


# ---------------------------------------------------------------- filter decisions in process


def catalog_registration(model_key: str, node: str, gpus: int) -> str:
    """`hami.io/node-nvidia-register` as dynmig's device plugin publishes it for `gpus` GPUs of one
    catalog model with the default allowlist's profiles (the benches' simulated nodes), built by the
    tests' one registration builder."""
    return registration(node, model_key, gpus)


def fleet_nodes(count: int, gpus: int, rng: random.Random) -> list[dict]:
    from mig.annotations import NODE_REGISTER

    models = ("A100-SXM4-80GB", "H100-SXM5-80GB", "A30", "RTX-PRO-6000")
    out = []
    for i in range(count):
        name = f"node-{i:05d}"
        register = catalog_registration(models[i % len(models)], name, gpus)
        out.append({"metadata": {"name": name, "annotations": {NODE_REGISTER: register}}})
    return out


def bench_filter(nodes: int, gpus: int = 8, requests: int = 400) -> dict:
    from mig.allowlist import ResourceNames
    from webhooks.extender import ExtenderArgs
    from webhooks.filter import pod_request
    from webhooks.fleet import Asking, Fleet, Placed

    rng = random.Random(nodes)
    fleet = Fleet(hold_chosen=False)  # filters without binds: a chosen node stays a candidate
    for n in fleet_nodes(nodes, gpus, rng):
        fleet.set_node(n)
    names = [f"node-{i:05d}" for i in range(nodes)]
    # fill a third of the fleet with running pods so the index sees many distinct occupancies
    for i in range(nodes * gpus // 3):
        pod = {
            "metadata": {"name": f"run-{i}", "namespace": "team", "uid": f"run-{i}"},
            "spec": {
                "containers": [
                    {
                        "name": "c",
                        "resources": {
                            "limits": {
                                "nvidia.com/gpu": "1",
                                "nvidia.com/gpumem": str(rng.choice([4000, 9000, 18000, 30000])),
                            }
                        },
                    }
                ]
            },
        }
        request = pod_request(pod, ResourceNames())
        assert request is not None, "bench pods ask for a GPU"
        fleet.decide(request, None, Asking(f"run-{i}", "team", f"run-{i}"))
    bodies = []
    for i in range(requests):
        pod = {
            "metadata": {"name": f"p{i}", "namespace": "team", "uid": f"p{i}"},
            "spec": {
                "schedulerName": "dynmig-scheduler",
                "containers": [
                    {
                        "name": "c",
                        "resources": {
                            "limits": {
                                "nvidia.com/gpu": str(rng.choice([1, 1, 1, 2])),
                                "nvidia.com/gpumem": str(rng.choice([4000, 9000, 18000, 30000, 60000])),
                            }
                        },
                    }
                ],
            },
        }
        bodies.append(json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}).encode())
    decode, decide = [], []
    for body in bodies:
        t0 = time.perf_counter()
        json.loads(body)
        decode.append(time.perf_counter() - t0)
    for body in bodies:
        t0 = time.perf_counter()
        args = ExtenderArgs.parse(json.loads(body))
        meta = args.pod["metadata"]
        request = pod_request(args.pod, ResourceNames())
        assert request is not None, "bench pods ask for a GPU"
        outcome = fleet.decide(request, args.node_names, Asking(meta["uid"], meta["namespace"], meta["name"]))
        decide.append(time.perf_counter() - t0)
        if isinstance(outcome, Placed):
            fleet.release(outcome.usage.uid, outcome.usage)  # keep the fleet's fill steady across requests
    d50, d99 = pct(decode, 0.5), pct(decode, 0.99)
    f50, f99 = pct(decide, 0.5), pct(decide, 0.99)
    return {
        "nodes": nodes,
        "gpus": nodes * gpus,
        "request_bytes": len(bodies[0]),
        "decode_p50_ms": ms(d50),
        "decode_p99_ms": ms(d99),
        "filter_p50_ms": ms(f50),
        "filter_p99_ms": ms(f99),
        "filter_p99_vs_decode_p99": round(f99 / d99, 2),
        "filter_p50_vs_decode_p50": round(f50 / d50, 2),
    }


# ---------------------------------------------------------------- end to end


def gpu_pod(name: str, i: int) -> dict:
    """A GPU pod as /mutate leaves it: our scheduler, a device count, a memory request."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": "dynmig-scheduler",
            "containers": [
                {
                    "name": "main",
                    "image": "cuda",
                    "resources": {
                        "limits": {
                            "nvidia.com/gpu": "1",
                            "nvidia.com/gpumem": str([4000, 9000, 18000, 30000][i % 4]),
                        }
                    },
                }
            ],
        },
    }


def child_create(kubeconfig: str, count: int, prefix: str) -> None:
    """Create `count` pods back to back once a line arrives on stdin: the workload's own client, in its
    own process as users' clients are, so creating pods does not share the scheduler's interpreter."""
    from kubernetes import client, config

    core = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))
    sys.stdin.readline()
    for i in range(count):
        core.create_namespaced_pod("team", gpu_pod(f"{prefix}-{i}", i), _preload_content=False).read()


def create_pods(apiserver, count: int, prefix: str) -> subprocess.Popen:
    """A creator child, started and waiting: write a line to its stdin to start creating."""
    return subprocess.Popen(
        [sys.executable, __file__, "--child-create", apiserver.kubeconfig("alice"), str(count), prefix],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )


def wait_scheduled(scheduler, target: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while scheduler.stats.scheduled < target:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds a process has used (Linux /proc), or None when it cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def cpu_per_pod(before: dict[str, float | None], pids: dict[str, int], pods: int) -> dict[str, float]:
    """Milliseconds of CPU per bound pod, per process, since `before` (processes /proc could read)."""
    out = {}
    for name, pid in pids.items():
        now, then = cpu_seconds(pid), before.get(name)
        if now is not None and then is not None and pods:
            out[name] = round((now - then) / pods * 1e3, 2)
    out["total"] = round(sum(out.values()), 2)
    return out


def _filter_time(scheduler) -> float:
    """Seconds the simulated kube-scheduler has spent in its extenders' filter calls."""
    return sum(ext.filter_seconds for ext in scheduler.extenders)


def _per_attempt(seconds: float, attempts: int) -> float:
    return ms(seconds / max(attempts, 1))


def bench_end_to_end(
    apiserver,
    serve_url: str,
    ca_pem: bytes,
    nodes: int = 1000,
    pods: int = 600,
    warmup: int = 30,
    extender_pid: int | None = None,
    other_pids: dict[str, int] | None = None,
) -> dict:
    """Pods/s = pods bound / wall time from the first create to the last binding, after a warm-up.

    Warm-up (not measured): the scheduler's informers list the 1,000 nodes, and `warmup` pods are
    created and bound, so TLS handshakes, connection pools and thread pools are up. Then a creator
    process creates `pods` pods back to back while the scheduler runs; the clock starts when it is
    told to begin and stops at the scheduler's last successful binding. Over the same window, the CPU
    each process spent per bound pod (`cpu_ms_per_pod`: the API server, the extender when its pid is
    given, this process with the simulated kube-scheduler, the pod creator, any `other_pids`): on two shared cores the
    sum bounds pods/s as much as any latency. And per scheduling attempt, the mean wall time of the
    scheduling cycle (`cycle_ms_mean`; cycles run one at a time, so pods/s is at most 1,000 / it) and
    of the extender's filter call within it (`filter_round_trip_ms_mean`).
    """
    from sim.scheduler import Scheduler, parse

    managed = ["nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores", "nvidia.com/gpumem-percentage"]
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": "dynmig-scheduler"}],
        "extenders": [
            {
                "urlPrefix": serve_url,
                "filterVerb": "filter",
                "bindVerb": "bind",
                "nodeCacheCapable": True,
                "enableHTTPS": True,
                "httpTimeout": "30s",
                "weight": 1,
                "tlsConfig": {"caData": base64.b64encode(ca_pem).decode()},
                "managedResources": [{"name": n, "ignoredByScheduler": True} for n in managed],
            }
        ],
    }
    scheduler = Scheduler(
        parse(config), apiserver.api_client("kube-scheduler"), initial_backoff=0.05, max_backoff=0.5, seed=1
    )
    warm, measured = create_pods(apiserver, warmup, "warm"), create_pods(apiserver, pods, "e2e")
    try:
        scheduler.start()
        if not scheduler.wait_synced(60):
            raise RuntimeError("the simulated scheduler did not sync its informers")
        warm.communicate("go\n", timeout=60)
        if not wait_scheduled(scheduler, warmup, 60):
            raise RuntimeError(f"warm-up: only {scheduler.stats.scheduled}/{warmup} pods bound")
        before = (scheduler.stats.attempts, scheduler.stats.unschedulable, scheduler.stats.errors)
        cycle_before, filter_before = scheduler.stats.cycle_seconds, _filter_time(scheduler)
        pids = {"apiserver": apiserver.process.pid, "scheduler": os.getpid(), "creator": measured.pid}
        if extender_pid is not None:
            pids["extender"] = extender_pid
        pids.update(other_pids or {})  # other processes of the run (a simulated node agent)
        cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        started = time.monotonic()
        measured.stdin.write("go\n")
        measured.stdin.close()
        wait_scheduled(scheduler, warmup + pods, 90)
        stats = scheduler.stats
        bound = stats.scheduled - warmup
        elapsed = (stats.last_scheduled_at if bound >= pods else time.monotonic()) - started
        cpu = cpu_per_pod(cpu_before, pids, bound)
        attempts = stats.attempts - before[0]
        cycle = _per_attempt(stats.cycle_seconds - cycle_before, attempts)
        filter_round_trip = _per_attempt(_filter_time(scheduler) - filter_before, attempts)
        measured.wait(30)
    finally:
        scheduler.stop()
        for child in (warm, measured):
            if child.poll() is None:
                child.kill()
    return {
        "nodes": nodes,
        "pods": pods,
        "bound": bound,
        "seconds": round(elapsed, 2),
        "pods_per_second": round(bound / elapsed, 1),
        "attempts": attempts,
        "cycle_ms_mean": cycle,
        "filter_round_trip_ms_mean": filter_round_trip,
        "unschedulable_attempts": stats.unschedulable - before[1],
        "errors": stats.errors - before[2],
        "cpu_ms_per_pod": cpu,
    }


# ---------------------------------------------------------------- main


class ApiProcess:
    """`python -m sim.apiserver` as a child process, with a kubeconfig per identity."""

    def __init__(self, workdir: Path):
        workdir.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sim.apiserver", "--kubeconfig-out", str(workdir)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("the simulated API server did not start")
        self.kubeconfigs = json.loads(line)["kubeconfigs"]

    def kubeconfig(self, identity: str) -> str:
        return self.kubeconfigs[identity]

    def api_client(self, identity: str):
        from kubernetes import config

        return config.new_client_from_config(config_file=self.kubeconfig(identity))


def server_side(metrics_port: int) -> dict:
    """Mean filter and bind time inside dynmig serve (from its /metrics), to see where time goes."""
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    sums: dict[str, float] = {}
    for line in text.splitlines():
        for verb in ("filter", "bind"):
            for part in ("sum", "count"):
                if line.startswith(f"dynmig_{verb}_duration_seconds_{part}"):
                    key = f"{verb}_{part}"
                    sums[key] = sums.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return {
        f"{v}_mean_ms": ms(sums.get(f"{v}_sum", 0) / max(1.0, sums.get(f"{v}_count", 0)))
        for v in ("filter", "bind")
    }


def ready_node(node: dict) -> dict:
    node.update(apiVersion="v1", kind="Node")
    node["status"] = {
        "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"},
        "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    return node


def main(only_e2e: bool = False) -> int:
    import logging

    logging.basicConfig(level=logging.ERROR)
    from kubernetes import client

    results: dict = {"targets": TARGETS}
    work = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    ca, cert, key, ctx = serving_pki(work)

    print("filter decisions (in process) ...", flush=True)
    results["filter"] = [] if only_e2e else [bench_filter(1000), bench_filter(5000)]
    for r in results["filter"]:
        print(
            f"  {r['nodes']} nodes x 8 GPUs: filter p50 {r['filter_p50_ms']} ms p99 {r['filter_p99_ms']} ms; "
            f"decode p50 {r['decode_p50_ms']} ms p99 {r['decode_p99_ms']} ms; "
            f"p99 ratio {r['filter_p99_vs_decode_p99']}x (target <= {TARGETS['filter_vs_decode']}x)",
            flush=True,
        )

    children: list[subprocess.Popen] = []
    try:
        # The simulated API server runs as its own process, as the real one does: the bench process
        # then holds only the simulated kube-scheduler and the load generators.
        apiserver = ApiProcess(work / "kube")
        children.append(apiserver.process)
        admin = client.CoreV1Api(apiserver.api_client("admin"))
        for ns in ("team", "dynmig"):
            admin.create_namespace({"metadata": {"name": ns}}, _preload_content=False)
        rng = random.Random(7)
        for n in fleet_nodes(1000, 8, rng):
            admin.create_node(ready_node(n), _preload_content=False)
        serve_port_file, echo_port_file = work / "serve.port", work / "echo.port"
        child = start_serve(apiserver.kubeconfig("scheduler"), cert, key, work)
        serve, port, metrics_port, extender_port = (
            child.process,
            child.port,
            child.metrics_port,
            child.extender_port,
        )
        children.append(serve)
        serve_port_file.write_text(str(port))
        wait_ready(f"https://127.0.0.1:{port}/readyz", ctx)
        children.append(
            start_child([__file__, "--child-echo", str(cert), str(key), str(echo_port_file)], echo_port_file)
        )
        echo_port = int(echo_port_file.read_text())

        print("admission over TLS (dynmig serve child vs bare uvicorn echo child) ...", flush=True)
        results["admission"] = a = (
            bench_admission(port, echo_port, ctx)
            if not only_e2e
            else {
                "mutate_rps": 0,
                "echo_rps": 0,
                "vs_echo": 0,
                "p50_ms_at_200rps": 0,
                "p99_ms_at_200rps": 0,
                "echo_p99_ms_at_200rps": 0,
            }
        )
        print(
            f"  /mutate {a['mutate_rps']} req/s vs echo {a['echo_rps']} req/s = {a['vs_echo']} "
            f"(target >= {TARGETS['admission_vs_echo']}); at 200 req/s p50 {a['p50_ms_at_200rps']} ms "
            f"p99 {a['p99_ms_at_200rps']} ms (echo p99 {a['echo_p99_ms_at_200rps']} ms; target p99 <= "
            f"{TARGETS['admission_p99_ms']} ms)",
            flush=True,
        )
        children[-1].terminate()

        print("end to end through the simulated kube-scheduler on 1,000 nodes ...", flush=True)
        # Pods are created without the webhooks: admission is measured above, and the simulated API
        # server's webhook client (no TCP_NODELAY) adds a ~40 ms delayed-ACK stall to every pod write.
        results["end_to_end"] = e = bench_end_to_end(
            apiserver, f"https://127.0.0.1:{extender_port}", ca.cert_pem(), extender_pid=serve.pid
        )
        e["server_side"] = server_side(metrics_port)
        print(
            f"  {e['bound']}/{e['pods']} pods bound in {e['seconds']} s = {e['pods_per_second']} pods/s "
            f"(target >= {TARGETS['pods_per_second']}); {e['attempts']} attempts, "
            f"{e['unschedulable_attempts']} unschedulable; inside dynmig serve: {e['server_side']}; "
            f"CPU ms per pod: {e['cpu_ms_per_pod']}",
            flush=True,
        )
    finally:
        stop_children(children)

    if only_e2e:
        print(f"serve log: {work / 'serve.log'}")
        return 0
    big = results["filter"][-1]
    results["verdict"] = {
        "admission_p99_ok": results["admission"]["p99_ms_at_200rps"] <= TARGETS["admission_p99_ms"],
        "admission_throughput_ok": results["admission"]["vs_echo"] >= TARGETS["admission_vs_echo"],
        "filter_p99_ok": big["filter_p99_ms"] <= TARGETS["filter_p99_ms"],
        "filter_vs_decode_ok": big["filter_p99_vs_decode_p99"] <= TARGETS["filter_vs_decode"],
        "pods_per_second_ok": results["end_to_end"]["pods_per_second"] >= TARGETS["pods_per_second"],
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"verdict: {results['verdict']}\nwrote {RESULTS.relative_to(ROOT)}")
    return 0


@dataclass
class ServeChild:
    process: subprocess.Popen
    port: int
    metrics_port: int
    extender_port: int


def start_serve(
    kubeconfig: str | Path, cert: Path, key: Path, work: Path, log_level: str = "warning"
) -> ServeChild:
    """`dynmig serve` as a child process on three free ports (webhooks, metrics, extender), TLS from
    `cert`/`key`, no leader election; its log goes to work/serve.log. The caller waits for readiness."""
    port, metrics_port, extender_port = free_ports(3)
    args = [
        *("--bind-address", "127.0.0.1", "--port", str(port), "--metrics-port", str(metrics_port)),
        *("--extender-port", str(extender_port), "--tls-cert", str(cert), "--tls-key", str(key)),
        *("--kubeconfig", str(kubeconfig), "--leader-elect", "false", "--log-level", log_level),
    ]
    process = subprocess.Popen(
        [sys.executable, "-m", "dynmig.cli", "serve", *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=(work / "serve.log").open("wb"),
    )
    return ServeChild(process, port, metrics_port, extender_port)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--child-echo", nargs=3, metavar=("CERT", "KEY", "PORT_FILE"))
    parser.add_argument("--child-create", nargs=3, metavar=("KUBECONFIG", "COUNT", "PREFIX"))
    parser.add_argument("--only-filter", action="store_true")
    parser.add_argument("--only-e2e", action="store_true")
    opts = parser.parse_args()
    if opts.child_echo:
        child_echo(*opts.child_echo)
        sys.exit(0)
    if opts.child_create:
        child_create(opts.child_create[0], int(opts.child_create[1]), opts.child_create[2])
        sys.exit(0)
    if opts.only_filter:
        for n in (1000, 5000):
            print(bench_filter(n))
        sys.exit(0)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main(only_e2e=opts.only_e2e))
