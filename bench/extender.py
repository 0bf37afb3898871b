"""Benchmark of the scheduler extender: its own time per pod, and pods/s against a no-op extender.

    python bench/extender.py            (what `make bench` runs; about two minutes on two cores)

Both figures are set against what is measured in the same run on the same machine:
- own time: dynmig serve's Service in this process, against the simulated API server (its own
  process) with 1,000 nodes × 8 GPUs; per pod, filter (decode the ExtenderArgs body with the node
  names kube-scheduler sends, its sample of 420 from a rotating start, plan, reserve, encode the
  reply) plus bind (decode, node lock, Binding, encode), minus the time spent inside API calls
  (kube.errors.api_seconds: every call passes there). The filter makes no API call; bind makes two
  (node lock, Binding). Target: p50 <= 3 ms.
- end to end: the simulated kube-scheduler (sim/scheduler) calling an extender over HTTPS on 1,000
  nodes; pods bound / wall time (bench/serve.py's bench_end_to_end), once with a no-op extender (it
  keeps every node and posts the Binding: one API write per pod, the least any binding extender
  does) and with dynmig serve, each against a fresh API server; five rounds, the one that runs
  first alternating between rounds (load from elsewhere on a shared machine then hits both alike),
  and the median of the five rounds' ratios is judged (a round or two disturbed by other work on the
  machine does not decide). Target: dynmig >= 0.8x no-op. Each run also prints the CPU each
  process spent per pod (API server, extender, this process with the scheduler, the pod creator),
  and what the ratio is made of: the scheduler runs one scheduling cycle at a time, so pods/s
  follows the mean cycle; per run the cycle, the extender's filter call within it, and for dynmig
  the part of that call spent inside its filter (its /metrics), and at the end their medians and
  the cycle the target needs; and the CPU all processes spend per pod, dynmig's extra over the
  no-op's against what the target allows (on two busy cores pods/s follows it).
- the floor (`bench_floor`): what the pieces of that extra that HAMi's protocol fixes cost on their
  own: the API server's CPU per node-lock merge patch and per Binding, a client's CPU per call.

Writes bench/results/extender.json (not committed).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import serve as serve_bench  # noqa: E402 - bench/serve.py's helpers: PKI, children, nodes, pods, e2e

RESULTS = ROOT / "bench" / "results" / "extender.json"
TARGETS = {"own_p50_ms": 3.0, "e2e_vs_noop": 0.8}
NODES = 1000
ROUNDS = 5  # no-op and dynmig, five times; the median ratio is judged


# ---------------------------------------------------------------- the no-op extender (child process)


def _noop_app(kubeconfig: str):
    """Filter keeps every node; bind posts the Binding. No state, no other API call."""
    from kubernetes import client, config

    core = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))

    def bind(args: dict[str, Any]) -> str:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": args["PodName"], "namespace": args["PodNamespace"], "uid": args["PodUID"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": args["Node"]},
        }
        try:
            core.create_namespaced_pod_binding(
                args["PodName"], args["PodNamespace"], body, _preload_content=False
            ).read()
        except client.ApiException as error:
            return f"bind: {error.status} {error.reason}"
        return ""

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        args = json.loads(body)
        if scope["path"].endswith("/filter"):
            reply = {"NodeNames": args.get("NodeNames"), "FailedNodes": {}, "Error": ""}
        else:
            reply = {"Error": await asyncio.to_thread(bind, args)}
        out = json.dumps(reply).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(out)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": out})

    return app


def child_noop(kubeconfig: str, cert: str, key: str, port_file: str) -> None:
    serve_bench.serve_tls_app(_noop_app(kubeconfig), cert, key, port_file)


# ---------------------------------------------------------------- a simulated node agent (child process)

# HAMi's wire facts, written here and not imported from dynmig (the bench plays the cluster's part):
# the node lock annotation `<RFC3339 time>,<pod namespace>,<pod name>`, and the pod's bind phase.
LOCK_ANNOTATION = "hami.io/mutex.lock"
BIND_PHASE_ANNOTATION = "hami.io/bind-phase"
RELEASE_DELAY = 0.5  # seconds from a pod's binding to its node's device plugin Allocate (about)


def child_agent(kubeconfig: str, delay: str) -> None:
    """What every node's device plugin does to the node lock, for all nodes at once: `delay` seconds
    after a pod is bound with bind-phase allocating (kubelet's Allocate), read the node and, if its
    lock names that pod, remove the lock by a merge patch carrying the node's resourceVersion (one
    attempt: a plugin whose release fails leaves the lock to expire)."""
    import heapq

    from kubernetes import client, config

    core = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))
    due: list[tuple[float, str, str, str]] = []  # (when, node, namespace, name)
    seen: set[tuple[str, str]] = set()
    wake = threading.Condition()

    def release() -> None:
        while True:
            with wake:
                while not due or due[0][0] > time.monotonic():
                    wake.wait(max(0.0, due[0][0] - time.monotonic()) if due else None)
                _, node, ns, name = heapq.heappop(due)
            try:
                current = json.loads(core.read_node(node, _preload_content=False).data)
                meta = current["metadata"]
                held = (meta.get("annotations") or {}).get(LOCK_ANNOTATION) or ""
                if held.split(",", 1)[-1] != f"{ns},{name}":
                    continue
                patch = {
                    "metadata": {
                        "resourceVersion": meta["resourceVersion"],
                        "annotations": {LOCK_ANNOTATION: None},
                    }
                }
                core.patch_node(
                    node, patch, _content_type="application/merge-patch+json", _preload_content=False
                ).read()
            except client.ApiException:
                continue

    threading.Thread(target=release, daemon=True).start()
    stream = core.list_pod_for_all_namespaces(watch=True, timeout_seconds=600, _preload_content=False)
    print("watching", flush=True)
    for event in _events(stream):
        pod = event.get("object") or {}
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        key = (meta.get("namespace") or "", meta.get("name") or "")
        bound = (
            spec.get("nodeName")
            and (meta.get("annotations") or {}).get(BIND_PHASE_ANNOTATION) == "allocating"
        )
        if event["type"] == "DELETED" or not bound or key in seen:
            continue
        seen.add(key)
        with wake:
            heapq.heappush(due, (time.monotonic() + float(delay), spec["nodeName"], *key))
            wake.notify()


def _events(stream: Any) -> Any:
    """A watch response's events, one JSON object a line (no model deserialization)."""
    pending = b""
    for chunk in stream.stream(65536):
        *done, pending = (pending + chunk).split(b"\n")
        yield from (json.loads(line) for line in done if line.strip())


def start_agent(kubeconfig: str) -> subprocess.Popen:
    """The node agent as a child process, once its watch is open."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child-agent", kubeconfig, str(RELEASE_DELAY)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    if proc.stdout is None or not proc.stdout.readline():
        raise RuntimeError("the simulated node agent did not start")
    return proc


# ---------------------------------------------------------------- the cluster


def cluster(work: Path) -> serve_bench.ApiProcess:
    """A fresh simulated API server (own process) with namespaces and 1,000 ready GPU nodes."""
    from kubernetes import client

    apiserver = serve_bench.ApiProcess(work)
    admin = client.CoreV1Api(apiserver.api_client("admin"))
    for ns in ("team", "dynmig"):
        admin.create_namespace({"metadata": {"name": ns}}, _preload_content=False)
    for n in serve_bench.fleet_nodes(NODES, 8, random.Random(7)):
        admin.create_node(serve_bench.ready_node(n), _preload_content=False)
    return apiserver


def start_serve(apiserver, work: Path, cert: Path, key: Path, ctx) -> tuple[subprocess.Popen, int, int]:
    """dynmig serve as a child process, as bench/serve.py runs it; (process, extender port, metrics port)."""
    child = serve_bench.start_serve(apiserver.kubeconfig("scheduler"), cert, key, work)
    serve_bench.wait_ready(f"https://127.0.0.1:{child.port}/readyz", ctx)
    return child.process, child.extender_port, child.metrics_port


# ---------------------------------------------------------------- own time


def bench_own_time(apiserver, pods: int = 300) -> dict:
    """Filter + bind per pod inside the Service, minus the time spent in API calls on that thread."""
    from kubernetes import client
    from sim.scheduler.fit import num_feasible_nodes_to_find

    from kube.errors import api_seconds
    from webhooks.config import ServeConfig
    from webhooks.main import Service

    service = Service(ServeConfig(leader_elect=False), api_client=apiserver.api_client("scheduler"))
    service.start(wait=60)
    core = client.CoreV1Api(apiserver.api_client("alice"))
    names = sorted(service.cache.nodes)
    # what kube-scheduler sends: the feasible nodes it found, a sample (420 of 1,000) from a rotating start
    sample, start = num_feasible_nodes_to_find(0, len(names)), 0
    filters: list[float] = []
    binds: list[float] = []
    api_waits: list[float] = []
    try:
        for i in range(pods):
            created = json.loads(
                core.create_namespaced_pod(
                    "team", serve_bench.gpu_pod(f"own-{i}", i), _preload_content=False
                ).data
            )
            meta = created["metadata"]
            while service.cache.pod("team", meta["name"]) is None:
                time.sleep(0.001)
            sent = [names[(start + k) % len(names)] for k in range(sample)]
            start = (start + sample) % len(names)
            body = json.dumps({"Pod": created, "Nodes": None, "NodeNames": sent}).encode()
            t0, a0 = time.perf_counter(), api_seconds()
            reply = service.server.extender.filter(json.loads(body))
            json.dumps(reply)
            t1, a1 = time.perf_counter(), api_seconds()
            chosen = (reply.get("NodeNames") or [None])[0]
            if not chosen:
                raise RuntimeError(f"pod {meta['name']} not placed: {reply}")
            bind_body = json.dumps(
                {"PodName": meta["name"], "PodNamespace": "team", "PodUID": meta["uid"], "Node": chosen}
            ).encode()
            t2, a2 = time.perf_counter(), api_seconds()
            bound = service.server.extender.bind(json.loads(bind_body))
            json.dumps(bound)
            t3, a3 = time.perf_counter(), api_seconds()
            if bound.get("Error"):
                raise RuntimeError(f"bind of {meta['name']} failed: {bound['Error']}")
            while chosen not in service.cache.locks:  # the next filter sees this node locked, as it would
                time.sleep(0.001)
            filters.append((t1 - t0) - (a1 - a0))
            binds.append((t3 - t2) - (a3 - a2))
            api_waits.append((a1 - a0) + (a3 - a2))
    finally:
        service.stop()
    own = [f + b for f, b in zip(filters, binds, strict=True)]
    pct, ms = serve_bench.pct, serve_bench.ms
    return {
        "pods": pods,
        "nodes": len(names),
        "node_names_sent": sample,
        "own_p50_ms": ms(pct(own, 0.5)),
        "own_p99_ms": ms(pct(own, 0.99)),
        "filter_own_p50_ms": ms(pct(filters, 0.5)),
        "filter_own_p99_ms": ms(pct(filters, 0.99)),
        "bind_own_p50_ms": ms(pct(binds, 0.5)),
        "bind_own_p99_ms": ms(pct(binds, 0.99)),
        "api_in_filter_and_bind_p50_ms": ms(pct(api_waits, 0.5)),
    }


# ---------------------------------------------------------------- the floor: pieces the protocol fixes

FLOOR_CALLS = 300  # API calls per piece


def bench_floor(apiserver, calls: int = FLOOR_CALLS) -> dict:
    """What the pieces of dynmig's extra work per pod cost on their own, against a fresh API server
    with no watcher (the end-to-end runs add two node watchers and two pod watchers): the API
    server's CPU per node-lock merge patch (HAMi's protocol; the no-op takes no lock), per Binding
    carrying dynmig's annotations and per plain Binding (the no-op's); and this process's CPU per
    merge patch sent through the extender's client (kube.rest.JsonRequests on urllib3) and through
    `http.client` alone on one kept-alive connection."""
    from kube.rest import JsonRequests

    api_client = apiserver.api_client("admin")
    requests = JsonRequests(api_client)
    node = requests.request("node", "GET", "/api/v1/nodes?limit=1")["items"][0]["metadata"]["name"]
    owned = requests.request("pod", "GET", "/api/v1/namespaces/team/pods/own-0")["metadata"]["annotations"]
    annotations = {k: v for k, v in owned.items() if k.startswith(("hami.io/", "dynmig.io/", "nvidia.com/"))}
    path, merge = f"/api/v1/nodes/{node}", "application/merge-patch+json"
    versions = [requests.request("node", "GET", path)["metadata"]["resourceVersion"]]

    def lock(i: int) -> None:  # as the extender takes it: on the node's version it read
        reply = requests.request("lock", "PATCH", path, _lock_patch(f"f-{i}", versions[-1]), merge)
        versions.append(reply["metadata"]["resourceVersion"])

    def binder(kind: str, extra: dict[str, str]) -> Callable[[int], None]:
        def bind(i: int) -> None:
            name = f"f-{kind}-{i}"
            body = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": name, "annotations": extra},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            }
            requests.request(
                "bind", "POST", f"/api/v1/namespaces/team/pods/{name}/binding", body, decode=False
            )

        return bind

    for kind in ("dynmig", "plain"):
        for i in range(calls):
            pod = serve_bench.gpu_pod(f"f-{kind}-{i}", i)
            requests.request("pod", "POST", "/api/v1/namespaces/team/pods", pod)

    def server() -> float:
        return serve_bench.cpu_seconds(apiserver.process.pid) or 0.0

    return {
        "calls": calls,
        "lock_patch_api_server_ms": _ms_per_call(server, lock, calls),
        "binding_dynmig_api_server_ms": _ms_per_call(server, binder("dynmig", annotations), calls),
        "binding_plain_api_server_ms": _ms_per_call(server, binder("plain", {}), calls),
        "client_json_requests_ms": _ms_per_call(
            time.process_time,
            lambda i: requests.request("lock", "PATCH", path, _lock_patch(f"j-{i}"), merge),
            calls,
        ),
        "client_http_client_ms": _http_client_ms(api_client, path, calls),
    }


def _lock_patch(holder: str, version: str | None = None) -> dict[str, Any]:
    """A merge patch setting the node lock for pod team/`holder`, on `version` when given."""
    meta: dict[str, Any] = {"annotations": {LOCK_ANNOTATION: f"2026-01-01T00:00:00Z,team,{holder}"}}
    if version is not None:
        meta["resourceVersion"] = version
    return {"metadata": meta}


def _ms_per_call(clock: Callable[[], float], call: Callable[[int], Any], calls: int) -> float:
    """Milliseconds of `clock` (CPU seconds of some process) per call."""
    before = clock()
    for i in range(calls):
        call(i)
    return round((clock() - before) / calls * 1e3, 3)


def _http_client_ms(api_client, path: str, calls: int) -> float:
    """The same merge patch (no resourceVersion) through `http.client` alone, one kept-alive connection."""
    import http.client
    import ssl
    from urllib.parse import urlsplit

    cfg = api_client.configuration
    url = urlsplit(cfg.host)
    if url.scheme == "https":
        ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
        if cfg.cert_file:
            ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(url.hostname, url.port, context=ctx)
    else:
        conn = http.client.HTTPConnection(url.hostname, url.port)
    headers = {"Accept": "application/json", "Content-Type": "application/merge-patch+json"}
    api_client.update_params_for_auth(headers, None, ["BearerToken"], path, "PATCH", None)

    def call(i: int) -> None:
        conn.request(
            "PATCH", path, json.dumps(_lock_patch(f"h-{i}"), separators=(",", ":")).encode(), headers
        )
        reply = conn.getresponse()
        data = reply.read()
        if reply.status != 200:
            raise RuntimeError(f"merge patch through http.client: {reply.status} {data[:200]!r}")
        json.loads(data)

    try:
        return _ms_per_call(time.process_time, call, calls)
    finally:
        conn.close()


# ---------------------------------------------------------------- main


def main(agent: bool = False) -> int:
    import logging

    logging.basicConfig(level=logging.ERROR)
    results: dict[str, Any] = {"targets": TARGETS}
    work = Path(tempfile.mkdtemp(prefix="bench-extender-"))
    ca, cert, key, ctx = serve_bench.serving_pki(work)
    children: list[subprocess.Popen] = []

    def fresh(name: str) -> serve_bench.ApiProcess:
        api = cluster(work / name)
        children.append(api.process)
        return api

    try:
        print(f"extender's own time per pod (in process, {NODES} nodes x 8 GPUs) ...", flush=True)
        own_api = fresh("own")
        results["own_time"] = o = bench_own_time(own_api)
        print(
            f"  filter + bind p50 {o['own_p50_ms']} ms p99 {o['own_p99_ms']} ms (target p50 <= "
            f"{TARGETS['own_p50_ms']} ms); filter p50 {o['filter_own_p50_ms']} ms, bind p50 "
            f"{o['bind_own_p50_ms']} ms; API round trips on that path p50 {o['api_in_filter_and_bind_p50_ms']} ms",
            flush=True,
        )
        results["floor"] = f = bench_floor(own_api)
        print(
            f"  pieces the protocol fixes, each on its own ({f['calls']} calls, no watchers): API server CPU "
            f"per node-lock merge patch {f['lock_patch_api_server_ms']} ms, per Binding with dynmig's "
            f"annotations {f['binding_dynmig_api_server_ms']} ms, per plain Binding "
            f"{f['binding_plain_api_server_ms']} ms; client CPU per merge patch: the extender's (urllib3) "
            f"{f['client_json_requests_ms']} ms, http.client alone {f['client_http_client_ms']} ms",
            flush=True,
        )
        stop_children(children)

        rounds: list[dict[str, Any]] = []
        results["http_parser"] = parser = _http_parser()
        results["mode"] = mode = (
            f"a simulated node agent releases each node lock {RELEASE_DELAY} s after the binding, "
            "as the device plugin's Allocate does"
            if agent
            else "no device plugin runs, so every node lock stays until it expires (5 min)"
        )
        print(f"both extenders: uvicorn over TLS, HTTP parsed by {parser}; {mode}", flush=True)
        for r in range(ROUNDS):  # alternated, so load from elsewhere on the machine hits both alike
            print(
                f"end to end, round {r + 1}/{ROUNDS}, simulated kube-scheduler on {NODES} nodes:", flush=True
            )
            measured: dict[str, dict[str, Any]] = {}
            for kind in ("noop", "dynmig") if r % 2 == 0 else ("dynmig", "noop"):
                measured[kind] = e2e_run(kind, r, fresh, work, cert, key, ca, ctx, children, agent)
                stop_children(children)
            n, d = measured["noop"], measured["dynmig"]
            ratio = round(d["pods_per_second"] / max(n["pods_per_second"], 1e-9), 2)
            print(f"  no-op extender: {_e2e_line(n)}", flush=True)
            print(f"  dynmig serve:   {_e2e_line(d)}; {ratio}x the no-op extender", flush=True)
            print(f"  load average after the round: {_load()}", flush=True)
            rounds.append({"noop": n, "dynmig": d, "ratio": ratio, "load_average": _load()})
        results["rounds"] = rounds
        results["e2e_vs_noop"] = e2e = round(statistics.median(r["ratio"] for r in rounds), 2)
        print(f"  dynmig / no-op, median of {ROUNDS} rounds: {e2e}x (target >= {TARGETS['e2e_vs_noop']}x)")
        results["cycle"] = c = cycle_anatomy(rounds, TARGETS["e2e_vs_noop"])
        print(
            f"  scheduling cycle, medians: no-op {c['noop_cycle_ms']} ms, dynmig {c['dynmig_cycle_ms']} ms "
            f"(the target needs <= {c['cycle_for_target_ms']} ms); dynmig's filter call takes "
            f"{c['filter_call_extra_ms']} ms longer than the no-op's, {c['filter_inside_dynmig_ms']} ms of "
            "the call inside dynmig's filter",
            flush=True,
        )
        print(
            f"  CPU per pod over all processes, medians: no-op {c['noop_cpu_ms_per_pod']} ms, dynmig "
            f"{c['dynmig_cpu_ms_per_pod']} ms; on two busy cores pods/s follows it: dynmig's extra "
            f"{c['dynmig_extra_cpu_ms']} ms against the {c['extra_cpu_the_target_allows_ms']} ms the target allows",
            flush=True,
        )
    finally:
        stop_children(children)
    results["verdict"] = {
        "own_p50_ok": results["own_time"]["own_p50_ms"] <= TARGETS["own_p50_ms"],
        "e2e_vs_noop_ok": results["e2e_vs_noop"] >= TARGETS["e2e_vs_noop"],
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"verdict: {results['verdict']}\nwrote {RESULTS.relative_to(ROOT)}")
    return 0


def e2e_run(
    kind: str, r: int, fresh, work: Path, cert, key, ca, ctx, children: list, agent: bool = False
) -> dict[str, Any]:
    """One end-to-end run against a fresh API server: the no-op extender or dynmig serve; with
    `agent`, the simulated node agent releases node locks as device plugins do (its CPU counts)."""
    api = fresh(f"{kind}-{r}")
    others: dict[str, int] = {}
    if agent:
        node_agent = start_agent(api.kubeconfig("device-plugin"))
        children.append(node_agent)
        others["node-agent"] = node_agent.pid
    if kind == "noop":
        port_file = work / f"noop-{r}.port"
        noop = serve_bench.start_child(
            [__file__, "--child-noop", api.kubeconfig("scheduler"), str(cert), str(key), str(port_file)],
            port_file,
        )
        children.append(noop)
        url, pid = f"https://127.0.0.1:{port_file.read_text()}", noop.pid
    else:
        serve, port, metrics_port = start_serve(api, work, cert, key, ctx)
        children.append(serve)
        url, pid = f"https://127.0.0.1:{port}", serve.pid
    result = serve_bench.bench_end_to_end(api, url, ca.cert_pem(), extender_pid=pid, other_pids=others)
    if kind != "noop":  # dynmig's own mean filter time (its /metrics: warm-up and measured pods)
        result["filter_inside_ms_mean"] = serve_bench.server_side(metrics_port)["filter_mean_ms"]
    return result


def _load() -> str:
    """The machine's 1-minute load average (the benches share two cores with other work)."""
    return f"{os.getloadavg()[0]:.1f}"


def _http_parser() -> str:
    """Which HTTP parser uvicorn's http="auto" picks here, for dynmig serve and the no-op alike."""
    try:
        import httptools  # noqa: F401 - only asks whether it is installed
    except ImportError:
        return "h11 (pure Python)"
    return "httptools"


def _e2e_line(e: dict[str, Any]) -> str:
    cpu = ", ".join(f"{k} {v}" for k, v in e["cpu_ms_per_pod"].items())
    inside = f", {e['filter_inside_ms_mean']} ms of it inside dynmig" if "filter_inside_ms_mean" in e else ""
    return (
        f"{e['bound']}/{e['pods']} pods in {e['seconds']} s = {e['pods_per_second']} pods/s; CPU ms per pod: "
        f"{cpu}; scheduling cycle {e['cycle_ms_mean']} ms, its filter call {e['filter_round_trip_ms_mean']} ms{inside}"
    )


def cycle_anatomy(rounds: list[dict[str, Any]], target: float) -> dict[str, float]:
    """What the ratio is made of, medians over the rounds: the simulated kube-scheduler runs one
    scheduling cycle at a time, so pods/s follows the cycle; the target needs dynmig's cycle within
    the no-op's / target, and the filter call is where dynmig's cycle differs."""

    def median(kind: str, field: str) -> float:
        return round(statistics.median(r[kind][field] for r in rounds), 2)

    noop_cycle, cycle = median("noop", "cycle_ms_mean"), median("dynmig", "cycle_ms_mean")
    cpu = {
        k: round(statistics.median(r[k]["cpu_ms_per_pod"]["total"] for r in rounds), 2)
        for k in ("noop", "dynmig")
    }
    return {
        "noop_cpu_ms_per_pod": cpu["noop"],
        "dynmig_cpu_ms_per_pod": cpu["dynmig"],
        "dynmig_extra_cpu_ms": round(cpu["dynmig"] - cpu["noop"], 2),
        "extra_cpu_the_target_allows_ms": round(cpu["noop"] * (1 / target - 1), 2),
        "noop_cycle_ms": noop_cycle,
        "dynmig_cycle_ms": cycle,
        "cycle_for_target_ms": round(noop_cycle / target, 2),
        "filter_call_extra_ms": round(
            median("dynmig", "filter_round_trip_ms_mean") - median("noop", "filter_round_trip_ms_mean"), 2
        ),
        "filter_inside_dynmig_ms": median("dynmig", "filter_inside_ms_mean"),
    }


def stop_children(children: list[subprocess.Popen]) -> None:
    """The extender first, the API server it watches last."""
    serve_bench.stop_children(children[::-1])
    children.clear()


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--child-noop":
        child_noop(*sys.argv[2:])
        sys.exit(0)
    if len(sys.argv) == 4 and sys.argv[1] == "--child-agent":
        child_agent(*sys.argv[2:])
        sys.exit(0)
    threading.current_thread().name = "bench"
    sys.exit(main(agent="--release-locks" in sys.argv[1:]))
