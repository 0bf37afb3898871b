"""Serve failover: kill -9 of the leading scheduler replica during a burst of GPU pods.

Run as `python bench/chaos.py --serve-failover [--pods 30] [--seed 1] [--kill pod|serve]`. It starts
a `dynmig lab` with the chart's `server.replicas=2` and its other defaults (lab.replicas: each
scheduler pod runs its own kube-scheduler, leader election on, and its own `dynmig serve` following
that Lease), waits until one replica leads, then creates a burst of GPU pods (1g, 2g and 3g
instances that all fit at once, each runs until the end) and, once a third of them exist, kills
the leader, the webhook Service routing to it at that moment (the worst case of kube-proxy's
choice), and at once creates a pod that asks for no GPU. What is killed:

- `pod` (default): the leading replica's pod at once (serve SIGKILLed, its kube-scheduler gone
  without releasing the Lease: a node lost). The other replica must take over: its kube-scheduler
  may take the Lease only after seeing it unchanged for leaseDuration (15 s, client-go's
  leaderelection), and its serve then filters and binds from the reservations recorded in pod
  annotations.
- `serve`: only the leader's serve process (SIGKILL); its pod's kube-scheduler keeps the Lease and
  calls its extender, which does not answer: the extender is not ignorable, so GPU pods wait
  (kube-scheduler retries them with backoff) until kubelet has restarted serve (CrashLoopBackOff's
  first delay) and it leads again with its pod's kube-scheduler.

It prints one line: pods, Running, double reservations (two live pods whose recorded placements
intersect on one GPU, or one MIG device given to two), overlapping GPU instances, GPU pods admitted
without dynmig's mutating webhook (routed to the default scheduler), GPU pod creates refused
(retried, as a controller does), whether the pod without a GPU was refused, and the times from the
kill: until a replica leads again (a kube-scheduler holds the Lease and its pod's serve, a process
started after the kill or the other replica's, says `dynmig_leader` 1), until the first pod is bound
after that (a bind the killed leader decided may still land after the kill; it is not counted),
until every pod is Running.
"""

from __future__ import annotations

import random
import threading
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
    create_errors: int = 0  # GPU pod creations the API server refused (retried)
    plain_refused: int = 0  # creations refused of the pod that asks for no GPU, created right after the kill
    plain_in_window: bool = False  # the Service still routed to the killed replica when that create returned
    kill: str = "pod"  # what was killed: the leader's pod, or only its serve process
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
            and not self.plain_refused
            and self.leader_after is not None
        )

    def line(self) -> str:
        def s(v: float | None) -> str:
            return "never" if v is None else f"{v:.1f}s"

        return (
            f"serve failover: pods {self.pods}, Running {self.running}, double reservations "
            f"{self.double_reservations}, overlaps {self.overlaps}, admitted without the webhook "
            f"{self.unrouted}, creates refused {self.create_errors}, pod without a GPU refused "
            f"{self.plain_refused} ({'' if self.plain_in_window else 'not '}while the Service routed to "
            f"the killed replica); kill -9 of {self.killed}{' (serve only)' if self.kill == 'serve' else ''} "
            f"-> a replica leads after {s(self.leader_after)}, first bind after {s(self.first_bind_after)}, "
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
    kill: str = "pod",
) -> Failover:
    """`kill_at`: the share of the burst created when the leader is killed; `memory`: the MiB a pod
    asks, drawn from these (the burst must fit the nodes at once: each pod runs until the end);
    `values`: chart values beyond its defaults (`webhook.mutating.failurePolicy=Ignore`); `kill`:
    `pod` (the leader's pod, a lost node) or `serve` (only its serve process)."""
    if kill not in KILLS:
        raise ValueError(f"kill must be one of {', '.join(KILLS)}, not {kill!r}")
    rng = random.Random(seed)
    out = Failover(pods=pods, kill=kill)
    with Lab(parse_nodes(nodes), workdir=workdir, serve_replicas=2, echo=echo, values=values) as lab:
        kit = Kit(lab)
        replicas = lab.replicas
        assert replicas is not None
        kit.wait(lambda: len(replicas.live()) == 2 and replicas.leader() is not None, 120, "a leader of two")
        leader = replicas.leader()
        assert leader is not None
        watch: Watch | None = None
        for n in range(pods):
            if n == int(pods * kill_at):
                # the worst case of a Service's load balancing: the API server's webhook calls go to
                # the replica killed, until the lab's endpoints drop it (lab.replicas)
                replicas.route_to(leader.pod)
                out.killed = leader.pod
                watch = Watch(kit, replicas, leader, kill, out, timeout)
                if kill == "pod":
                    replicas.kill(leader.pod)
                else:
                    replicas.kill_serve(leader.pod)
                watch.start()
                echo(
                    f"[failover] kill -9 of {leader.pod}{'' if kill == 'pod' else ' serve'} (the leader) after {n} pods"
                )
                out.plain_refused = _create(kit, plain_pod(PLAIN), tries=1)
                out.plain_in_window = replicas.endpoint == leader.pod
            out.create_errors += _create(kit, gpu_pod(f"burst-{n:03d}", rng.choice(memory)))
        assert watch is not None
        watch.join()
        _audit(kit, out)
    return out


KILLS = ("pod", "serve")
PLAIN = "plain-after-kill"


def plain_pod(name: str) -> dict[str, Any]:
    """A pod that asks for no GPU (dynmig's webhook is not sent it)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "busybox", "command": ["sleep", "infinity"]}]},
    }


def _create(kit: Kit, pod: dict[str, Any], tries: int = 60) -> int:
    """Create as a controller does: retry a refused create (a webhook with failurePolicy Fail) every
    half second; the number of refusals. `tries` 1: once, as a bare `kubectl run` does."""
    for refused in range(tries):
        try:
            kit.create(pod)
            return refused
        except client.ApiException:  # refused by the API server (a webhook failing closed)
            time.sleep(0.5)
    if tries == 1:
        return 1
    raise RuntimeError(f"{pod['metadata']['name']}: could not be created in {tries / 2:g}s")


class Watch(threading.Thread):
    """From the kill on, every 0.1 s: who leads, which burst pods are bound and Running."""

    def __init__(self, kit: Kit, replicas: Any, killed: Any, kill: str, out: Failover, timeout: float):
        super().__init__(name="failover-watch", daemon=True)
        self.kit, self.replicas, self.out, self.timeout = kit, replicas, out, timeout
        self.killed_pod = killed.pod
        self.killed_pid = killed.containers.child.process.pid if kill == "serve" else None
        self.killed_at = time.monotonic()
        self.bound_before: set[str] = set()  # bound when a replica was last seen not leading

    def _burst(self) -> list[dict[str, Any]]:
        return [p for p in self.kit.pods() if p["metadata"]["name"].startswith("burst-")]

    @staticmethod
    def _bound(pods: list[dict[str, Any]]) -> set[str]:
        return {p["metadata"]["name"] for p in pods if (p.get("spec") or {}).get("nodeName")}

    def _new_leader(self) -> bool:
        """A replica leads that is not the process killed: the other pod, or (serve only) the same
        pod's restarted serve."""
        leader = self.replicas.leader()
        if leader is None:
            return False
        if self.killed_pid is None:
            return bool(leader.pod != self.killed_pod)
        return bool(leader.pod != self.killed_pod or leader.containers.child.process.pid != self.killed_pid)

    def run(self) -> None:
        out = self.out
        while (now := time.monotonic() - self.killed_at) < self.timeout:
            pods = self._burst()
            if out.leader_after is None:
                # a bind decided before the kill may still land: count binds from the new leader on
                self.bound_before = self._bound(pods)
                if self._new_leader():
                    out.leader_after = now
            elif out.first_bind_after is None and self._bound(pods) - self.bound_before:
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
