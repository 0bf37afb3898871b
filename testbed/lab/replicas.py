"""Two or more scheduler pods (`server.replicas` > 1), as the chart runs them for high availability.

Each pod of the chart's scheduler Deployment runs, as on a cluster, its own kube-scheduler (the
simulated one, with the chart's leader election on: Lease `kubeScheduler.leaderElection.resourceName`,
identity `<pod name>_<uuid>`, sim.scheduler.leader following client-go's leaderelection) and its own
`dynmig serve` (`--leader-elect=true`, `--identity=<pod name>`: it filters and binds only while its
pod's kube-scheduler holds the Lease, webhooks/leader.py). Only what differs on one machine differs:
each pod's serve listens on ports of its own on 127.0.0.1, and its kube-scheduler calls that port.

The webhook Service routes to one ready replica: a Service's EndpointSlice lists only pods whose
readiness probe passes (kube-controller-manager's endpointslice controller), and kube-proxy picks
among them. The lab re-points the Service within `ENDPOINTS_PERIOD` of the current replica failing
its probe (the chart's readinessProbe runs every few seconds on a cluster, so a cluster is slower).

A pod's end ends both its containers: deleted gracefully, its kube-scheduler releases the Lease
(ReleaseOnCancel); killed (`kill`), it does not, and a successor waits out leaseDuration (15 s).
"""

from __future__ import annotations

import contextlib
import os
import signal
import ssl
import threading
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml
from sim.scheduler.config import parse as parse_scheduler_config
from sim.scheduler.scheduler import Scheduler

from lab import chart
from lab.processes import ProcessContainers
from lab.supervisor import Child, python_argv

if TYPE_CHECKING:
    from lab.cluster import Lab

ENDPOINTS_PERIOD = 0.5  # seconds between the lab's looks at which replicas are ready


@dataclass
class Replica:
    pod: str
    serve_port: int
    metrics_port: int
    extender_port: int
    scheduler: Scheduler | None = None
    containers: ProcessContainers | None = None
    gone: bool = False  # the pod ended (killed or deleted): nothing of it runs any more


class ReplicaContainers(ProcessContainers):
    """The server container of one replica; when kubelet signals the pod to stop, the pod's
    kube-scheduler container stops with it (it releases the Lease on SIGTERM, not on SIGKILL)."""

    def __init__(self, replicas: ServeReplicas, replica: Replica, **kw: Any) -> None:
        self._replicas, self._replica = replicas, replica
        super().__init__(**kw)

    def signal(self, sig: int) -> None:
        super().signal(sig)
        if sig in (signal.SIGTERM, signal.SIGKILL):
            self._replicas.end(self._replica, release=sig == signal.SIGTERM)


class ServeReplicas:
    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        self.by_pod: dict[str, Replica] = {}
        self._lock = threading.Lock()
        self._endpoint: str | None = None  # the pod the webhook Service routes to now
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._endpoints, name="lab-endpoints", daemon=True)
        self._thread.start()

    # ---- a pod's containers (called by the pod's kubelet)

    def containers(self, pod: dict[str, Any]) -> ProcessContainers:
        name = pod["metadata"]["name"]
        with self._lock:
            first = not self.by_pod
            serve, metrics, extender = (
                (self.lab.serve_port, self.lab.metrics_port, self.lab.extender_port)
                if first
                else free_three()
            )
            replica = Replica(name, serve, metrics, extender)
            self.by_pod[name] = replica
            if first:
                self._endpoint = name  # the lab registered the Service at its port
        replica.scheduler = self._scheduler(pod, replica)
        server = self.lab._pod_container(pod, "server")
        tee = self.lab._container_log(pod, "server")
        replica.containers = ReplicaContainers(
            self,
            replica,
            supervisor=self.lab.supervisor,
            container="server",
            spawn=lambda: self._spawn(replica, server.args, server.env, tee),
            on_start=lambda child: self._started(replica, child),
            probe=lambda: _ready(self.lab, replica.serve_port),
        )
        return replica.containers

    def _scheduler(self, pod: dict[str, Any], replica: Replica) -> Scheduler:
        """The pod's kube-scheduler container: the chart's config with leader election as rendered."""
        config = self.lab._pod_scheduler_config(pod)
        doc = chart.laptop_scheduler_config(config, "127.0.0.1", replica.extender_port, self.lab.ca_file)
        doc["leaderElection"] = dict(config.get("leaderElection") or {})  # the chart's, on
        path = self.lab.workdir / "config" / f"scheduler-config-{replica.pod}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        initial, maximum = self.lab.scheduler_backoff
        scheduler = Scheduler(
            parse_scheduler_config(doc),
            self.lab.api_client("kube-scheduler"),
            initial_backoff=initial,
            max_backoff=maximum,
            hostname=replica.pod,
        ).start()
        self.lab._say(f"kube-scheduler (simulated) of {replica.pod} campaigning for the Lease")
        return scheduler

    def _spawn(self, replica: Replica, args: list[str], env: dict[str, str], tee: Any) -> Child:
        argv_args = chart.laptop_args(
            args,
            replace={
                "--port": str(replica.serve_port),
                "--metrics-port": str(replica.metrics_port),
                "--extender-port": str(replica.extender_port),
                "--leader-elect": "true",
            },
            add={
                "--bind-address": "127.0.0.1",
                "--kubeconfig": str(self.lab.kubeconfig("scheduler")),
                "--namespace": chart.NAMESPACE,
                "--identity": replica.pod,  # the downward API's pod name, as the chart sets it
            },
        )
        return self.lab.supervisor.start(
            f"serve-{replica.pod}", python_argv("-m", "dynmig.cli", *argv_args), env=env, tee=tee
        )

    def _started(self, replica: Replica, child: Child) -> None:
        if self.lab.serve is None or replica.pod == self._endpoint:
            self.lab.serve = child  # the lab's `serve` is the replica the Service routes to
        self.lab.serve_starts += 1

    # ---- a pod's end

    def end(self, replica: Replica, release: bool) -> None:
        """The pod's kube-scheduler stops with it (once)."""
        with self._lock:
            if replica.gone:
                return
            replica.gone = True
        if replica.scheduler is not None:
            replica.scheduler.stop(release=release)

    def kill(self, pod: str) -> None:
        """The replica's pod dies at once (its node lost, or `kill -9` of both containers): serve is
        SIGKILLed and its kube-scheduler stops without releasing the Lease. The pod object is then
        force-deleted, so its ReplicaSet makes a replacement."""
        replica = self.by_pod[pod]
        assert replica.containers is not None
        child = replica.containers.child
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.process.pid, signal.SIGKILL)
        threading.Thread(target=self.end, args=(replica, False), daemon=True).start()
        with contextlib.suppress(Exception):
            self.lab.core().delete_namespaced_pod(pod, chart.NAMESPACE, grace_period_seconds=0)

    def kill_serve(self, pod: str) -> None:
        """Only the replica's server container dies (`kill -9` of serve): the pod and its
        kube-scheduler stay, holding the Lease, and kubelet restarts serve after its back-off."""
        replica = self.by_pod[pod]
        assert replica.containers is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(replica.containers.child.process.pid, signal.SIGKILL)

    # ---- who leads, who serves

    def route_to(self, pod: str) -> None:
        """Route the webhook Service to this replica now (kube-proxy picks any ready endpoint: a
        bench takes the worst case, the replica it is about to kill)."""
        replica = self.by_pod[pod]
        self.lab.route_service(replica.serve_port)
        self._endpoint = pod

    @property
    def endpoint(self) -> str | None:
        """The pod the webhook Service routes to now."""
        return self._endpoint

    def live(self) -> list[Replica]:
        return [r for r in self.by_pod.values() if not r.gone]

    def leader(self) -> Replica | None:
        """The live replica whose serve says it leads (`dynmig_leader` 1 on its metrics port) and
        whose kube-scheduler holds the Lease."""
        for r in self.live():
            leading = r.scheduler is not None and r.scheduler.elector is not None
            if leading and r.scheduler.elector.leading.is_set() and _metric_leader(r.metrics_port):  # type: ignore[union-attr]
                return r
        return None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for r in list(self.by_pod.values()):
            self.end(r, release=True)

    def _endpoints(self) -> None:
        """Keep the webhook Service on a ready replica (a Service's endpoints are its ready pods)."""
        while not self._stop.wait(ENDPOINTS_PERIOD):
            with self._lock:
                current = self.by_pod.get(self._endpoint or "")
                candidates = [r for r in self.by_pod.values() if not r.gone]
            if current is not None and not current.gone and _ready(self.lab, current.serve_port):
                continue
            for r in candidates:
                if r is not current and _ready(self.lab, r.serve_port):
                    self.lab.route_service(r.serve_port)
                    self._endpoint = r.pod
                    if r.containers is not None:
                        self.lab.serve = r.containers.child
                    self.lab._say(f"webhook Service now routes to {r.pod}")
                    break


def free_three() -> tuple[int, int, int]:
    from lab.cluster import free_ports

    serve, metrics, extender = free_ports(3)
    return serve, metrics, extender


def _ready(lab: Lab, port: int) -> bool:
    """The chart's readinessProbe of the server container: GET /readyz over HTTPS."""
    ctx = ssl.create_default_context(cafile=str(lab.ca_file))
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=ctx, timeout=1) as resp:
            return bool(resp.status == 200)
    except Exception:  # noqa: BLE001 - not listening or not ready
        return False


def _metric_leader(port: int) -> bool:
    """`dynmig_leader` on a serve's metrics port is 1."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as resp:
            text = resp.read().decode(errors="replace")
    except Exception:  # noqa: BLE001 - not listening
        return False
    return any(line.startswith("dynmig_leader ") and line.split()[1] == "1.0" for line in text.splitlines())
