"""`dynmig serve` settings (flags and environment) and the device-config file that reloads itself.

Every setting has a flag and an environment variable (`DYNMIG_<NAME>`); flags win. Defaults follow
HAMi's chart where HAMi has one (metrics on 9395, node-lock expiry 5 minutes).
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from mig.allowlist import DEFAULT_POLICY, DeviceConfig, PolicyError, load_device_config

log = logging.getLogger(__name__)

DEFAULT_SCHEDULER = "dynmig-scheduler"
DEFAULT_NAMESPACE = "dynmig"
DEVICE_CONFIG_LABEL = "dynmig.io/device-config"
DEVICE_CONFIG_KEY = "device-config.yaml"
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
    log_level: str = "info"


def _env(name: str, default: str) -> str:
    return os.environ.get(f"DYNMIG_{name}", default)


def _duration(text: str) -> float:
    """Seconds from `300`, `300s`, `5m` or `1h` (HAMi's HAMI_NODELOCK_EXPIRE style)."""
    text = text.strip()
    units = {"s": 1, "m": 60, "h": 3600}
    try:
        if text and text[-1] in units:
            return float(text[:-1]) * units[text[-1]]
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration; use e.g. 300, 90s, 5m") from None


def _validity(text: str) -> dt.timedelta:
    """A certificate lifetime in `dynmig certs`' units: 90d, 2160h, 5y, 10m."""
    from certs.main import UsageError, parse_duration

    try:
        return parse_duration("validity", text)
    except UsageError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration; use a number and a unit, e.g. 90d, "
                                         "2160h, 5y") from None


def parser() -> argparse.ArgumentParser:
    d = ServeConfig()
    p = argparse.ArgumentParser(prog="dynmig serve", description="Admission webhook and scheduler extender.")
    p.add_argument("--scheduler-name", default=_env("SCHEDULER_NAME", d.scheduler_name),
                   help="schedulerName set on GPU pods (env DYNMIG_SCHEDULER_NAME)")
    p.add_argument("--device-config", default=_env("DEVICE_CONFIG", d.device_config),
                   help="device-config YAML with nvidia.migProfileAllowlist; reloaded when it changes")
    p.add_argument("--privileged-user", action="append", dest="privileged_users",
                   help="username allowed to write hami.io/vgpu-mig-allocations (repeat); "
                        "env DYNMIG_PRIVILEGED_USERS is a comma list")
    p.add_argument("--bind-address", default=_env("BIND_ADDRESS", d.bind_address))
    p.add_argument("--port", type=int, default=int(_env("PORT", str(d.port))),
                   help="HTTPS port of the admission webhooks (/mutate, /validate), reached through the Service")
    p.add_argument("--extender-bind-address", default=_env("EXTENDER_BIND_ADDRESS", d.extender_bind_address),
                   help="address of the scheduler-extender listener (/filter, /bind); loopback by default, as "
                        "kube-scheduler runs in the same pod (env DYNMIG_EXTENDER_BIND_ADDRESS)")
    p.add_argument("--extender-port", type=int, default=int(_env("EXTENDER_PORT", str(d.extender_port))),
                   help="HTTPS port of the scheduler-extender listener (env DYNMIG_EXTENDER_PORT)")
    p.add_argument("--extender-client-ca", default=_env("EXTENDER_CLIENT_CA", d.extender_client_ca),
                   help="PEM CA file: the extender listener then requires a client certificate it signed "
                        "(for a kube-scheduler outside the pod; env DYNMIG_EXTENDER_CLIENT_CA)")
    p.add_argument("--metrics-port", type=int, default=int(_env("METRICS_PORT", str(d.metrics_port))),
                   help="plain-HTTP port for /metrics (HAMi uses 9395)")
    p.add_argument("--tls-cert", default=_env("TLS_CERT", d.tls_cert))
    p.add_argument("--tls-key", default=_env("TLS_KEY", d.tls_key))
    p.add_argument("--tls-name", action="append", dest="tls_names", default=None,
                   help="DNS name the serving certificate must carry (repeat)")
    p.add_argument("--tls-secret", default=_env("TLS_SECRET", d.tls_secret),
                   help="kubernetes.io/tls Secret in --namespace to serve from, watched through the API "
                        "(reloaded without a restart); when set it is used instead of --tls-cert/--tls-key, "
                        "unless --cert-mode=files (env DYNMIG_TLS_SECRET)")
    p.add_argument("--cert-mode", default=_env("CERT_MODE", ""), metavar="{self,cert-manager,files}",
                   help="who renews the serving certificate: self (the Lease holder renews the Secret and "
                        "injects the CA bundle), cert-manager (someone else; serve only reloads), files "
                        "(serve --tls-cert/--tls-key). Default: self with --tls-secret, else files "
                        "(env DYNMIG_CERT_MODE)")
    p.add_argument("--service", default=_env("SERVICE", d.service),
                   help="Service name the certificate is issued for (<service>.<namespace>.svc) (env DYNMIG_SERVICE)")
    p.add_argument("--ca-secret", default=_env("CA_SECRET", d.ca_secret),
                   help="Secret holding the CA key, cert-mode self (default <service>-ca; env DYNMIG_CA_SECRET)")
    p.add_argument("--mutating-webhook", default=_env("MUTATING_WEBHOOK", d.mutating_webhook),
                   help="MutatingWebhookConfiguration to keep the CA bundle in, cert-mode self "
                        "(env DYNMIG_MUTATING_WEBHOOK)")
    p.add_argument("--validating-webhook", default=_env("VALIDATING_WEBHOOK", d.validating_webhook),
                   help="ValidatingWebhookConfiguration to keep the CA bundle in, cert-mode self "
                        "(env DYNMIG_VALIDATING_WEBHOOK)")
    p.add_argument("--cert-key-type", default=_env("CERT_KEY_TYPE", d.cert_key_type), metavar="{ecdsa,rsa}",
                   help="key of renewed certificates: ecdsa (P-256) or rsa (2048) (env DYNMIG_CERT_KEY_TYPE)")
    p.add_argument("--cert-validity", type=_validity, default=_env("CERT_VALIDITY", "90d"),
                   help="validity of a renewed serving certificate, renewed at 2/3 of it "
                        "(default 90d; env DYNMIG_CERT_VALIDITY)")
    p.add_argument("--ca-validity", type=_validity, default=_env("CA_VALIDITY", "5y"),
                   help="validity of a new CA (default 5y; env DYNMIG_CA_VALIDITY)")
    p.add_argument("--kubeconfig", default=_env("KUBECONFIG", os.environ.get("KUBECONFIG", "")),
                   help="kubeconfig file; empty means in-cluster")
    p.add_argument("--namespace", default=_env("NAMESPACE", os.environ.get("POD_NAMESPACE", d.namespace)),
                   help="namespace of the leader-election Lease")
    p.add_argument("--leader-elect", default=_env("LEADER_ELECT", "true"), choices=("true", "false"))
    p.add_argument("--lease-name", default=_env("LEASE_NAME", d.lease_name))
    p.add_argument("--identity", default=_env("IDENTITY", d.identity))
    p.add_argument("--node-lock-expiry", type=_duration,
                   default=_duration(os.environ.get("HAMI_NODELOCK_EXPIRE", _env("NODE_LOCK_EXPIRY", "5m"))))
    p.add_argument("--log-level", default=_env("LOG_LEVEL", d.log_level))
    return p


def parse_args(argv: list[str]) -> ServeConfig:
    p = parser()
    args = p.parse_args(argv)
    cert_mode = args.cert_mode or ("self" if args.tls_secret else "files")
    if cert_mode not in CERT_MODES:  # argparse does not check defaults (the environment) against choices
        p.error(f"--cert-mode (env DYNMIG_CERT_MODE): {cert_mode!r} is not one of {', '.join(CERT_MODES)}")
    if args.cert_key_type not in CERT_KEY_TYPES:
        p.error(f"--cert-key-type (env DYNMIG_CERT_KEY_TYPE): {args.cert_key_type!r} is not one of "
                f"{', '.join(CERT_KEY_TYPES)}")
    users = args.privileged_users or [u.strip() for u in _env("PRIVILEGED_USERS", "").split(",") if u.strip()]
    return ServeConfig(
        scheduler_name=args.scheduler_name,
        device_config=args.device_config,
        privileged_users=tuple(users) or ServeConfig().privileged_users,
        bind_address=args.bind_address,
        port=args.port,
        extender_bind_address=args.extender_bind_address,
        extender_port=args.extender_port,
        extender_client_ca=args.extender_client_ca,
        metrics_port=args.metrics_port,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_names=tuple(args.tls_names or ()),
        tls_secret=args.tls_secret,
        cert_mode=cert_mode,
        service=args.service,
        ca_secret=args.ca_secret,
        mutating_webhook=args.mutating_webhook,
        validating_webhook=args.validating_webhook,
        cert_key_type=args.cert_key_type,
        cert_validity=args.cert_validity,
        ca_validity=args.ca_validity,
        kubeconfig=args.kubeconfig,
        namespace=args.namespace,
        leader_elect=args.leader_elect == "true",
        lease_name=args.lease_name,
        identity=args.identity,
        node_lock_expiry=args.node_lock_expiry,
        log_level=args.log_level,
    )


class DeviceConfigFile:
    """The device config, re-read when the file changes (checked at most once per `interval`).

    A changed file that fails validation is not used: the last good config stays in force and the
    error is logged, so a typo never reaches scheduling decisions.
    """

    def __init__(self, path: str | Path, interval: float = 1.0):
        self.path = Path(path)
        self.interval = interval
        self._lock = threading.Lock()
        self._stamp = self._stat()
        self._checked = time.monotonic()
        self._config = load_device_config(self.path)
        self.last_error = ""

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
            try:
                self._config = load_device_config(self.path)
                self.last_error = ""
                log.info("device config %s reloaded", self.path)
            except PolicyError as error:
                self.last_error = str(error)
                log.error("device config %s changed but is invalid; keeping the previous one:\n%s",
                          self.path, error)
        return self._config


class StaticDeviceConfig:
    """A fixed device config (tests, `dynmig lab`)."""

    def __init__(self, config: DeviceConfig):
        self._config = config
        self.last_error = ""

    def get(self) -> DeviceConfig:
        return self._config
