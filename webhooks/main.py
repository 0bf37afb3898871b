"""`dynmig serve`: assemble the service (cache, fleet, extender, admission, leader election) and run it.

`Service` is the whole server without the network listeners, so tests and `dynmig lab` can start it
against any API server and drive the app directly; `main` adds its serving certificate (reloaded from
the Secret or files, renewed by the Lease holder in cert-mode self: webhooks/tls.py), uvicorn with TLS
and the metrics port.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import TYPE_CHECKING, Any

from base import logs
from base.events import Regarding
from base.heap import HeapKeeper
from base.version import version
from certs.reload import TLSReloader
from kube.shutdown import STOP_DEADLINE, exit_if_stop_hangs
from mig.allowlist import DeviceConfig, PolicyError, ResourceNames
from mig.fleetcheck import check_fleet
from webhooks.admission import AdmissionPolicy
from webhooks.app import Server, create_app, create_extender_app, create_metrics_app
from webhooks.bind import Binder
from webhooks.cache import ClusterCache
from webhooks.config import (
    FLEET_REASON,
    REFUSED_REASON,
    DeviceConfigCollector,
    DeviceConfigFile,
    ServeConfig,
    parse_args,
)
from webhooks.defrag import Defragmenter
from webhooks.dracache import DraCache
from webhooks.filter import Filter
from webhooks.fleet import Fleet
from webhooks.kube import EventRecorder, Kube, load_api_client
from webhooks.leader import AlwaysLeader, LeaseFollower
from webhooks.metrics import Metrics
from webhooks.nodelock import NodeLock, lock_free
from webhooks.page.app import create_page_app
from webhooks.page.view import FleetPage
from webhooks.prioritize import Prioritizer
from webhooks.runner import Extender, Listeners, Page
from webhooks.tls import ServingCertificates, extender_tls, settings_problem

if TYPE_CHECKING:
    from kubernetes import client

log = logging.getLogger("dynmig.serve")
CONFIG_POLL = 2.0  # seconds between looks at the device-config file when no request reads it
NOT_LEADER = (
    "not the leader: the kube-scheduler of this pod does not hold the scheduler Lease, so this dynmig "
    "replica does not schedule"
)


class Scheduler:
    """The extender verbs, answered only while this pod's kube-scheduler holds the Lease."""

    def __init__(self, filter_: Filter, binder: Binder, leader: AlwaysLeader | LeaseFollower):
        self._filter, self._binder, self.leader = filter_, binder, leader

    def filter(self, args: dict[str, Any]) -> dict[str, Any]:
        if not self.leader.is_leader() and not self.leader.refresh():
            return {
                "NodeNames": None,
                "Nodes": None,
                "FailedNodes": {},
                "FailedAndUnresolvableNodes": {},
                "Error": NOT_LEADER,
            }
        return self._filter(args)

    def filter_inline(self, args: dict[str, Any]) -> dict[str, Any] | None:
        """The filter's answer when it needs no API call (leader already, pod in the cache), else
        None: the server then runs `filter` off its event loop."""
        if not self.leader.is_leader():
            return None
        return self._filter.inline(args)

    def bind(self, args: dict[str, Any]) -> dict[str, Any]:
        if not self.leader.is_leader() and not self.leader.refresh():
            return {"Error": NOT_LEADER}
        return self._binder(args)


class Service:
    """Everything `dynmig serve` runs, minus the listeners. `start()`, then `app`, then `stop()`."""

    def __init__(
        self,
        cfg: ServeConfig,
        api_client: client.ApiClient | None = None,
        device_config: DeviceConfigFile | None = None,
        tls: TLSReloader | None = None,
    ):
        self.cfg = cfg
        self.device_config = device_config or DeviceConfigFile(cfg.device_config)
        self.kube = Kube(api_client or load_api_client(cfg.kubeconfig))
        # one timeout: a reservation from filter to bind
        self.fleet = Fleet(ttl=cfg.reservation_ttl, node_pricing=cfg.node_pricing)
        self.metrics = Metrics(fleet=self.fleet.view)
        lock = NodeLock(self.kube, cfg.node_lock_expiry)
        self.cache = ClusterCache(
            self.kube, self.fleet, locks=lock.table(), on_running=self.metrics.time_to_running.observe
        )
        self.dra = DraCache(self.kube.api_client, cfg.dra_driver) if cfg.dra_driver else None
        self.events = EventRecorder(
            self.kube, cfg.scheduler_name, cfg.identity, dropped=self.metrics.event_dropped
        )
        self.metrics.registry.register(DeviceConfigCollector(self.device_config))
        self.device_config.on_refused = self._device_config_refused
        self.device_config.on_loaded = self._device_config_loaded
        self._stopping = threading.Event()
        self._watcher = threading.Thread(target=self._watch_device_config, name="device-config", daemon=True)

        def resources() -> ResourceNames:
            return self.device_config.get().resources  # read per request: the file reloads

        # one leadership for the pod: follow kube-scheduler's Lease (webhooks/leader.py)
        self.leader = (
            LeaseFollower(
                self.kube, cfg.namespace, cfg.lease_name, cfg.identity, on_change=self._leadership_changed
            )
            if cfg.leader_elect
            else AlwaysLeader()
        )
        self.metrics.follow_leader(self.leader.is_leader)
        self.defrag = Defragmenter(
            self.fleet,
            self.kube,
            self.events,
            resources,
            pods=lambda: list(self.cache.pods.values()),
            pod_of=self.cache.pod,
            scheduler_name=cfg.scheduler_name,
            node_of=self.cache.node,
            is_leader=self.leader.is_leader,
            evict=cfg.defrag_evict,
            move_only=cfg.defrag_move_only,
            interval=cfg.defrag_interval,
            per_minute=cfg.defrag_evictions_per_minute,
        )
        self.filter = Filter(
            self.fleet,
            resources,
            self.events,
            self.metrics,
            blocked=self.cache.blocked,
            lookup=self.cache.find_pod,
            advice=self.defrag.advice_for,
            cached=self.cache.cached_pod,
            lock_free=lambda node: lock_free(self.cache.node(node)),
        )
        self.binder = Binder(
            self.fleet,
            self.cache,
            self.kube,
            lock,
            resources,
            self.events,
            self.metrics,
            self.filter.readings,
        )
        self.tls = tls
        self.certificates: ServingCertificates | None = None
        policy = AdmissionPolicy(
            device_config=self.device_config.get,
            scheduler_name=cfg.scheduler_name,
            privileged_users=frozenset(cfg.privileged_users),
            fleet_models=self.fleet.models,
            fleet_offers=self.fleet.offers,
            dra_resources=frozenset(cfg.dra_extended_resources),
        )
        self.server = Server(
            policy=policy,
            metrics=self.metrics,
            extender=Scheduler(self.filter, self.binder, self.leader),
            ready=self.ready,
            prioritize=self._prioritizer(),
        )
        self.app = create_app(self.server)  # admission webhooks and health: the Service's port
        self.extender_app = create_extender_app(self.server)  # /filter, /bind: kube-scheduler only
        self.metrics_app = create_metrics_app(self.metrics)
        self.page_app = (  # the live slice-map page, on its own listener (off by default)
            create_page_app(
                FleetPage(
                    self.fleet,
                    lambda: self.cache.objects()[1],
                    lambda: self.cache.synced,
                    resources,
                    cfg.scheduler_name,
                    nodes=lambda: self.cache.objects()[0],
                    dra=self.dra.nodes if self.dra is not None else lambda: [],
                    dra_pending=self.dra.pending if self.dra is not None else lambda pods: [],
                )
            )
            if cfg.page
            else None
        )

    def _prioritizer(self) -> Prioritizer | None:
        """The prioritize verb scores DRA pods' nodes from the DRA cache, with the device config's
        allowlist (the DRA plugin publishes from the same one)."""
        if self.dra is None:
            return None
        return Prioritizer(
            self.dra,
            self.cfg.dra_driver,
            lambda m: self.device_config.get().allowlist.profiles_for(m.nvml_name),
        )

    def use_certificates(self, **timing: Any) -> ServingCertificates:
        """Serve and (cert-mode self, as Lease holder) renew the certificate `cfg` names; its metrics
        join this server's registry. Started and stopped with the service. `timing`: see
        ServingCertificates (tests shorten intervals)."""
        self.certificates = ServingCertificates(
            self.cfg, self.kube.api_client, self.metrics.registry, self.leader.is_leader, **timing
        )
        self.tls = self.certificates.reloader
        return self.certificates

    def _leadership_changed(self, leader: bool) -> None:
        if self.certificates is not None:
            self.certificates.leadership_changed(leader)

    def ready(self) -> tuple[bool, str]:
        if not self.cache.synced:
            return False, "waiting for the node and pod caches to sync"
        if self.tls is not None and not self.tls.ready():
            return False, "no valid serving certificate loaded"
        return True, "ok"

    def start(self, wait: float | None = 30.0) -> Service:
        if self.certificates is not None:
            self.certificates.start()  # loads the current pair first, so a listener can serve at once
        self.events.start()
        self.cache.start()
        if self.dra is not None:
            self.dra.start()
        if wait:
            self.cache.wait_synced(wait)
        if self.cache.synced:
            self._device_config_loaded(self.device_config.get())
        self.leader.start()
        self.defrag.start()
        self._watcher.start()
        return self

    def _watch_device_config(self) -> None:
        """Re-read the device-config file on a timer too: a changed file is loaded (and checked against
        the fleet) or refused within seconds even when no request arrives to read it."""
        while not self._stopping.wait(CONFIG_POLL):
            try:
                self._recheck_nodes(self.device_config.get())
            except Exception:  # never let the watcher die: the next request reads the file again
                log.exception("reading the device config failed")

    def _recheck_nodes(self, config: DeviceConfig) -> None:
        """A node that registers after the config loaded, or changes the GPUs it publishes, is
        checked too: when the nodes the config leaves with no MIG profile change, the fleet is
        checked again as at a reload (said, never refused)."""
        if not self.cache.synced:
            return
        nodes, _ = self.cache.objects()
        if check_fleet(config.allowlist, nodes, ()).bare != self.device_config.fleet.bare:
            self._device_config_loaded(config)

    def _device_config_refused(self, message: str) -> None:
        """A refused device-config reload, as a Warning Event about this serve pod."""
        me = Regarding("Pod", self.cfg.namespace, self.cfg.identity)
        self.events.record_about(me, "Warning", REFUSED_REASON, message)

    def _device_config_loaded(self, config: DeviceConfig) -> None:
        """At load and each reload: which nodes the config leaves with no MIG profile, and which running
        pods hold a profile it no longer allows (they keep running): logged, counted and posted as a
        Warning Event about this serve pod. Nothing is refused for it."""
        nodes, pods = self.cache.objects()
        found = check_fleet(config.allowlist, nodes, pods)
        self.device_config.fleet = found
        if not found:
            return
        lines = found.lines()
        log.warning("the device config in force:\n%s", "\n".join(lines))
        me = Regarding("Pod", self.cfg.namespace, self.cfg.identity)
        self.events.record_about(me, "Warning", FLEET_REASON, "; ".join(lines))

    def stop(self) -> None:
        self._stopping.set()
        if self._watcher.is_alive():
            self._watcher.join(timeout=5)
        self.defrag.stop()
        self.leader.stop()
        self.cache.stop()
        if self.dra is not None:
            self.dra.stop()
        self.events.stop()
        if self.certificates is not None:
            self.certificates.stop()


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(list(sys.argv[1:] if argv is None else argv))
    logs.setup(cfg.log_level, cfg.log_format)
    log.info("dynmig %s serve starting", version())
    for warning in cfg.warnings:
        log.warning("%s", warning)
    problem = settings_problem(cfg)
    if problem:
        print(f"dynmig serve: {problem}", file=sys.stderr)
        return 2
    try:
        device_config = DeviceConfigFile(cfg.device_config)
    except PolicyError as error:
        print(f"dynmig serve: the device config is invalid:\n{error}", file=sys.stderr)
        return 2
    service = Service(cfg, device_config=device_config)
    service.use_certificates()
    service.start(wait=None)
    heap = HeapKeeper(lambda: service.cache.synced).start()  # once the caches hold the fleet
    listeners = Listeners(
        service.app,
        service.metrics_app,
        cfg.bind_address,
        cfg.port,
        cfg.metrics_port,
        service.tls,
        cfg.log_level,
        extender=Extender(
            service.extender_app,
            cfg.extender_bind_address,
            cfg.extender_port,
            extender_tls(service.tls, cfg.extender_client_ca),
        ),
        page=Page(service.page_app, cfg.page_port) if service.page_app is not None else None,
    )
    try:
        listeners.run()
    finally:
        exit_if_stop_hangs(STOP_DEADLINE)
        heap.stop()
        service.stop()
    return 0
