"""`Lab`: the whole system on one machine — simulated cluster and GPUs, real dynmig processes.

    lab = Lab(parse_nodes(DEFAULT_NODES), workdir).start()   # prints progress through `echo`
    core = lab.core()                                         # official client, as admin
    lab.nodes["gpu-rtx"].nvml.nvidia_smi_L()
    lab.restart_plugin("gpu-rtx")
    lab.stop()                                                # no process, socket or thread left

What runs where: the simulated API server, kube-scheduler (the chart's dynmig profile, and the
default profile for the chart's own pods), kube-controller-manager (`controllers`) and kubelets
(device-plugin manager and pod side, `sim.kubelet`) run as threads of this process (the outside
world). The lab creates the chart's Deployment and DaemonSet in the API; their pods' containers are
real child processes that the kubelets start, signal and restart: `dynmig serve` and one
`dynmig device-plugin` per node, unchanged, the device plugins under the simulated NVML (a state
file per node that this process reads too). A node started with `@dra` runs `dynmig dra-plugin`
instead, for the chart's dra-plugin DaemonSet, and its kubelet prepares pods' ResourceClaims
through it (lab.dra_node). A Job's pod whose container is of the dynmig image (the
chart's certificate hooks) runs its args as a real `dynmig` process too, so `helm install` on a
running lab completes. Every other pod runs the simulated workload on its MIG devices. `dynmig serve` gets the chart's
args and environment: it serves (and, as Lease holder, renews) the certificate in the Secret through
the API, as in a cluster; only kube-scheduler reads a file, the CA the chart mounts into it.
"""

from __future__ import annotations

import base64
import copy
import os
import platform
import shutil
import signal
import socket
import ssl
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from contextlib import ExitStack, redirect_stderr, redirect_stdout, suppress
from dataclasses import dataclass
from io import StringIO
from pathlib import Path
from typing import Any, Self

import yaml
from kubernetes import client
from sim.apiserver import ApiServer
from sim.apiserver.identities import Identity, service_account
from sim.kubelet import EXIT_CODE, SimulatedKubelet, SimulatedPods
from sim.kubelet.lease import NodeLease
from sim.kubelet.status import UPDATE_S, NodeStatus
from sim.nvml import SimulatedNvml, caps
from sim.scheduler.config import API_VERSION as SCHEDULER_API
from sim.scheduler.config import parse as parse_scheduler_config
from sim.scheduler.scheduler import Scheduler

from base.policyfiles import load_device_config
from certs import main as certs_main
from lab import chart, dra_node, jobpods, report, volumes
from lab.controllers import ControllerManager
from lab.nodes import LabNode
from lab.processes import ProcessContainers
from lab.replicas import ServeReplicas
from lab.supervisor import Child, ChildFailed, Supervisor, python_argv
from mig.allowlist import published

NAMESPACE = chart.NAMESPACE
PLUGIN_READY = "registered nvidia.com/gpu with kubelet"
PLUGIN_DAEMONSET = f"{chart.RELEASE}-device-plugin"
DRA_DAEMONSET = dra_node.DAEMONSET
SERVE_DEPLOYMENT = f"{chart.RELEASE}-scheduler"
# kubelet's container restart back-off is 10 s doubling to 300 s; the lab keeps its shape, shorter
RESTART_BACKOFF = (1.0, 16.0)
# the Job controller's back-off before replacing a failed pod is 10 s doubling to 10 min; shorter here
JOB_BACKOFF = (1.0, 60.0)
# kubelet's pod worker retries a failed sync (a failed NodePrepareResources) after 10 s; shorter here
DRA_RETRY = 1.0
CDI_RETRY = (
    1.0  # a container whose CDI device did not resolve is created again after this (kubelet: its back-off)
)
DEVICES_TIMEOUT = 10.0  # seconds from a device plugin's registration to its first healthy device
# GOARCH names, as a kubelet reports its machine
ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


class LabError(RuntimeError):
    pass


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct free ports: each socket stays bound until all are chosen (one at a time, the
    kernel may hand the same port out twice once the first socket is closed)."""
    with ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in sockets]


def free_port(host: str = "127.0.0.1") -> int:
    return free_ports(1, host)[0]


@dataclass
class NodeRuntime:
    spec: LabNode
    state_file: Path
    plugin_dir: Path
    nvml: SimulatedNvml
    kubelet: SimulatedKubelet
    agent: SimulatedPods | None = None  # the kubelet's pod side
    lease: NodeLease | None = None  # the kubelet's heartbeat
    status: NodeStatus | None = None  # the kubelet's node status sync (allocatable of the resource)
    plugin: Child | None = None  # the device plugin process now running for the DaemonSet's pod
    plugin_starts: int = 0
    # the device plugin's metrics port, the same for every process of the node's DaemonSet pod (as the
    # chart's containerPort is), so a Prometheus scraping it sees the same target across restarts
    metrics_port: int = 0
    dra: dra_node.DraSide | None = None  # a DRA node's kubelet DRA side and its dra-plugin process
    cdi_dir: Path | None = None  # the runtime's CDI spec dir, when the chart's plugin writes CDI specs
    mig_minors: Path | None = None  # the simulated driver's /proc/driver/nvidia-caps/mig-minors

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True)
class PodContainer:
    """A chart pod's container as the lab runs it: args (ConfigMap paths made local) and env."""

    args: list[str]
    env: dict[str, str]


class Lab:
    """Args:
    nodes: the simulated GPU nodes (`lab.nodes.parse_nodes`).
    workdir: where state files, configs, kubeconfigs and child logs go (a temp dir if None).
    policy: a device-config file to use instead of the chart's default allowlist.
    echo: where progress lines go (one line per call).
    reconcile_interval: the device plugins' reclaim period in seconds (HAMi uses 5).
    node_status_period: how often each kubelet publishes its allocatable GPUs (kubelet's
      nodeStatusUpdateFrequency, 10 s): a dead plugin's node shows 0 at most this long after.
    page: install the chart with the live slice-map page on (server.page.enabled); see `page_url`.
    values: further chart values (`--set` arguments, e.g. `draPlugin.extendedResources.profiles={1g.10gb}`;
        devicePlugin.deviceListStrategy=cdi: the node's runtime then resolves CDI devices from the
        node's spec dir, `NodeRuntime.cdi_dir`).
    policy_text: a device config's text, used as `policy` is when no policy file is given.
    json_values: chart values as `helm install --set-json` takes them (`allocationWriters=[...]`).
    serve_replicas: the chart's server.replicas; above 1 each scheduler pod runs its own
      kube-scheduler (leader election on) and dynmig serve (lab.replicas, `replicas`).
    """

    def __init__(
        self,
        nodes: tuple[LabNode, ...],
        workdir: Path | None = None,
        policy: Path | None = None,
        echo: Callable[[str], None] | None = None,
        reconcile_interval: float = 1.0,
        scheduler_backoff: tuple[float, float] = (0.5, 2.0),
        page: bool = False,
        values: tuple[str, ...] = (),
        policy_text: str | None = None,
        json_values: tuple[str, ...] = (),
        node_status_period: float = UPDATE_S,
        serve_replicas: int = 1,
    ):
        self.specs = nodes
        self.serve_replicas = serve_replicas
        self.replicas: ServeReplicas | None = None  # serve_replicas > 1: each pod's pair (lab.replicas)
        self.policy_text = policy_text if policy is None else None  # a policy file wins
        self.json_values = json_values
        self.node_status_period = node_status_period
        self.page = page
        self.values = values
        self.page_port = 0
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="dynmig-lab-")
            workdir = Path(self._tmp.name)
        self.workdir = Path(workdir)
        # unix socket paths must stay short, wherever the workdir is
        self._sockets = tempfile.TemporaryDirectory(prefix="dynmig-lab-kubelet-")
        self.policy = policy
        self.echo = echo or (lambda line: None)
        self.reconcile_interval = reconcile_interval
        self.scheduler_backoff = scheduler_backoff
        self.supervisor = Supervisor(self.workdir / "logs")
        self.apiserver: ApiServer | None = None
        self.scheduler: Scheduler | None = None  # the dynmig profile, calling dynmig serve as its extender
        self._scheduler_config: dict[str, Any] | None = None  # the chart config it runs
        self._scheduler_lock = threading.Lock()
        self.default_scheduler: Scheduler | None = None  # binds the chart's own pods (default-scheduler)
        self.serve_starts = 0
        self.scheduler_files: dict[str, Path] = {}  # path in the kube-scheduler container -> lab file
        self.serve: Child | None = None
        self.serve_port = 0
        self.metrics_port = 0
        self.extender_port = 0
        self.nodes: dict[str, NodeRuntime] = {}
        self.controllers: ControllerManager | None = None
        self.rendered: chart.Rendered | None = None
        self.device_config_file = self.workdir / "config" / "device-config.yaml"
        self.node_config_file = self.workdir / "config" / "node-config.json"
        self.resource = "nvidia.com/gpu"
        self.started = 0.0

    # ---- lifecycle ------------------------------------------------------------------------------

    def start(self) -> Self:
        self.started = time.monotonic()
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        self._say(f"lab ready in {time.monotonic() - self.started:.1f}s")
        return self

    def _start(self) -> None:
        # every lab node runs a kubelet, which removes a deleted pod (grace 0) once its containers
        # stopped, as kube-apiserver leaves it to: the API server must not drop it when the grace
        # period ends, or a loaded kubelet's pod vanishes while its GPU processes still run
        self.apiserver = ApiServer(workdir=self.workdir / "kube", https=True, reap_after_grace=False).start()
        self.apiserver.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        self._say(f"API server (simulated) listening on {self.apiserver.url}")
        if self.policy is None and self.policy_text is not None:
            self.policy = self.workdir / "config" / "policy.yaml"
            self.policy.parent.mkdir(parents=True, exist_ok=True)
            self.policy.write_text(self.policy_text)
        self.rendered = chart.render(
            self.policy,
            tuple(n.name for n in self.specs if not n.dra),
            (("server.page.enabled=true",) if self.page else ())
            + (("draPlugin.enabled=true",) if self.dra_nodes else ())
            + ((f"server.replicas={self.serve_replicas}",) if self.serve_replicas > 1 else ())
            + self.values,
            self.json_values,
        )
        self._write_configs()
        self._say(
            f"chart {chart.CHART.relative_to(chart.ROOT)} rendered: webhooks, scheduler config, device config"
            + (f" (policy {self.policy})" if self.policy else "")
        )
        self._certs("init", "--extra-host", "127.0.0.1")
        self._mount_scheduler_secrets()
        self.serve_port, self.metrics_port, self.extender_port, page_port = free_ports(4)
        self.page_port = page_port if self.page else 0
        self._create_configmaps()
        self._register_webhooks()  # before serve: as Lease holder it keeps their CA bundle current
        for spec in self.specs:
            self._create_node(spec)
        self._start_kubelets()
        self._start_default_scheduler()
        self._start_controllers()
        if self.serve_replicas > 1:
            self.replicas = ServeReplicas(self)  # each serve pod runs its own kube-scheduler
        self._create_workloads()  # the chart's Deployment (dynmig serve) and DaemonSet (device plugins)
        if self.replicas is None:
            self._start_scheduler()
        for runtime in self.nodes.values():
            if runtime.dra is None:
                self._wait_plugin(runtime)
            else:
                self._wait_dra_plugin(runtime)
        self._wait_serve()
        self._say(
            "kubelets (simulated) admitting pods on "
            + ", ".join(self.nodes)
            + f" (device-plugin sockets under {self._sockets.name})"
        )

    def stop(self) -> None:
        """Stop everything this lab started; safe to call twice and after a failed start."""
        if self.controllers is not None:
            self.controllers.stop()
            self.controllers = None
        for runtime in self.nodes.values():
            if runtime.agent is not None:
                runtime.agent.stop()
            if runtime.lease is not None:
                runtime.lease.stop()
            if runtime.status is not None:
                runtime.status.stop()
        if self.replicas is not None:
            self.replicas.stop()
        for scheduler in (self.scheduler, self.default_scheduler):
            if scheduler is not None:
                scheduler.stop()
        self.scheduler = self.default_scheduler = None
        self.supervisor.stop_all()
        for runtime in self.nodes.values():
            if runtime.dra is not None:
                runtime.dra.stop()
            runtime.kubelet.stop()
            runtime.nvml.uninstall()
        if self.apiserver is not None:
            self.apiserver.stop()
            self.apiserver = None
        self._sockets.cleanup()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    @property
    def _api(self) -> ApiServer:
        if self.apiserver is None:
            raise LabError("the lab is not started (Lab.start() runs the API server)")
        return self.apiserver

    @property
    def _chart(self) -> chart.Rendered:
        if self.rendered is None:
            raise LabError("the lab is not started (Lab.start() renders the chart)")
        return self.rendered

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- clients --------------------------------------------------------------------------------

    def kubeconfig(self, identity: str = "admin") -> Path:
        return self._api.kubeconfig(identity)

    def api_client(self, identity: str = "admin") -> Any:
        return self._api.api_client(identity)

    def core(self, identity: str = "admin") -> client.CoreV1Api:
        return client.CoreV1Api(self.api_client(identity))

    # ---- operations -----------------------------------------------------------------------------

    def restart_plugin(self, node: str, delete_pod: bool = True, sig: int = signal.SIGTERM) -> None:
        """Restart the node's device plugin; the new one must adopt what runs. `delete_pod`: as an
        operator does, delete its DaemonSet pod (kubelet sends SIGTERM, the DaemonSet controller
        makes a new pod, kubelet starts a new plugin for it); else send the process `sig` (SIGTERM;
        SIGKILL: kill -9, as a crash), which kubelet restarts in the same pod after its back-off
        (this works with the API down)."""
        runtime = self.nodes[node]
        before = runtime.kubelet.resource(self.resource)
        registrations = before.registrations if before else 0
        starts = runtime.plugin_starts
        if delete_pod:
            self.core().delete_namespaced_pod(self.plugin_pod(node), NAMESPACE, _preload_content=False)
        elif runtime.plugin is not None:
            _signal_child(runtime.plugin, sig)
        self._wait_plugin(runtime, registrations + 1, started_after=starts)

    def kill_plugin(self, node: str) -> bool:
        """SIGKILL the node's device-plugin process, as a crash does; kubelet restarts it after its
        back-off. False when no process was running."""
        child = self.nodes[node].plugin
        if child is None or child.process.poll() is not None:
            return False
        _signal_child(child, signal.SIGKILL)
        return True

    def plugin_metrics_url(self, node: str) -> str:
        """The node's device plugin's /metrics (the same across its restarts)."""
        return f"http://127.0.0.1:{self.nodes[node].metrics_port}/metrics"

    def uninstall_plugins(self) -> None:
        """Delete the device plugins' DaemonSet (as `helm uninstall` does) and wait until no plugin
        process runs: what the plugins left on the nodes stays."""
        apps = client.AppsV1Api(self.api_client())
        apps.delete_namespaced_daemon_set(PLUGIN_DAEMONSET, NAMESPACE, _preload_content=False)
        deadline = time.monotonic() + 60
        while any(r.plugin is not None and r.plugin.process.poll() is None for r in self.nodes.values()):
            if time.monotonic() > deadline:
                raise LabError("the device plugins still run 60s after their DaemonSet was deleted")
            time.sleep(0.1)

    def install_plugins(self) -> None:
        """Create the chart's device-plugin DaemonSet again and wait until each plugin registered."""
        counts = {}
        for name, runtime in self.nodes.items():
            view = runtime.kubelet.resource(self.resource)
            counts[name] = (view.registrations if view else 0, runtime.plugin_starts)
        apps = client.AppsV1Api(self.api_client())
        apps.create_namespaced_daemon_set(
            NAMESPACE, copy.deepcopy(self._chart.find("DaemonSet", PLUGIN_DAEMONSET))
        )
        for name, runtime in self.nodes.items():
            if runtime.dra is None:
                registrations, starts = counts[name]
                self._wait_plugin(runtime, registrations + 1, started_after=starts)

    def plugin_pod(self, node: str) -> str:
        """The name of the device-plugin DaemonSet's pod on `node` (not one being deleted)."""
        pods = self.core().list_namespaced_pod(
            NAMESPACE,
            field_selector=f"spec.nodeName={node}",
            label_selector=chart.component_selector("device-plugin"),
        )
        live: list[str] = [p.metadata.name for p in pods.items if p.metadata.deletion_timestamp is None]
        if len(live) != 1:
            raise LabError(f"{node}: expected one device-plugin pod, found {live}")
        return live[0]

    def finish(self, name: str, namespace: str = "default", exit_code: int = 0) -> None:
        """Tell a running pod's workload to exit (0 -> Succeeded)."""
        self.core().patch_namespaced_pod(
            name, namespace, {"metadata": {"annotations": {EXIT_CODE: str(exit_code)}}}
        )

    def plugin_log(self, node: str) -> str:
        return (self.workdir / "logs" / f"device-plugin-{node}.log").read_text()

    def serve_log(self) -> str:
        return (self.workdir / "logs" / "serve.log").read_text()

    @property
    def page_url(self) -> str:
        """The live slice-map page of dynmig serve (a lab started with `page=True`)."""
        if not self.page:
            raise LabError("this lab runs dynmig serve without the page (Lab(..., page=True))")
        return f"http://127.0.0.1:{self.page_port}/"

    @property
    def ca_file(self) -> Path:
        """The CA kube-scheduler verifies dynmig serve with (the chart's caFile, as the lab wrote it)."""
        return self.scheduler_files[self._chart.scheduler_config["extenders"][0]["tlsConfig"]["caFile"]]

    @property
    def tls_secret(self) -> str:
        """The Secret dynmig serve serves its certificate from."""
        return self._chart.container_env("Deployment", "server")["DYNMIG_TLS_SECRET"]

    # ---- the pieces -----------------------------------------------------------------------------

    def _say(self, text: str) -> None:
        self.echo(f"[{time.monotonic() - self.started:5.1f}s] {text}")

    def _write_configs(self) -> None:
        """The chart's ConfigMaps as the files their volumes would hold."""
        self.device_config_file.parent.mkdir(parents=True, exist_ok=True)
        self.device_config_file.write_text(self._chart.device_config_text)
        self.node_config_file.write_text(self._chart.node_config_text)
        self.resource = load_device_config(self.device_config_file).resources.count

    def _certs(self, *args: str) -> None:
        """`dynmig certs ...` against the lab, in this process (the same code the console script runs)."""
        argv = [
            args[0],
            "--namespace",
            NAMESPACE,
            "--service",
            chart.RELEASE,
            "--kubeconfig",
            str(self.kubeconfig("certs")),
            *args[1:],
        ]
        out, err = StringIO(), StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = certs_main.main(argv)
        for line in (out.getvalue() + err.getvalue()).splitlines():
            self._say(f"dynmig certs {args[0]}: {line.removeprefix(args[0] + ': ')}")
        if code != 0:
            raise LabError(f"dynmig certs {' '.join(args)} exited with {code}")

    def _mount_scheduler_secrets(self) -> None:
        """Write the Secret keys the chart mounts into the kube-scheduler container (the extender's
        CA file), as kubelet would; kube-scheduler reads them when it starts."""
        for path, (name, key) in self._chart.secret_files("Deployment", "kube-scheduler").items():
            data = (self._api.get("secrets", name, NAMESPACE) or {}).get("data") or {}
            if key not in data:
                raise LabError(f"Secret {NAMESPACE}/{name} has no {key} for kube-scheduler's {path}")
            local = self.workdir / "kube-scheduler" / path.lstrip("/")
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_bytes(base64.b64decode(data[key]))
            self.scheduler_files[path] = local

    def _spawn_serve(self, pod: PodContainer, tee: Path | None = None) -> Child:
        """The pod's args and environment, as the release rendered them (the Secret, cert-mode,
        webhooks to keep injected, leader election, allocation writers); its ConfigMap volumes
        are files under the pod's directory; only ports, file paths and what a pod learns from
        the downward API differ. The Lease identity stays the same across the Deployment's pods,
        so a new pod leads at once."""
        args = chart.laptop_args(
            pod.args,
            replace={
                "--port": str(self.serve_port),
                "--metrics-port": str(self.metrics_port),
                "--extender-port": str(self.extender_port),
                **({"--page-port": str(self.page_port)} if self.page else {}),
                # one kube-scheduler without leader election (chart.laptop_scheduler_config)
                "--leader-elect": "false",
            },
            add={
                "--bind-address": "127.0.0.1",
                "--kubeconfig": str(self.kubeconfig("scheduler")),
                "--namespace": NAMESPACE,
                "--identity": "lab-serve",
            },
        )
        argv = python_argv("-m", "dynmig.cli", *args)
        return self.supervisor.start("serve", argv, env=pod.env, tee=tee)

    def _serve_started(self, child: Child) -> None:
        self.serve = child
        self.serve_starts += 1

    def serve_ready(self) -> bool:
        """The chart's readinessProbe of the server container: GET /readyz over HTTPS."""
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        try:
            with urllib.request.urlopen(
                f"https://127.0.0.1:{self.serve_port}/readyz", context=ctx, timeout=1
            ) as resp:
                status: int = resp.status  # urlopen's answer is untyped (typeshed)
                return status == 200
        except Exception:  # noqa: BLE001 - not listening or not ready yet
            return False

    def _wait_serve(self, timeout: float = 60.0) -> None:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        url = f"https://127.0.0.1:{self.serve_port}/readyz"
        deadline = time.monotonic() + timeout
        last = ""
        while self.serve is None and time.monotonic() < deadline:
            time.sleep(0.05)
        while time.monotonic() < deadline and self.serve is not None:
            if self.serve.process.poll() is not None:
                raise ChildFailed(
                    f"dynmig serve exited with {self.serve.process.returncode}:\n{self.serve.tail(80)}"
                )
            try:
                with urllib.request.urlopen(url, context=ctx, timeout=2) as resp:
                    if resp.status == 200:
                        self._say(
                            f"dynmig serve ready on https://127.0.0.1:{self.serve_port} "
                            f"(TLS from Secret {NAMESPACE}/{self.tls_secret} through the API; "
                            f"metrics on :{self.metrics_port})"
                        )
                        return
            except Exception as error:  # noqa: BLE001 - not listening or not ready yet
                last = str(error)
            time.sleep(0.1)
        tail = self.serve.tail() if self.serve is not None else "(no serve process started)"
        raise ChildFailed(f"dynmig serve not ready after {timeout:.0f}s ({last}):\n{tail}")

    def route_service(self, port: int) -> None:
        """The webhook Service's endpoint: the serve listening on `port` (one ready replica)."""
        namespace, name = self._chart.service
        self._api.register_service(namespace, name, "127.0.0.1", port)

    def _register_webhooks(self) -> None:
        namespace, name = self._chart.service
        self.route_service(self.serve_port)
        api = client.AdmissionregistrationV1Api(self.api_client())
        for obj in self._chart.webhook_configurations:
            if obj["kind"] == "MutatingWebhookConfiguration":
                api.create_mutating_webhook_configuration(obj)
            else:
                api.create_validating_webhook_configuration(obj)
        names = {o["kind"]: o["metadata"]["name"] for o in self._chart.webhook_configurations}
        mutating, validating = names["MutatingWebhookConfiguration"], names["ValidatingWebhookConfiguration"]
        self._certs("inject", "--mutating-webhook", mutating, "--validating-webhook", validating)
        self._say(
            f"webhooks {mutating}, {validating} registered; service {namespace}/{name} -> "
            f"127.0.0.1:{self.serve_port}"
        )

    def _start_scheduler(self, config: dict[str, Any] | None = None) -> None:
        """kube-scheduler with `config` (the chart's KubeSchedulerConfiguration; default: the lab's
        render), made a laptop's (chart.laptop_scheduler_config). A running one with another config
        is stopped first, as a new serve pod's kube-scheduler container replaces the old one's."""
        config = self._chart.scheduler_config if config is None else config
        with self._scheduler_lock:
            if self.scheduler is not None and config == self._scheduler_config:
                return
            if self.scheduler is not None:
                self.scheduler.stop()
                self._say("kube-scheduler (simulated) stopped: its pod's scheduler config changed")
            self._scheduler_config = config
            self._run_scheduler(config)

    def _run_scheduler(self, config: dict[str, Any]) -> None:
        doc = chart.laptop_scheduler_config(config, "127.0.0.1", self.extender_port, self.ca_file)
        path = self.workdir / "config" / "scheduler-config.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        initial, maximum = self.scheduler_backoff
        self.scheduler = Scheduler(
            parse_scheduler_config(doc),
            self.api_client("kube-scheduler"),
            initial_backoff=initial,
            max_backoff=maximum,
        ).start()
        if not self.scheduler.wait_synced(30):
            raise LabError("the simulated kube-scheduler did not sync its caches in 30s")
        ext = doc["extenders"][0]["urlPrefix"] if doc.get("extenders") else "(none)"
        self._say(
            f"kube-scheduler (simulated) ready: profile {doc['profiles'][0]['schedulerName']}, "
            f"extender {ext}, config {path}"
        )

    def _create_node(self, spec: LabNode) -> None:
        base = self.workdir / "nodes" / spec.name
        base.mkdir(parents=True, exist_ok=True)
        state = base / "nvml-state.json"
        state.unlink(missing_ok=True)
        nvml = SimulatedNvml(spec.nvml_spec(), state_path=state)
        plugin_dir = Path(self._sockets.name) / spec.name
        kubelet = SimulatedKubelet(plugin_dir).start()
        side = dra_node.start_side(plugin_dir, base, self.api_client("kubelet")) if spec.dra else None
        runtime = NodeRuntime(spec, state, plugin_dir, nvml, kubelet, dra=side, metrics_port=free_port())
        if not spec.dra and self._writes_cdi:
            runtime.cdi_dir = base / "cdi"
            runtime.cdi_dir.mkdir(exist_ok=True)
            runtime.mig_minors = caps.write_mig_minors(base / "proc" / "mig-minors", spec.gpu_count)
        self.nodes[spec.name] = runtime
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self._api.create(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": spec.name, "labels": self._node_labels(spec)},
                "status": {
                    # what a kubelet reports of its machine; the lab's nodes are this machine's processes
                    "addresses": [
                        {"type": "InternalIP", "address": "127.0.0.1"},
                        {"type": "Hostname", "address": spec.name},
                    ],
                    "nodeInfo": {
                        "kubeletVersion": "v1.35.0-dynmig-sim",
                        "osImage": "dynmig lab node (simulated)",
                        "kernelVersion": platform.release(),
                        "containerRuntimeVersion": "dynmig-lab://simulated",
                        "kubeProxyVersion": "",  # no longer reported by kubelets, still in the schema
                        "operatingSystem": "linux",
                        "architecture": ARCH,
                        "machineID": uuid.uuid5(uuid.NAMESPACE_DNS, spec.name).hex,
                        "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_DNS, spec.name)),
                        "bootID": str(uuid.uuid4()),
                    },
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "reason": "KubeletReady",
                            "message": "kubelet is posting ready status (simulated)",
                            "lastHeartbeatTime": now,
                            "lastTransitionTime": now,
                        }
                    ],
                    "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110"},
                    "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"},
                },
            }
        )

    def _node_labels(self, spec: LabNode) -> dict[str, str]:
        """An extender node carries HAMi's `gpu: "on"` (the device plugin's nodeSelector); a DRA node
        the chart's draPlugin.nodeLabel instead, which puts it in the DRA node pool."""
        labels = {"kubernetes.io/hostname": spec.name}
        if spec.dra:
            key, value = self._dra_label
            labels[key] = value
        else:
            labels["gpu"] = "on"
        return {**labels, "kubernetes.io/os": "linux", "kubernetes.io/arch": ARCH}

    @property
    def _dra_label(self) -> tuple[str, str]:
        """The chart's draPlugin.nodeLabel, as the DRA DaemonSet's nodeSelector renders it."""
        selector = self._chart.find("DaemonSet", DRA_DAEMONSET)["spec"]["template"]["spec"]["nodeSelector"]
        key, value = next(iter(selector.items()))
        return str(key), str(value)

    @property
    def _writes_cdi(self) -> bool:
        """The chart's device plugin writes a CDI spec per instance (deviceListStrategy cdi)."""
        return "--device-list-strategy=cdi" in self._chart.container_args("DaemonSet", "device-plugin")

    @property
    def dra_nodes(self) -> list[str]:
        """The nodes in DRA mode (`@dra` in --nodes)."""
        return [s.name for s in self.specs if s.dra]

    def _start_kubelets(self) -> None:
        """The pod side of each node's kubelet: GPU pods get the simulated workload, the device-plugin
        DaemonSet's pods get a real `dynmig device-plugin` process, a DRA node's dra-plugin
        DaemonSet pod a real `dynmig dra-plugin`; there kubelet prepares pods' ResourceClaims
        through that plugin and resolves their CDI devices from the node's CDI dir."""
        for runtime in self.nodes.values():
            side = runtime.dra
            extra: dict[str, Any] = {}
            if side is not None:
                extra = {"dra": side.manager, "cdi_dirs": [side.cdi_dir], "dra_retry": DRA_RETRY}
            elif runtime.cdi_dir is not None:
                extra = {"cdi_dirs": [runtime.cdi_dir], "dra_retry": CDI_RETRY}
            runtime.agent = SimulatedPods(
                runtime.name,
                self.api_client("kubelet"),
                runtime.kubelet,
                runtime.nvml,
                self.resource,
                runtime=self._pod_runtime(runtime),
                backoff=RESTART_BACKOFF,
                echo=self._say,
                log_path=self._api.log_path,
                **extra,
            ).start()
            runtime.lease = NodeLease(runtime.name, self.api_client("kubelet")).start()
            runtime.status = NodeStatus(
                runtime.name,
                self.api_client("kubelet"),
                runtime.kubelet,
                self.resource,
                self.node_status_period,
            ).start()

    def _pod_runtime(self, runtime: NodeRuntime) -> Callable[[dict[str, Any]], ProcessContainers | None]:
        """Which pods run a real dynmig process on this node: the chart's DaemonSet's (the device
        plugin) and Deployment's, through its ReplicaSet (dynmig serve; its kube-scheduler container is the lab's simulated
        kube-scheduler), Jobs' pods of the dynmig image (`_job_containers`) and, on a DRA node,
        the dra-plugin DaemonSet's (`_dra_containers`). Every other pod gets the simulated workload."""

        def containers(pod: dict[str, Any]) -> ProcessContainers | None:
            owner: dict[str, Any] = next(
                (o for o in pod["metadata"].get("ownerReferences") or [] if o.get("controller")), {}
            )
            if owner.get("kind") == "Job":
                return self._job_containers(pod)
            if pod["metadata"].get("namespace") != NAMESPACE:
                return None
            if (owner.get("kind"), owner.get("name")) == ("DaemonSet", PLUGIN_DAEMONSET):
                tee = self._container_log(pod, "device-plugin")
                plugin = self._pod_container(pod, "device-plugin")
                return ProcessContainers(
                    self.supervisor,
                    "device-plugin",
                    lambda: self._spawn_plugin(runtime, plugin, tee),
                    on_start=lambda child: self._plugin_started(runtime, child),
                    on_ready=lambda child: self._plugin_ready(runtime, child),
                )
            if (owner.get("kind"), owner.get("name")) == ("DaemonSet", DRA_DAEMONSET) and runtime.dra:
                return self._dra_containers(runtime, runtime.dra, pod)
            if self._deployment_of(pod["metadata"]["namespace"], owner) == SERVE_DEPLOYMENT:
                if self.replicas is not None:
                    return self.replicas.containers(pod)
                tee = self._container_log(pod, "server")
                server = self._pod_container(pod, "server")
                self._start_scheduler(self._pod_scheduler_config(pod))
                return ProcessContainers(
                    self.supervisor,
                    "server",
                    lambda: self._spawn_serve(server, tee),
                    on_start=self._serve_started,
                    probe=self.serve_ready,
                )
            return None

        return containers

    def _pod_container(self, pod: dict[str, Any], name: str) -> PodContainer:
        """What kubelet gives the pod's container before it starts: its ConfigMap volumes as files
        (read from the API now, kept for the pod's life: lab.volumes), its args pointing at them and
        its literal environment."""
        meta = pod["metadata"]
        root = self.workdir / "pods" / f"{meta['namespace']}_{meta['name']}_{meta['uid']}" / name
        mounts = volumes.mount_configmaps(self.core("kubelet"), pod, name, root)
        container = volumes.container_of(pod, name)
        return PodContainer(
            volumes.localize([str(a) for a in container.get("args") or []], mounts),
            volumes.literal_env(container),
        )

    def _pod_scheduler_config(self, pod: dict[str, Any]) -> dict[str, Any]:
        """The KubeSchedulerConfiguration the serve pod's kube-scheduler container reads: the file
        its `--config` names in the ConfigMap volume (the release's scheduler config)."""
        meta = pod["metadata"]
        root = self.workdir / "pods" / f"{meta['namespace']}_{meta['name']}_{meta['uid']}" / "kube-scheduler"
        mounts = volumes.mount_configmaps(self.core("kubelet"), pod, "kube-scheduler", root)
        command = volumes.container_of(pod, "kube-scheduler").get("command") or []
        local = volumes.localize([str(a) for a in command], mounts)
        path = next((a.split("=", 1)[1] for a in local if a.startswith("--config=")), "")
        if not path:
            raise volumes.MountError(f"pod {meta['name']}: its kube-scheduler container names no --config")
        return dict(yaml.safe_load(Path(path).read_text()))

    def _deployment_of(self, namespace: str, owner: dict[str, Any]) -> str:
        """The Deployment that controls a pod whose controller is `owner`: its ReplicaSet's
        controlling owner (read from the API, as the uid names it); "" for any other pod. An API
        error other than 404 is raised, so the pod is not started as the wrong thing."""
        if owner.get("kind") != "ReplicaSet":
            return ""
        try:
            rs = client.AppsV1Api(self.api_client()).read_namespaced_replica_set(
                str(owner.get("name")), namespace, _request_timeout=5
            )
        except client.ApiException as error:
            if error.status == 404:
                return ""  # the ReplicaSet is gone: the garbage collector takes the pod
            raise  # the kubelet tries the pod again on its next pass
        if rs.metadata.uid != owner.get("uid"):
            return ""
        ref = next((o for o in rs.metadata.owner_references or [] if o.controller), None)
        return str(ref.name) if ref is not None and ref.kind == "Deployment" else ""

    def _job_containers(self, pod: dict[str, Any]) -> ProcessContainers | None:
        """A Job pod whose container is of the dynmig image runs its args as a real dynmig
        process, as the pod's service account (`lab.jobpods`); kubelet restarts it as the
        pod's restartPolicy says and its exit ends the pod. Other Job pods run the simulated
        workload."""
        image = self._chart.find("Deployment", SERVE_DEPLOYMENT)["spec"]["template"]["spec"]["containers"][0]
        args = jobpods.dynmig_args(pod, jobpods.repository(str(image.get("image") or "")))
        if args is None:
            return None
        namespace, account = jobpods.service_account(pod)
        handle = f"sa-{namespace}-{account}"
        if handle not in self._api.identities:
            self._api.add_identity(service_account(handle, namespace, account))
        kubeconfig = str(self.kubeconfig(handle))
        argv = python_argv("-m", "dynmig.cli", *jobpods.laptop_args(args, kubeconfig))
        env = {**jobpods.literal_env(pod), "KUBECONFIG": kubeconfig}
        meta = pod["metadata"]
        container = pod["spec"]["containers"][0]["name"]
        tee = self._container_log(pod, container)
        return ProcessContainers(
            self.supervisor,
            container,
            lambda: self.supervisor.start(f"job-{meta['namespace']}-{meta['name']}", argv, env=env, tee=tee),
            on_start=lambda child: self._say(
                f"{meta['namespace']}/{meta['name']}: dynmig {' '.join(args[:2])}"
            ),
            probe=lambda: True,  # no readinessProbe: ready while it runs
            probe_period=0.0,
        )

    def _start_controllers(self) -> None:
        if "controller-manager" not in self._api.identities:
            self._api.add_identity(
                Identity("controller-manager", "system:kube-controller-manager", ("system:authenticated",))
            )
        self.controllers = ControllerManager(
            self.api_client("controller-manager"), echo=self._say, job_backoff=JOB_BACKOFF
        ).start()

    def _start_default_scheduler(self) -> None:
        """kube-scheduler's default profile, which places the chart's Deployment pod (no extender)."""
        doc = {
            "apiVersion": SCHEDULER_API,
            "kind": "KubeSchedulerConfiguration",
            "leaderElection": {"leaderElect": False},
        }
        self.default_scheduler = Scheduler(
            parse_scheduler_config(doc),
            self.api_client("kube-scheduler"),
            initial_backoff=0.2,
            max_backoff=1.0,
        ).start()

    def _create_configmaps(self) -> None:
        """The chart's ConfigMaps, which the pods' volumes name; before the webhooks, in helm's
        install order (the validating webhook checks the device config once serve runs)."""
        for obj in self._chart.objects:
            if obj.get("kind") == "ConfigMap":
                self.core().create_namespaced_config_map(NAMESPACE, copy.deepcopy(obj))

    def _create_workloads(self) -> None:
        """The chart's Deployment and DaemonSet, as `helm install` creates them; the controllers make
        their pods and the kubelets run them, with the ConfigMaps as files."""
        apps = client.AppsV1Api(self.api_client())
        apps.create_namespaced_deployment(
            NAMESPACE, copy.deepcopy(self._chart.find("Deployment", SERVE_DEPLOYMENT))
        )
        apps.create_namespaced_daemon_set(
            NAMESPACE, copy.deepcopy(self._chart.find("DaemonSet", PLUGIN_DAEMONSET))
        )
        if self.dra_nodes:
            apps.create_namespaced_daemon_set(
                NAMESPACE, copy.deepcopy(self._chart.find("DaemonSet", DRA_DAEMONSET))
            )
            for device_class in (o for o in self._chart.objects if o.get("kind") == "DeviceClass"):
                client.CustomObjectsApi(self.api_client()).create_cluster_custom_object(
                    "resource.k8s.io", "v1", "deviceclasses", copy.deepcopy(device_class)
                )

    def _container_log(self, pod: dict[str, Any], container: str) -> Path:
        meta = pod["metadata"]
        return self._api.log_path(meta["namespace"], meta["name"], meta["uid"], container)

    def _spawn_plugin(self, runtime: NodeRuntime, pod: PodContainer, tee: Path | None = None) -> Child:
        """The pod's args as the release rendered them, its device config and node config the
        ConfigMaps its volumes name (a helm upgrade's filterdevices reach the plugin); only sockets,
        ports and state paths differ."""
        chart_args = pod.args
        # the chart's PodResources socket is the node's kubelet's: here, the simulated kubelet's
        asks = any(arg.startswith("--pod-resources-socket=") for arg in chart_args)
        sockets = {"--pod-resources-socket": str(runtime.kubelet.pod_resources_path)} if asks else {}
        if runtime.cdi_dir is not None and runtime.mig_minors is not None:
            # the chart's hostPath /var/run/cdi and the driver's /proc table are the node's own
            sockets |= {"--cdi-dir": str(runtime.cdi_dir), "--mig-minors": str(runtime.mig_minors)}
        args = chart.laptop_args(
            chart_args,
            replace={
                **sockets,
                "--kubelet-dir": str(runtime.plugin_dir),
                "--metrics-address": f"127.0.0.1:{runtime.metrics_port}",
                "--state-dir": str(runtime.state_file.parent / "plugin-state"),
            },
            add={
                "--node-name": runtime.name,
                "--kubeconfig": str(self.kubeconfig("device-plugin")),
                "--reconcile-interval": str(self.reconcile_interval),
            },
        )
        argv = python_argv("-m", "sim.nvml.launch", "--state", str(runtime.state_file), "--", *args)
        return self.supervisor.start(
            f"device-plugin-{runtime.name}",
            argv,
            env=pod.env or None,
            ready_text=PLUGIN_READY,
            wait=False,
            tee=tee,
        )

    def _plugin_started(self, runtime: NodeRuntime, child: Child) -> None:
        runtime.plugin = child
        runtime.plugin_starts += 1

    def _wait_plugin(
        self, runtime: NodeRuntime, registrations: int = 1, timeout: float = 60.0, started_after: int = 0
    ) -> None:
        deadline = time.monotonic() + timeout
        while runtime.plugin_starts <= started_after:
            if time.monotonic() > deadline:
                raise LabError(f"{runtime.name}: no device-plugin process started within {timeout:.0f}s")
            time.sleep(0.05)
        assert runtime.plugin is not None, "a started device plugin is recorded before plugin_starts grows"
        self.supervisor.wait_ready(runtime.plugin, max(1.0, deadline - time.monotonic()))
        try:
            runtime.kubelet.wait_for_registration(self.resource, registrations, timeout=timeout)
        except TimeoutError:
            raise LabError(
                f"{runtime.name}: the device plugin did not register {self.resource} with the kubelet "
                f"within {timeout:.0f}s (its log: {self.supervisor.log_dir})"
            ) from None
        bare = self._bare_models(runtime)
        if len(bare) == len(runtime.spec.gpus):  # as on a cluster: the node is up and offers no device
            self._say(
                f"{runtime.name}: the policy offers no MIG profile for {', '.join(bare)}, so it publishes no "
                f"{self.resource} device"
            )
            self._set_allocatable(runtime.name, 0)
            return
        try:
            view = runtime.kubelet.wait_for_resource(
                self.resource,
                lambda v: v.connected and v.healthy > 0,
                DEVICES_TIMEOUT,
                f"{self.resource} devices",
            )
        except TimeoutError:
            raise LabError(self._no_devices(runtime)) from None
        self._set_allocatable(runtime.name, view.healthy)

    def _bare_models(self, runtime: NodeRuntime) -> list[str]:
        """The node's GPU models the policy publishes no profile for (HAMi's resolution)."""
        allowlist = load_device_config(self.device_config_file).allowlist
        return [g.model.nvml_name for g in runtime.spec.gpus if not published(allowlist, g.model)]

    def _no_devices(self, runtime: NodeRuntime) -> str:
        """Why a node whose plugin registered publishes no device, for a person: node, models, policy."""
        view = runtime.kubelet.resource(self.resource)
        got = "no device list" if view is None or not view.updates else f"{view.healthy} healthy devices"
        policy = f"the policy {self.policy}" if self.policy else "the chart's default policy"
        models = [g.model.nvml_name for g in runtime.spec.gpus]
        bare = self._bare_models(runtime)
        why = (
            f"{policy} allows no MIG profile for {', '.join(bare)}: give that model profiles in its "
            f"migProfileAllowlist, "
            f"or leave {runtime.name} out of --nodes"
            if bare
            else f"{policy} allows profiles for {', '.join(models)}, so see the device plugin's log in "
            f"{self.supervisor.log_dir}"
        )
        return (
            f"{runtime.name} ({runtime.spec.describe()}) publishes no {self.resource} devices: its device "
            f"plugin registered, then sent {got} within {DEVICES_TIMEOUT:.0f}s; {why}"
        )

    def _plugin_ready(self, runtime: NodeRuntime, child: Child) -> None:
        startup = next(
            (report.startup_summary(line) for line in list(child.lines) if "startup: busy=" in line), ""
        )
        self._say(
            f"{runtime.name}: dynmig device-plugin registered {self.resource} "
            f"({runtime.spec.describe()}); {startup}"
        )

    def _set_allocatable(self, node: str, count: int) -> None:
        patch = {
            "status": {"capacity": {self.resource: str(count)}, "allocatable": {self.resource: str(count)}}
        }
        try:
            self.core("kubelet").patch_node_status(node, patch, _request_timeout=5)
        except Exception as error:  # noqa: BLE001 - the API may be down on purpose; the node keeps its count
            self._say(f"{node}: could not update allocatable {self.resource}: {type(error).__name__}")

    # ---- DRA nodes ------------------------------------------------------------------------------

    def _dra_containers(
        self, runtime: NodeRuntime, side: dra_node.DraSide, pod: dict[str, Any]
    ) -> ProcessContainers:
        """The dra-plugin DaemonSet pod's container: a real `dynmig dra-plugin` with the chart's args
        (dra_node.plugin_argv), as the pod's service account; ready once it logged READY_TEXT."""
        tee = self._container_log(pod, dra_node.CONTAINER)
        account = str(pod["spec"].get("serviceAccountName") or "default")
        handle = "dra-plugin"
        if handle not in self._api.identities:
            self._api.add_identity(service_account(handle, NAMESPACE, account))
        env = {
            **self._chart.container_env("DaemonSet", dra_node.CONTAINER),
            "NODE_NAME": runtime.name,  # the chart's downward API values
            "POD_NAMESPACE": NAMESPACE,
        }

        def spawn() -> Child:
            argv = dra_node.plugin_argv(
                self._chart,
                side,
                runtime.name,
                runtime.state_file,
                self.device_config_file,
                self.node_config_file,
                self.kubeconfig(handle),
                free_port(),
            )
            return dra_node.spawn(self.supervisor, runtime.name, argv, env, tee)

        return ProcessContainers(
            self.supervisor,
            dra_node.CONTAINER,
            spawn,
            on_start=lambda child: self._dra_started(side, child),
            on_ready=lambda child: self._say(
                f"{runtime.name}: dynmig dra-plugin registered {dra_node.driver_name(self._chart)} "
                f"with kubelet ({runtime.spec.describe()})"
            ),
        )

    @staticmethod
    def _dra_started(side: dra_node.DraSide, child: Child) -> None:
        side.process = child
        side.starts += 1

    def _wait_dra_plugin(
        self, runtime: NodeRuntime, registrations: int = 1, timeout: float = 60.0, started_after: int = 0
    ) -> None:
        side = self._dra_side(runtime.name)
        driver = dra_node.driver_name(self._chart)
        try:
            dra_node.wait_registered(side, driver, self.supervisor, started_after, registrations, timeout)
        except TimeoutError as error:
            raise LabError(f"{runtime.name}: {error} (its log: {self.supervisor.log_dir})") from None

    def _dra_side(self, node: str) -> dra_node.DraSide:
        runtime = self.nodes[node]
        if runtime.dra is None:
            raise LabError(f"{node} is not a DRA node (give it @dra in --nodes)")
        return runtime.dra

    def restart_dra_plugin(self, node: str, sig: int = signal.SIGTERM, delete_pod: bool = False) -> None:
        """Restart the node's DRA plugin and wait until kubelet registered the new one. `delete_pod`:
        delete its DaemonSet pod (a new pod, a new process); else send the process `sig` (SIGKILL:
        kill -9, as a crash) and kubelet restarts it in the same pod after its back-off."""
        side = self._dra_side(node)
        driver = dra_node.driver_name(self._chart)
        registrations, starts = side.registrations(driver), side.starts
        if delete_pod:
            self.core().delete_namespaced_pod(self.dra_plugin_pod(node), NAMESPACE, _preload_content=False)
        elif side.process is not None:
            _signal_child(side.process, sig)
        self._wait_dra_plugin(self.nodes[node], registrations + 1, started_after=starts)

    def dra_plugin_pod(self, node: str) -> str:
        """The name of the dra-plugin DaemonSet's pod on `node` (not one being deleted)."""
        pods = self.core().list_namespaced_pod(
            NAMESPACE,
            field_selector=f"spec.nodeName={node}",
            label_selector=chart.component_selector(dra_node.CONTAINER),
        )
        live: list[str] = [p.metadata.name for p in pods.items if p.metadata.deletion_timestamp is None]
        if len(live) != 1:
            raise LabError(f"{node}: expected one dra-plugin pod, found {live}")
        return live[0]

    def dra_plugin_log(self, node: str) -> str:
        return (self.workdir / "logs" / f"dra-plugin-{node}.log").read_text()


def _signal_child(child: Child, sig: int) -> None:
    with suppress(ProcessLookupError):
        os.killpg(child.process.pid, sig)


def write_admin_kubeconfig(lab: Lab, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(lab.kubeconfig("admin"), path)
    path.chmod(0o600)
    return path
