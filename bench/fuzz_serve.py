"""Long fuzz run against a real `dynmig serve` (a child process, TLS, loopback): hostile requests on
every endpoint, then a valid pod must still schedule.

    python bench/fuzz_serve.py [--cases 10000]     (what `make bench` runs; a few minutes on two cores)

For each of /mutate, /validate (webhook listener) and /filter, /bind (extender listener), `--cases`
requests drawn from tests/webhooks/hostile_strategies.py (hypothesis, derandomized: the same cases
every run), about one in ten a byte-level malformed body. Prints per endpoint the replies by class
(2xx/4xx/5xx), internal errors (an AdmissionReview denial with code 500 or an extender `Error`
saying "internal error"), hangs (no reply within 5 s), p50/p99/max latency with the p99 as a ratio
to a well-formed request's p99 measured just before on the same connection, and the server's RSS
before and after. Then a pod asking for 10^8 devices is filtered 200 times (RSS must not move),
and a valid pod is filtered and bound.

Writes bench/results/fuzz_serve.json (not committed). Exit status 1 if any 5xx, internal error or
hang was seen, RSS grew by more than 64 MiB, or the valid pod did not bind.
"""

from __future__ import annotations

import argparse
import http.client
import json
import ssl
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# the repository root joins sys.path first, so this import comes after it
from bench.serve import (  # noqa: E402
    ApiProcess,
    pct,
    ready_node,
    serving_pki,
    start_serve,
    stop_children,
    wait_ready,
)

RESULTS = ROOT / "bench" / "results" / "fuzz_serve.json"
HANG = 5.0
CHUNK = 1000
RSS_BUDGET_MIB = 64


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


class Client:
    """One keep-alive HTTPS connection; a timeout or a dropped connection opens a new one."""

    def __init__(self, port: int, ctx: ssl.SSLContext):
        self.port, self.ctx, self.conn = port, ctx, None

    def post(self, path: str, body: bytes) -> tuple[int | None, bytes, float]:
        started = time.perf_counter()
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPSConnection(
                    "127.0.0.1", self.port, context=self.ctx, timeout=HANG
                )
            try:
                self.conn.request("POST", path, body, {"Content-Type": "application/json"})
                reply = self.conn.getresponse()
                data = reply.read()
                if reply.getheader("connection", "").lower() == "close":
                    self.conn.close()
                    self.conn = None
                return reply.status, data, time.perf_counter() - started
            except TimeoutError:
                self.conn.close()
                self.conn = None
                return None, b"", time.perf_counter() - started
            except (ConnectionError, http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = None
                if attempt:
                    return None, b"", time.perf_counter() - started
        return None, b"", time.perf_counter() - started


def internal_error(path: str, status: int, data: bytes) -> bool:
    if status != 200:
        return False
    try:
        doc = json.loads(data)
    except ValueError:
        return True  # a 200 that is not JSON is our bug too
    if path in ("/mutate", "/validate"):
        return (doc.get("response") or {}).get("status", {}).get("code", 200) >= 500
    return "internal error" in (doc.get("Error") or "")


def baseline_p99(path: str, body: bytes, client: Client, count: int = 300) -> float:
    """p99 of one well-formed request, repeated: the yardstick the storm's latency is read against."""
    return pct([client.post(path, body)[2] for _ in range(count)], 0.99)


def storm(path: str, strategy, client: Client, cases: int, pid: int, valid: bytes) -> dict:
    from hypothesis import HealthCheck, Phase, given, seed, settings
    from hypothesis import strategies as st

    from tests.webhooks import hostile_strategies as hs

    classes: Counter[str] = Counter()
    latencies: list[float] = []
    internal = hangs = 0
    examples = []

    def one(raw: bytes) -> None:
        nonlocal internal, hangs
        status, data, seconds = client.post(path, raw)
        latencies.append(seconds)
        if status is None:
            hangs += 1
            classes["no reply"] += 1
            examples.append(raw[:200].decode("utf-8", "replace"))
            return
        classes[f"{status // 100}xx"] += 1
        if status >= 500 or internal_error(path, status, data):
            internal += status < 500
            if len(examples) < 5:
                examples.append(f"{status} {data[:200]!r} for {raw[:200]!r}")

    yardstick = baseline_p99(path, valid, client)
    before = rss_mib(pid)
    # Chunks of CHUNK cases, each with its own fixed seed: the same cases every run, and hypothesis'
    # bookkeeping of one chunk is dropped before the next (it grows with the examples of a run).
    bodies = st.one_of([strategy.map(hs.body)] * 9 + [hs.raw_bodies])  # one in ten malformed bytes
    for chunk in range(0, cases, CHUNK):
        run = given(raw=bodies)(one)
        run = settings(
            max_examples=min(CHUNK, cases - chunk),
            database=None,
            deadline=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )(run)
        seed(chunk)(run)()
    return {
        "endpoint": path,
        "cases": len(latencies),
        **{k: classes.get(k, 0) for k in ("2xx", "4xx", "5xx")},
        "internal_errors": internal,
        "hangs": hangs,
        "p50_ms": round(pct(latencies, 0.5) * 1000, 2),
        "p99_ms": round(pct(latencies, 0.99) * 1000, 2),
        "max_ms": round(max(latencies) * 1000, 1),
        "valid_p99_ms": round(yardstick * 1000, 2),
        "p99_vs_valid_p99": round(pct(latencies, 0.99) / yardstick, 2),
        "rss_before_mib": before,
        "rss_after_mib": rss_mib(pid),
        "examples": examples,
    }


def naming(args_strategy, metas: list[dict]):
    """Extender args whose pod is, half the time, one the cluster has (so planning runs, not only parsing)."""
    from hypothesis import strategies as st

    def swap(drawn):
        args, meta, swap_it = drawn
        if swap_it and isinstance(args.get("Pod"), dict):
            args = {**args, "Pod": {**args["Pod"], "metadata": meta}}
        return args

    return st.tuples(args_strategy, st.sampled_from(metas), st.booleans()).map(swap)


def main(cases: int) -> int:
    import logging

    logging.basicConfig(level=logging.ERROR)
    from kubernetes import client

    from tests.webhooks import hostile_strategies as hs
    from tests.webhooks.webhooks_testkit import gpu_pod, node

    work = Path(tempfile.mkdtemp(prefix="bench-fuzz-"))
    _ca, cert, key, ctx = serving_pki(work)
    ctx.check_hostname = False  # the certificate names the Service; we dial 127.0.0.1 (its IP SAN)
    children: list[subprocess.Popen] = []
    results: dict = {"cases_per_endpoint": cases}
    try:
        apiserver = ApiProcess(work / "kube")
        children.append(apiserver.process)
        admin = client.CoreV1Api(apiserver.api_client("admin"))
        for ns in ("team", "dynmig"):
            admin.create_namespace({"metadata": {"name": ns}}, _preload_content=False)
        for name, model in (("n1", "A100-SXM4-80GB"), ("n2", "A100-SXM4-40GB")):
            admin.create_node(ready_node(node(name, model, gpus=2)), _preload_content=False)
        child = start_serve(apiserver.kubeconfig("scheduler"), cert, key, work, log_level="error")
        serve, port, extender_port = child.process, child.port, child.extender_port
        children.append(serve)
        wait_ready(f"https://127.0.0.1:{port}/readyz", ctx)
        # Pods the cluster has, hostile but admitted (no webhooks here): half the filter cases name one
        hostile = [gpu_pod("real-0", memory=None), gpu_pod("real-1", devices=2), gpu_pod("real-2")]
        hostile[0]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem-percentage"] = "150"
        hostile[1]["metadata"]["annotations"]["nvidia.com/mig-profile-preference"] = "1g," * 1500
        metas = [
            json.loads(admin.create_namespaced_pod("team", p, _preload_content=False).data)["metadata"]
            for p in hostile
        ]
        webhook, extender = Client(port, ctx), Client(extender_port, ctx)
        start_rss = rss_mib(serve.pid)
        runs = []
        review = hs.body(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {
                    "uid": "u",
                    "operation": "CREATE",
                    "kind": {"kind": "Pod"},
                    "resource": {"resource": "pods"},
                    "namespace": "team",
                    "name": "p",
                    "userInfo": {"username": "alice"},
                    "object": gpu_pod("p"),
                },
            }
        )
        valid = {
            "/mutate": review,
            "/validate": review,
            "/filter": hs.body({"Pod": {"metadata": metas[2]}, "NodeNames": ["n1", "n2"], "Nodes": None}),
            "/bind": hs.body({"PodName": "nobody", "PodNamespace": "team", "PodUID": "u", "Node": "n1"}),
        }
        for path, strategy, target in (
            ("/mutate", hs.admission_reviews, webhook),
            ("/validate", hs.admission_reviews, webhook),
            ("/filter", naming(hs.extender_args, metas), extender),
            ("/bind", hs.binding_args, extender),
        ):
            print(f"{path}: {cases} hostile requests ...", flush=True)
            run = storm(path, strategy, target, cases, serve.pid, valid[path])
            runs.append(run)
            print(
                f"  {run['cases']} cases: 2xx {run['2xx']} 4xx {run['4xx']} 5xx {run['5xx']}, internal errors "
                f"{run['internal_errors']}, hangs {run['hangs']}; p50 {run['p50_ms']} ms p99 {run['p99_ms']} ms "
                f"max {run['max_ms']} ms (p99 {run['p99_vs_valid_p99']}x a well-formed request's "
                f"{run['valid_p99_ms']} ms); RSS {run['rss_before_mib']} -> {run['rss_after_mib']} MiB",
                flush=True,
            )
            for example in run["examples"]:
                print(f"    e.g. {example}", flush=True)
        results["endpoints"] = runs

        absurd = gpu_pod("absurd")
        absurd["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "100000000"
        created = json.loads(admin.create_namespaced_pod("team", absurd, _preload_content=False).data)
        time.sleep(0.5)  # the server's cache sees it
        args = hs.body({"Pod": created, "NodeNames": ["n1", "n2"], "Nodes": None})
        before = rss_mib(serve.pid)
        replies = [extender.post("/filter", args) for _ in range(200)]
        errors = {json.loads(data)["Error"] for status, data, _ in replies if status == 200}
        results["absurd_pod"] = a = {
            "rss_before_mib": before,
            "rss_after_mib": rss_mib(serve.pid),
            "errors": sorted(errors),
        }
        print(
            f"pod asking for 10^8 devices, filtered 200 times: RSS {a['rss_before_mib']} -> "
            f"{a['rss_after_mib']} MiB; Error: {a['errors']}",
            flush=True,
        )

        valid = json.loads(admin.create_namespaced_pod("team", gpu_pod("valid"), _preload_content=False).data)
        time.sleep(0.5)
        _, data, _ = extender.post(
            "/filter", hs.body({"Pod": valid, "NodeNames": ["n1", "n2"], "Nodes": None})
        )
        chosen = json.loads(data)["NodeNames"] or [""]
        time.sleep(0.5)  # the reservation write follows the reply; bind waits for it anyway
        _, bound, _ = extender.post(
            "/bind",
            hs.body(
                {
                    "PodName": "valid",
                    "PodNamespace": "team",
                    "PodUID": valid["metadata"]["uid"],
                    "Node": chosen[0],
                }
            ),
        )
        node_name = json.loads(admin.read_namespaced_pod("valid", "team", _preload_content=False).data)[
            "spec"
        ].get("nodeName")
        results["valid_pod"] = v = {"filter": chosen, "bind": json.loads(bound), "node": node_name}
        results["rss_start_mib"], results["rss_end_mib"] = start_rss, rss_mib(serve.pid)
        print(
            f"a valid pod afterwards: filter {chosen}, bind {v['bind']}, spec.nodeName {node_name}; "
            f"RSS from start {start_rss} -> {results['rss_end_mib']} MiB",
            flush=True,
        )
    finally:
        stop_children(children)

    bad = sum(r["5xx"] + r["internal_errors"] + r["hangs"] for r in results["endpoints"])
    grew = results["rss_end_mib"] - results["rss_start_mib"]
    results["verdict"] = {
        "no_5xx_internal_or_hang": bad == 0,
        "rss_growth_mib": round(grew, 1),
        "rss_ok": grew <= RSS_BUDGET_MIB,
        "valid_pod_bound": bool(results["valid_pod"]["node"]),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"verdict: {results['verdict']}\nwrote {RESULTS.relative_to(ROOT)}")
    return 0 if all(v for k, v in results["verdict"].items() if k != "rss_growth_mib") else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=10_000, help="hostile requests per endpoint")
    sys.exit(main(parser.parse_args().cases))
