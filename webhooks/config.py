"""`dynmig serve` settings (flags and environment) and the device-config file that reloads itself.

Every setting has a flag and an environment variable (`DYNMIG_<NAME>`, base/flags.py); flags win.
Defaults follow HAMi's chart where HAMi has one (metrics on 9395, node-lock expiry 5 minutes).
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from base.flags import Flags, boolean, dra_driver, port, positive_seconds
from base.logs import FORMATS, LEVELS
from base.policyfiles import DEFAULT_POLICY, load_device_config
from mig.allowlist import DeviceConfig, PolicyError
from mig.fleetcheck import FleetCheck
from mig.pods import DEFAULT_SCHEDULER

log = logging.getLogger(__name__)

DEFAULT_NAMESPACE = "dynmig"
CERT_MODES = ("self", "cert-manager", "files")
CERT_KEY_TYPES = ("ecdsa", "rsa")


@dataclass(frozen=True)
class ServeConfig:
    scheduler_name: str = DEFAULT_SCHEDULER
    device_config: str = str(DEFAULT_POLICY)
    privileged_users: tuple[str, ...] = (
        f"system:serviceaccount:{DEFAULT_NAMESPACE}:dynmig-scheduler",
        f"system:serviceaccount:{DEFAULT_NAMESPACE}:dynmig-device-plugin",
    )
    bind_address: str = "0.0.0.0"
    port: int = 8443
    # /filter and /bind on their own listener: only kube-scheduler may change a reservation, and in
    # the chart it runs in the same pod, so loopback by default. A CA file turns on client
    # certificates (kube-scheduler's tlsConfig certFile/keyFile) for setups that place it elsewhere.
    extender_bind_address: str = "127.0.0.1"
    extender_port: int = 8444
    extender_client_ca: str = ""
    metrics_port: int = 9395
    # the live slice-map page (webhooks/page): read-only, on its own plain-HTTP listener, off by default
    page: bool = False
    page_port: int = 9396
    # the DRA driver whose ResourceSlices and claims the page draws (webhooks/dracache); "" = none
    dra_driver: str = ""
    dra_extended_resources: tuple[str, ...] = ()
    tls_cert: str = ""
    tls_key: str = ""
    tls_names: tuple[str, ...] = ()
    # Where the serving pair comes from and who renews it (webhooks/tls.py):
    #   self         reload from Secret `tls_secret`; the Lease holder renews it and injects the CA bundle
    #   cert-manager reload from Secret `tls_secret`; someone else (cert-manager) renews it
    #   files        reload from `tls_cert`/`tls_key` (a mounted Secret, `dynmig lab`); nobody renews
    tls_secret: str = ""
    cert_mode: str = "files"
    service: str = "dynmig"
    ca_secret: str = ""  # empty: <service>-ca, as `dynmig certs` names it
    mutating_webhook: str = ""
    validating_webhook: str = ""
    cert_key_type: str = "ecdsa"
    cert_validity: dt.timedelta = dt.timedelta(days=90)
    ca_validity: dt.timedelta = dt.timedelta(days=5 * 365)
    kubeconfig: str = ""
    namespace: str = DEFAULT_NAMESPACE
    leader_elect: bool = True
    lease_name: str = "dynmig-scheduler"
    identity: str = field(default_factory=lambda: os.environ.get("POD_NAME") or os.uname().nodename)
    node_lock_expiry: float = 300.0
    reservation_ttl: float = 120.0
    # The engine prices node slots for pods asking N whole GPUs on one node (webhooks/demand.py): off, as
    # it refused more GPU-work than the best simple rule on held-out real-trace windows (docs/packing.md).
    node_pricing: bool = False
    # Defrag (webhooks/defrag.py): advice for pending MIG pods always; evicting only when turned on.
    defrag_evict: bool = False
    defrag_move_only: bool = True  # evict only sets whose every pod is placed again elsewhere
    defrag_interval: float = 10.0
    defrag_evictions_per_minute: int = 6
    log_level: str = "info"
    log_format: str = "text"
    warnings: tuple[str, ...] = ()  # deprecated environment names seen while parsing; logged at startup


def count(text: str) -> int:
    """A whole number from 1 to 1000."""
    try:
        value = int(text.strip())
    except ValueError:
        value = 0
    if not 1 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number from 1 to 1000")
    return value


def _validity(text: str) -> dt.timedelta:
    """A certificate lifetime in `dynmig certs`' units: 90d, 2160h, 5y, 10m."""
    from certs.main import UsageError, parse_duration

    try:
        return parse_duration("validity", text)
    except UsageError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration; use a number and a unit, e.g. 90d, 2160h, 5y"
        ) from None


def extended_resource(text: str) -> str:
    """A `nvidia.com/mig-<profile>` resource name (what a DRA DeviceClass's extendedResourceName maps)."""
    if not MIG_RESOURCE.match(text):
        raise argparse.ArgumentTypeError(
            f"{text[:80]!r} is not a MIG Manager resource name; write nvidia.com/mig-<profile>, "
            "e.g. nvidia.com/mig-1g.10gb"
        )
    return text


def _extended_resources(f: Flags, names: Iterable[str]) -> tuple[str, ...]:
    try:
        return tuple(extended_resource(n) for n in names)
    except argparse.ArgumentTypeError as error:
        f.error(f"argument --dra-extended-resource: {error}")
        raise


MIG_RESOURCE = re.compile(r"^nvidia\.com/mig-[0-9]+g\.[0-9a-z.+-]{1,40}$")


def flags(environ: Mapping[str, str] | None = None) -> Flags:
    """Every `dynmig serve` flag; each also reads DYNMIG_<NAME> (base/flags.py)."""
    d = ServeConfig()
    f = Flags(
        "dynmig serve",
        "Admission webhooks and scheduler extender (HTTPS), metrics on a second port.",
        environ,
    )
    f.add("--scheduler-name", default=d.scheduler_name, help="schedulerName set on GPU pods")
    f.add(
        "--device-config",
        default=d.device_config,
        show_default="the packaged policies/default.yaml",
        help="device-config YAML with nvidia.migProfileAllowlist; reloaded when it changes",
    )
    f.add(
        "--privileged-user",
        default=d.privileged_users,
        repeat=True,
        old_env=("DYNMIG_PRIVILEGED_USERS",),
        help="username allowed to write hami.io/vgpu-mig-allocations (repeat, or a comma list)",
    )
    f.add("--bind-address", default=d.bind_address, help="address the webhook and metrics ports listen on")
    f.add(
        "--port",
        default=d.port,
        type=port,
        help="HTTPS port of the admission webhooks (/mutate, /validate), reached through the Service",
    )
    f.add(
        "--extender-bind-address",
        default=d.extender_bind_address,
        help="address of the scheduler-extender listener (/filter, /bind); loopback by default, as "
        "kube-scheduler runs in the same pod",
    )
    f.add(
        "--extender-port",
        default=d.extender_port,
        type=port,
        help="HTTPS port of the scheduler-extender listener",
    )
    f.add(
        "--extender-client-ca",
        default=d.extender_client_ca,
        help="PEM CA file: the extender listener then requires a client certificate it signed "
        "(for a kube-scheduler outside the pod)",
    )
    f.add(
        "--metrics-port",
        default=d.metrics_port,
        type=port,
        help="plain-HTTP port for /metrics (HAMi uses 9395)",
    )
    f.add(
        "--page",
        default=d.page,
        type=boolean,
        metavar="{true,false}",
        help="true: serve the live slice-map page (read-only: every node's GPUs, pods and pending pods) "
        "on --page-port",
    )
    f.add(
        "--page-port",
        default=d.page_port,
        type=port,
        help="plain-HTTP port of the live slice-map page, when --page=true",
    )
    f.add(
        "--dra-driver",
        default=d.dra_driver,
        type=dra_driver,
        metavar="NAME",
        help="DRA node pools of this driver: the extender's prioritize verb scores nodes for pods with its "
        "claims, and the page draws them (needs list/watch on resourceslices and resourceclaims); empty: none",
    )
    f.add(
        "--dra-extended-resource",
        default=d.dra_extended_resources,
        repeat=True,
        metavar="NAME",
        help="a nvidia.com/mig-<profile> name a DeviceClass maps on DRA nodes (repeat, or a comma list): "
        "admission leaves it to kube-scheduler instead of translating it",
    )
    f.add("--tls-cert", default=d.tls_cert, help="serving certificate PEM file (cert-mode files)")
    f.add("--tls-key", default=d.tls_key, help="serving key PEM file (cert-mode files)")
    f.add(
        "--tls-name",
        default=d.tls_names,
        repeat=True,
        help="DNS name the serving certificate must carry (repeat, or a comma list)",
    )
    f.add(
        "--tls-secret",
        default=d.tls_secret,
        help="kubernetes.io/tls Secret in --namespace to serve from, watched through the API (reloaded "
        "without a restart); when set it is used instead of --tls-cert/--tls-key, unless --cert-mode=files",
    )
    f.add(
        "--cert-mode",
        default="",
        choices=CERT_MODES,
        show_default="self with --tls-secret, else files",
        help="who renews the serving certificate: self (the Lease holder renews the Secret and injects the "
        "CA bundle), cert-manager (someone else; serve only reloads), files (serve --tls-cert/--tls-key)",
    )
    f.add(
        "--service",
        default=d.service,
        help="Service name the certificate is issued for (<service>.<namespace>.svc)",
    )
    f.add(
        "--ca-secret",
        default=d.ca_secret,
        show_default="<service>-ca",
        help="Secret holding the CA key, cert-mode self",
    )
    f.add(
        "--mutating-webhook",
        default=d.mutating_webhook,
        help="MutatingWebhookConfiguration to keep the CA bundle in, cert-mode self",
    )
    f.add(
        "--validating-webhook",
        default=d.validating_webhook,
        help="ValidatingWebhookConfiguration to keep the CA bundle in, cert-mode self",
    )
    f.add(
        "--cert-key-type",
        default=d.cert_key_type,
        choices=CERT_KEY_TYPES,
        help="key of renewed certificates: ecdsa (P-256) or rsa (2048)",
    )
    f.add(
        "--cert-validity",
        default=d.cert_validity,
        type=_validity,
        show_default="90d",
        help="validity of a renewed serving certificate, renewed at 2/3 of it",
    )
    f.add(
        "--ca-validity", default=d.ca_validity, type=_validity, show_default="5y", help="validity of a new CA"
    )
    f.add(
        "--kubeconfig",
        default=d.kubeconfig,
        quiet_env=("KUBECONFIG",),
        show_default="in-cluster",
        help="kubeconfig file (also read from KUBECONFIG)",
    )
    f.add(
        "--namespace",
        default=d.namespace,
        quiet_env=("POD_NAMESPACE",),
        help="namespace of the Lease and the certificate Secrets (also read from POD_NAMESPACE)",
    )
    f.add(
        "--leader-elect",
        default=d.leader_elect,
        type=boolean,
        metavar="{true,false}",
        help="true: answer /filter and /bind and renew certificates only while this pod's kube-scheduler "
        "holds the Lease --lease-name (its holder is <--identity>_<uuid>); serve takes no Lease itself",
    )
    f.add(
        "--lease-name",
        default=d.lease_name,
        help="kube-scheduler's leader-election Lease (its leaderElection.resourceName) in --namespace",
    )
    f.add(
        "--identity",
        default=d.identity,
        quiet_env=("POD_NAME",),
        show_default="$POD_NAME, else the host name",
        help="this pod's name, the hostname part of its kube-scheduler's holderIdentity",
    )
    f.add(
        "--node-lock-expiry",
        default=d.node_lock_expiry,
        type=positive_seconds,
        old_env=("HAMI_NODELOCK_EXPIRE",),
        show_default="5m",
        help="age after which a node lock left by a failed bind is broken (e.g. 300, 90s, 5m)",
    )
    f.add(
        "--node-pricing",
        default=d.node_pricing,
        type=boolean,
        metavar="{true,false}",
        help="true: keep whole nodes for pods asking several whole GPUs on one node when such pods arrive "
        "(the engine prices node slots); false: only the mix of single-GPU asks prices placements",
    )
    f.add(
        "--defrag-evict",
        default=d.defrag_evict,
        type=boolean,
        metavar="{true,false}",
        help='true: evict (Eviction API) the cheapest set of opted-in (dynmig.io/evictable: "true"), '
        "lower-priority MIG pods whose removal lets a pending MIG pod be placed; false: only advise",
    )
    f.add(
        "--defrag-move-only",
        default=d.defrag_move_only,
        type=boolean,
        metavar="{true,false}",
        help="true: --defrag-evict evicts only sets whose every pod its controller recreates and the "
        "placement engine places again on another GPU (a move); false: also sets that leave a pod "
        "with no other home (the advice always says which pods move and which would be lost)",
    )
    f.add(
        "--defrag-interval",
        default=d.defrag_interval,
        type=positive_seconds,
        show_default="10s",
        help="how often pending MIG pods get defrag advice (and, with --defrag-evict, evictions)",
    )
    f.add(
        "--defrag-evictions-per-minute",
        default=d.defrag_evictions_per_minute,
        type=count,
        help="most pods --defrag-evict evicts per minute (a set larger than this is never evicted)",
    )
    f.add("--log-level", default=d.log_level, choices=LEVELS, help="least severe log level written")
    f.add(
        "--log-format",
        default=d.log_format,
        choices=FORMATS,
        help="text: one readable line per event; json: one JSON object per line (uvicorn's lines too)",
    )
    return f


def parser() -> argparse.ArgumentParser:
    return flags().parser


def parse_args(argv: list[str], environ: Mapping[str, str] | None = None) -> ServeConfig:
    f = flags(environ)
    args = f.parse(argv)
    return ServeConfig(
        scheduler_name=args.scheduler_name,
        device_config=args.device_config,
        privileged_users=tuple(args.privileged_user) or ServeConfig().privileged_users,
        bind_address=args.bind_address,
        port=args.port,
        extender_bind_address=args.extender_bind_address,
        extender_port=args.extender_port,
        extender_client_ca=args.extender_client_ca,
        metrics_port=args.metrics_port,
        page=args.page,
        page_port=args.page_port,
        dra_driver=args.dra_driver,
        dra_extended_resources=_extended_resources(f, args.dra_extended_resource),
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_names=tuple(args.tls_name),
        tls_secret=args.tls_secret,
        cert_mode=args.cert_mode or ("self" if args.tls_secret else "files"),
        service=args.service,
        ca_secret=args.ca_secret,
        mutating_webhook=args.mutating_webhook,
        validating_webhook=args.validating_webhook,
        cert_key_type=args.cert_key_type,
        cert_validity=args.cert_validity,
        ca_validity=args.ca_validity,
        kubeconfig=args.kubeconfig,
        namespace=args.namespace,
        leader_elect=args.leader_elect,
        lease_name=args.lease_name,
        identity=args.identity,
        node_lock_expiry=args.node_lock_expiry,
        node_pricing=args.node_pricing,
        defrag_evict=args.defrag_evict,
        defrag_move_only=args.defrag_move_only,
        defrag_interval=args.defrag_interval,
        defrag_evictions_per_minute=args.defrag_evictions_per_minute,
        log_level=args.log_level,
        log_format=args.log_format,
        warnings=tuple(f.warnings),
    )


REFUSED_REASON = "DeviceConfigRefused"
# a device config loaded that leaves nodes with no MIG profile or running pods with a profile it no
# longer allows (mig/fleetcheck.py): said, never refused
FLEET_REASON = "DeviceConfigFleetFindings"


class DeviceConfigFile:
    """The device config, re-read when the file changes (checked at most once per `interval`).

    Serve holds it to `dynmig policy check` (errors, not warnings): a file that fails (at startup: PolicyError, serve
    does not start) is refused, and on a reload the last good config stays in force. Each refusal is
    logged, counted (`refusals`, `refused`: the metrics below) and handed to `on_refused` once per
    changed file (serve posts it as a Warning Event about its own pod), so a typo never reaches
    scheduling decisions in silence. A file that loads is handed to `on_loaded` (serve checks it
    against the fleet: mig/fleetcheck.py), outside the lock; `fleet` holds serve's last such check.
    """

    def __init__(
        self,
        path: str | Path,
        interval: float = 1.0,
        on_refused: Callable[[str], None] | None = None,
    ):
        self.path = Path(path)
        self.interval = interval
        self.on_refused = on_refused or (lambda message: None)
        self._lock = threading.Lock()
        self._stamp = self._stat()
        self._checked = time.monotonic()
        self._config = load_device_config(self.path)
        self.last_error = ""
        self.refusals = 0
        self.on_loaded: Callable[[DeviceConfig], None] = lambda config: None
        self.fleet = FleetCheck()

    @property
    def refused(self) -> bool:
        """True while the file on disk is refused and the last good config is in force."""
        return bool(self.last_error)

    def _stat(self) -> tuple[float, int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_mtime, st.st_size, st.st_ino)

    def get(self) -> DeviceConfig:
        now = time.monotonic()
        if now - self._checked < self.interval:
            return self._config
        with self._lock:
            self._checked = now
            stamp = self._stat()
            if stamp is None or stamp == self._stamp:
                return self._config
            self._stamp = stamp
            loaded = self._reload()
        if loaded:
            self.on_loaded(self._config)
        return self._config

    def _reload(self) -> bool:
        try:
            self._config = load_device_config(self.path)
        except PolicyError as error:
            self._refuse(str(error))
            return False
        self.last_error = ""
        log.info("device config %s reloaded", self.path)
        return True

    def _refuse(self, why: str) -> None:
        self.last_error = why
        self.refusals += 1
        log.error("device config %s changed but is refused; keeping the previous one:\n%s", self.path, why)
        self.on_refused(
            f"device config {self.path} refused (dynmig policy check reports an error); the previous one "
            f"stays in force: {why}"
        )


class StaticDeviceConfig:
    """A fixed device config (tests, `dynmig lab`)."""

    def __init__(self, config: DeviceConfig):
        self._config = config
        self.last_error = ""
        self.refusals = 0
        self.refused = False
        self.on_refused: Callable[[str], None] = lambda message: None
        self.on_loaded: Callable[[DeviceConfig], None] = lambda config: None
        self.fleet = FleetCheck()

    def get(self) -> DeviceConfig:
        return self._config


class DeviceConfigCollector:
    """`dynmig_device_config_refused` (1 while a changed file is refused and the last good config is
    in force), `dynmig_device_config_refusals_total`, and what the config in force does to the fleet
    (`dynmig_device_config_bare_nodes`, `dynmig_device_config_disallowed_reservations`), read from the
    source at scrape time."""

    def __init__(self, source: DeviceConfigFile | StaticDeviceConfig):
        self.source = source

    def collect(self) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        refused = GaugeMetricFamily(
            "dynmig_device_config_refused",
            "1 while the device-config file has an error dynmig policy check reports and the last good one is used",
        )
        refused.add_metric([], 1.0 if self.source.refused else 0.0)
        refusals = CounterMetricFamily(
            "dynmig_device_config_refusals",
            "Changed device-config files refused (dynmig policy check reports an error)",
        )
        refusals.add_metric([], float(self.source.refusals))
        bare = GaugeMetricFamily(
            "dynmig_device_config_bare_nodes",
            "MIG nodes that publish no MIG profile under the device config in force (checked at load and reload)",
        )
        bare.add_metric([], float(len(self.source.fleet.bare)))
        held = GaugeMetricFamily(
            "dynmig_device_config_disallowed_reservations",
            "Running pods' reservations of a profile the device config in force no longer allows (they keep "
            "running)",
        )
        held.add_metric([], float(len(self.source.fleet.held)))
        return [refused, refusals, bare, held]
