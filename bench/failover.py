"""Serve failover: kill -9 of the leading scheduler replica during a burst of GPU pods.

Run as `python bench/chaos.py --serve-failover [--pods 30] [--seed 1]`. It starts a `dynmig lab`
with the chart's `server.replicas=2` (lab.replicas: each scheduler pod runs its own kube-scheduler,
leader election on, and its own `dynmig serve` following that Lease), waits until one replica
leads, then creates a burst of GPU pods (1g, 2g and 3g instances that all fit at once, each runs
until the end) and, once a third of them exist, kills the leading replica's pod at once (serve
SIGKILLed, its kube-scheduler gone without releasing the Lease: a node lost), the webhook Service
routing to it at that moment (the worst case of kube-proxy's choice). The other replica
must take over: its kube-scheduler may take the Lease only after seeing it unchanged for
leaseDuration (15 s, client-go's leaderelection), and its serve then filters and binds from the
reservations recorded in pod annotations.

It prints one line: pods, Running, double reservations (two live pods whose recorded placements
intersect on one GPU, or one MIG device given to two), overlapping GPU instances, pods admitted
without dynmig's mutating webhook (failurePolicy Ignore: routed to the default scheduler), and the
failover times from the kill: until a surviving replica leads (its kube-scheduler holds the Lease
and its serve's `dynmig_leader` is 1), until the first pod is bound after the kill, until every
pod is Running.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client
from lab.cluster import Lab
from lab.kit import Kit, gpu_pod
from lab.nodes import parse_nodes

from mig.annotations import MIG_ALLOCATIONS, AnnotationError, decode_allocations
from mig.types import Placement

MEMORY = (4000, 4000, 9000)  # 1g.5gb, 2g.10gb on an A100-40GB; 1g.24gb on an RTX PRO 6000
SCHEDULER = "dynmig-scheduler"  # the schedulerName the mutating webhook routes GPU pods to


@dataclass
class Failover:
    pods: int = 0
    running: int = 0
    double_reservations: int = 0
    overlaps: int = 0
    unrouted: int = 0  # admitted without the mutating webhook (not routed to dynmig's scheduler)
    create_errors: int = 0  # pod creations the API server refused (retried)
    killed: str = ""
    leader_after: float | None = None  # seconds from the kill until a surviving replica leads
    first_bind_after: float | None = None
    all_running_after: float | None = None
    details: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return (
            self.running == self.pods
            and not self.double_reservations
            and not self.overlaps
            and not self.unrouted
            and self.leader_after is not None
        )

    def line(self) -> str:
        def s(v: float | None) -> str:
            return "never" if v is None else f"{v:.1f}s"

        return (
            f"serve failover: pods {self.pods}, Running {self.running}, double reservations "
            f"{self.double_reservations}, overlaps {self.overlaps}, admitted without the webhook "
            f"{self.unrouted}, creates refused {self.create_errors}; kill -9 of {self.killed} -> a "
            f"replica leads after {s(self.leader_after)}, first bind after {s(self.first_bind_after)}, "
            f"every pod Running after {s(self.all_running_after)}"
        )


def run(
    nodes: str,
    pods: int = 30,
    seed: int = 1,
    echo: Any = print,
    workdir: Path | None = None,
    kill_at: float = 1 / 3,
    timeout: float = 240.0,
    memory: tuple[int, ...] = MEMORY,
    values: tuple[str, ...] = (),
) -> Failover:
    """`kill_at`: the share of the burst created when the leader is killed; `memory`: the MiB a pod
    asks, drawn from these (the burst must fit the nodes at once: each pod runs until the end);
    `values`: chart values (`webhook.mutating.failurePolicy=Fail`)."""
    rng = random.Random(seed)
    out = Failover(pods=pods)
    with Lab(parse_nodes(nodes), workdir=workdir, serve_replicas=2, echo=echo, values=values) as lab:
        kit = Kit(lab)
        replicas = lab.replicas
        assert replicas is not None
        kit.wait(lambda: len(replicas.live()) == 2 and replicas.leader() is not None, 120, "a leader of two")
        leader = replicas.leader()
        assert leader is not None
        killed_at = 0.0
        for n in range(pods):
            if n == int(pods * kill_at):
                # the worst case of a Service's load balancing: the API server's webhook calls go to
                # the replica killed, until the lab's endpoints drop it (lab.replicas)
                replicas.route_to(leader.pod)
                out.killed = leader.pod
                replicas.kill(leader.pod)
                killed_at = time.monotonic()
                echo(f"[failover] kill -9 of {leader.pod} (the leader) after {n} pods")
            _create(kit, gpu_pod(f"burst-{n:03d}", rng.choice(memory)), out)
        _follow(kit, replicas, leader.pod, killed_at, out, timeout)
        _audit(kit, out)
    return out


def _create(kit: Kit, pod: dict[str, Any], out: Failover) -> None:
    """Create as a controller does: retry a refused create (a webhook with failurePolicy Fail)."""
    for _ in range(60):
        try:
            kit.create(pod)
            return
        except client.ApiException:  # refused by the API server (a webhook failing closed): retried
            out.create_errors += 1
            time.sleep(0.5)
    raise RuntimeError(f"{pod['metadata']['name']}: could not be created in 30s")


def _follow(kit: Kit, replicas: Any, killed: str, killed_at: float, out: Failover, timeout: float) -> None:
    deadline = killed_at + timeout
    bound_at_kill: set[str] | None = None
    while time.monotonic() < deadline:
        now = time.monotonic() - killed_at
        if out.leader_after is None:
            leader = replicas.leader()
            if leader is not None and leader.pod != killed:
                out.leader_after = now
        pods = [p for p in kit.pods() if p["metadata"]["name"].startswith("burst-")]
        bound = {p["metadata"]["name"] for p in pods if (p.get("spec") or {}).get("nodeName")}
        if bound_at_kill is None:
            bound_at_kill = bound
        if out.first_bind_after is None and bound - bound_at_kill:
            out.first_bind_after = now
        running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        if len(running) == out.pods and out.leader_after is not None:
            out.all_running_after = now
            return
        time.sleep(0.1)


def _audit(kit: Kit, out: Failover) -> None:
    pods = [p for p in kit.pods() if p["metadata"]["name"].startswith("burst-")]
    out.running = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running")
    out.unrouted = sum(1 for p in pods if (p.get("spec") or {}).get("schedulerName") != SCHEDULER)
    taken: dict[str, list[tuple[int, str]]] = {}  # GPU -> (slice mask, pod) of every live pod
    owners: dict[str, str] = {}
    for p in pods:
        if (p.get("status") or {}).get("phase") in ("Failed", "Succeeded"):
            continue
        for a in _allocations(p):
            name = p["metadata"]["name"]
            for mask, other in taken.get(a.gpuUUID, []):
                if mask & a.placement_value.mask and other != name:
                    out.double_reservations += 1
                    out.details.append(f"{name} and {other} reserved intersecting slices on {a.gpuUUID}")
            taken.setdefault(a.gpuUUID, []).append((a.placement_value.mask, name))
            if a.migUUID and owners.setdefault(a.migUUID, name) != name:
                out.double_reservations += 1
                out.details.append(f"{a.migUUID} given to {name} and {owners[a.migUUID]}")
    by_gpu: dict[str, int] = {}
    for i in kit.instances():
        mask = Placement(i.start, i.size).mask
        if by_gpu.get(i.gpu_uuid, 0) & mask:
            out.overlaps += 1
            out.details.append(f"instances overlap on {i.gpu_uuid} at {i.start}:{i.size}")
        by_gpu[i.gpu_uuid] = by_gpu.get(i.gpu_uuid, 0) | mask
    for p in pods:
        phase = (p.get("status") or {}).get("phase")
        if phase != "Running":
            out.details.append(
                f"{p['metadata']['name']} {phase}: {(p.get('status') or {}).get('message', '')}"
            )


def _allocations(pod: dict[str, Any]) -> tuple[Any, ...]:
    try:
        return decode_allocations((pod["metadata"].get("annotations") or {}).get(MIG_ALLOCATIONS))
    except AnnotationError:
        return ()
