"""`dynmig device-plugin`: wire NVML, the API, the instance manager, kubelet gRPC and the reconciler.

`DevicePluginApp` is the whole plugin as an object (start/stop), so tests and the lab run exactly
what the console script runs. `main(argv)` parses the configuration (exit 2 naming the file and
field on error), starts the app and runs until SIGTERM/SIGINT.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from wsgiref.simple_server import WSGIServer

from base import logs
from base.version import version
from kube.shutdown import on_stop_signal, run_until_signalled
from mig.annotations import PLUGIN_CLAIMS, PLUGIN_CLAIMS_PODRESOURCES
from plugin.allocate import AllocateError, Allocator
from plugin.cdi import CdiError, MigEdits, SpecDir
from plugin.config import ConfigError, PluginConfig, load_config
from plugin.discovery import Inventory
from plugin.events import PodEvents
from plugin.idle import IdlePolicy, IdlePublisher, idle_list
from plugin.instances import GPU_LOCKS, InstanceManager, ManagedInstance
from plugin.journal import Journal
from plugin.kube import Kube, KubeError, api_client
from plugin.leftovers import LeftoverPublisher, find_leftovers
from plugin.metrics import PluginMetrics
from plugin.migspecs import KIND, InstanceSpecs
from plugin.neighbours import KubeletDevices, Neighbours
from plugin.nvml import Nvml, NvmlError
from plugin.podresources import KubeletPods
from plugin.precreate import Precreator
from plugin.reconcile import PassResult, Reconciler
from plugin.register import Publisher
from plugin.server import DevicePluginService, PluginServer
from plugin.startup import Startup, StartupReport
from plugin.warm import Demand, WarmPolicy, WarmPool

log = logging.getLogger("dynmig.plugin")


class DevicePluginApp:
    def __init__(
        self, config: PluginConfig, kube: Kube, nvml: Nvml | None = None, metrics: PluginMetrics | None = None
    ):
        self.config = config
        self.kube = kube
        self.nvml = nvml or Nvml()
        self.metrics = metrics or PluginMetrics()
        self.journal = Journal(config.state_dir, self.metrics)
        locks = config.state_dir / GPU_LOCKS if config.state_dir is not None else None
        self.manager = InstanceManager(self.nvml, Inventory(), self.metrics, self.journal, locks)
        self.manager.events = self.events = PodEvents.for_node(
            kube.core, kube.node_name, dropped=self.metrics.event_dropped
        )
        self.idle = IdlePolicy(config.idle_ttl, config.idle_per_gpu, config.idle_scope)
        self.reconciler = Reconciler(kube, self.manager, self.metrics, idle=self.idle)
        socket = config.pod_resources_socket
        if socket and not socket.startswith("/"):
            socket = str(config.kubelet_dir / socket)  # relative to --kubelet-dir
        self.kubelet_pods = KubeletPods(socket) if socket else None
        self.allocator = Allocator(
            kube, self.manager, self.reconciler, self.metrics, config.strategy, kubelet_pods=self.kubelet_pods
        )
        warm = WarmPolicy(config.warm_pool, config.warm_window, config.warm_profiles)
        self.warm = WarmPool(warm, self.manager, self.reconciler, kube, Demand(warm.window))
        self.allocator.served = self.warm.demand.record
        self.specs: InstanceSpecs | None = None
        if config.strategy == "cdi":
            edits = MigEdits(config.driver_root, config.mig_minors)
            specs = InstanceSpecs(
                SpecDir(config.cdi_dir, KIND), edits, self.nvml, lambda: self.manager.inventory
            )
            self.manager.forgotten = specs.forget
            self.allocator.handing_over = self._write_specs
            self.specs = specs
        self._claims: str | None = None  # what this plugin last wrote in dynmig.io/plugin-claims
        self.publisher = Publisher(kube, self.metrics)
        self.leftovers = LeftoverPublisher(kube, self.metrics)
        self.idle_publisher = IdlePublisher(kube, self.metrics)
        self.startup = Startup(self.nvml, kube, self.manager, config.allowlist, config.node.filter)
        self.service = DevicePluginService(self.allocator, lambda: self.manager.inventory)
        self.server = PluginServer(self.service, config)
        self.metrics.follow_registration(lambda: self.server.registered)
        self.neighbours = Neighbours(
            kube,
            config.resource_name,
            self._gpu_uuids,
            self.metrics,
            self.events,
            KubeletDevices(socket) if socket else None,
        )
        self.service.refusal = lambda: self.neighbours.refusal.message if self.neighbours.refusal else None
        self.server.may_register = lambda: not self.neighbours.refused
        self._uuids: set[str] | None = None
        self.precreator = Precreator(
            kube,
            self.manager,
            ready=lambda: bool(self.report and self.report.complete) and not self.neighbours.refused,
        )
        self.report: StartupReport | None = None
        self._stop = threading.Event()
        self._loop: threading.Thread | None = None
        self._metrics_server: WSGIServer | None = None
        self._last_pass = time.monotonic()

    @property
    def inventory(self) -> Inventory:
        return self.manager.inventory

    @property
    def metrics_port(self) -> int | None:
        """The port /metrics, /healthz and /readyz are served on (None when off)."""
        server = self._metrics_server
        return server.server_address[1] if server is not None else None

    def start(self) -> DevicePluginApp:
        self.events.start()
        self.journal.hold()  # one plugin process per node: wait for an old one to exit first
        self.nvml.init()
        self.journal.load()
        if self.neighbours.check() is None:  # with a neighbour here, not even start-up's clean-up
            self.recover()
        self._reconcile_specs()
        self.publisher.publish(self.inventory)
        self.server.start()
        self.publish_claims()
        served = self.metrics.serve(self.config.metrics_address, healthz=self.alive, readyz=self.ready)
        self._metrics_server = served[0] if served else None
        self._loop = threading.Thread(target=self._run, name="dynmig-reconcile", daemon=True)
        self._loop.start()
        if self.config.precreate:
            self.precreator.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.precreator.stop()
        if self._loop is not None:
            self._loop.join(timeout=10)
        self.server.stop()
        for channel in (self.neighbours.kubelet, self.kubelet_pods):  # kubelet's PodResources socket
            if channel is not None:
                channel.close()
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
        try:
            self.nvml.shutdown()
        except NvmlError as error:
            log.warning("NVML shutdown: %s", error)
        self.journal.release()
        self.events.stop()

    def recover(self) -> StartupReport:
        """Startup recovery under the reconcile lock, then a reclaim pass (what the journal proves ours
        and no active pod backs goes at once); repeated each tick until the pod list succeeds."""
        with self.reconciler.lock:
            self.report = self.startup.run()
            if self.report.complete:
                self._reclaim()
        self.service.devices_changed()
        return self.report

    def tick(self) -> PassResult | None:
        """One reconcile period: look for neighbours (with one, touch nothing), finish recovery if the
        API was down at start, reclaim, publish."""
        if self.neighbours.check() is not None:
            self.server.lost()
            return None
        if self.report is None or not self.report.complete:
            self.recover()
            if not self.report or not self.report.complete:
                return None
        result = self._reclaim()
        self._reconcile_specs()
        self.publisher.publish(self.inventory)
        self.publish_claims()
        self._warm(result)
        return result

    def _gpu_uuids(self) -> set[str]:
        """Every GPU NVML shows (the device IDs this plugin may advertise name one of them)."""
        if self._uuids is None:
            try:
                self._uuids = {d.uuid for d in self.nvml.devices()}
            except NvmlError as error:
                log.warning(
                    "NVML cannot list the GPUs (%s): whose devices kubelet holds is not judged", error
                )
                return set()
        return self._uuids

    def _write_specs(self, instances: list[ManagedInstance]) -> None:
        """Allocate's hand-over: each instance's CDI spec is on disk before kubelet hears its name."""
        assert self.specs is not None
        try:
            self.specs.write(instances)
        except CdiError as error:
            raise AllocateError(
                "cdi-spec", f"the container runtime could not find the device: {error}"
            ) from None

    def _reconcile_specs(self) -> None:
        """CDI specs against the managed instances (at start: after the journal's recovery)."""
        if self.specs is not None and self.report is not None and self.report.complete:
            self.specs.reconcile(self.manager.managed)

    def publish_claims(self) -> None:
        """Say on the node that Allocate finds its pod through kubelet's PodResources API (so the
        scheduler may bind several pods here at once) only while that API answers; otherwise remove
        it, and the scheduler takes HAMi's node lock again. Allocate never falls back to guessing."""
        want = (
            PLUGIN_CLAIMS_PODRESOURCES
            if self.kubelet_pods is not None and self.kubelet_pods.reachable()
            else None
        )
        try:
            if self._claims is None or want != self._claims:
                current = self.kube.get_node().annotations.get(PLUGIN_CLAIMS)
                if current != want:
                    self.kube.patch_node_annotations({PLUGIN_CLAIMS: want})
                    log.info("node annotation %s: %s", PLUGIN_CLAIMS, want or "(removed)")
            self._claims = want or ""
        except KubeError as error:
            log.warning("could not publish %s: %s", PLUGIN_CLAIMS, error)

    def _reclaim(self) -> PassResult:
        """A reclaim pass, then (from the same view of the node) the leftovers for the scheduler."""
        with self.reconciler.lock:
            result = self.reconciler.run_once()
            if result.reservations is not None:
                found = find_leftovers(self.manager, result.reservations)
                if found is not None:
                    self.leftovers.publish(found)
                self.idle_publisher.publish(idle_list(self.manager.managed()))
        return result

    def _warm(self, result: PassResult) -> None:
        """One warm-pool step after a pass that understood the node; what it changed is published
        at once (a new warm instance is free for the scheduler only once it is in the idle list)."""
        if self.warm.tick(result.pods, result.reservations) in ("created", "trimmed"):
            self.idle_publisher.publish(idle_list(self.manager.managed()))
        self.metrics.warm_instances.set(len(self.warm.warm()))

    def _run(self) -> None:
        while not self._stop.wait(self.config.reconcile_interval):
            try:
                self.tick()
            except Exception:
                log.exception("reconcile tick failed")
            self._last_pass = time.monotonic()

    def alive(self) -> tuple[bool, str]:
        """Liveness: the reconcile loop runs and finishes its passes (a failed pass still counts:
        a restart would not cure an unreachable API server, but it does cure a wedged loop)."""
        if self._loop is None or not self._loop.is_alive():
            return False, "the reconcile loop is not running"
        age, limit = time.monotonic() - self._last_pass, max(60.0, 6 * self.config.reconcile_interval)
        if age > limit:
            return False, f"no reconcile pass finished for {age:.0f}s (limit {limit:.0f}s)"
        return True, f"ok: last reconcile pass {age:.1f}s ago"

    def ready(self) -> tuple[bool, str]:
        """Readiness: kubelet knows us (registered since its last restart)."""
        if not self.server.registered:
            return False, "not registered with kubelet"
        return True, f"ok: registered {self.config.resource_name} with kubelet"


def main(argv: list[str] | None = None) -> int:
    try:
        config = load_config(list(sys.argv[1:] if argv is None else argv))
        if not config.node.mig:
            raise ConfigError(
                f"node config: nodeconfig[name={config.node_name}].operatingmode is "
                f"{config.node.operating_mode!r}; dynmig's device plugin serves only 'mig' nodes"
            )
    except ConfigError as error:
        print(f"dynmig device-plugin: configuration error: {error}", file=sys.stderr)
        return 2
    logs.setup(config.log_level, config.log_format, node=config.node_name)  # every line names this node
    log.info("dynmig %s device-plugin starting", version())
    for warning in config.warnings:
        log.warning("%s", warning)
    for issue in config.device_config.warnings:
        log.warning("%s", issue.render("device config"))
    try:
        kube = Kube(api_client(config.kubeconfig), config.node_name)
    except Exception as error:  # noqa: BLE001 - a bad kubeconfig is a configuration error
        print(
            f"dynmig device-plugin: configuration error: kubeconfig {config.kubeconfig or '(in-cluster)'}: "
            f"{error}",
            file=sys.stderr,
        )
        return 2
    received = on_stop_signal()  # before start: a stop during startup is graceful too
    app = DevicePluginApp(config, kube)
    try:
        app.start()
    except NvmlError as error:
        print(f"dynmig device-plugin: NVML: {error}", file=sys.stderr)
        return 1
    run_until_signalled(received, app.stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
