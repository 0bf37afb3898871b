"""KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1): the parts the simulated
kube-scheduler honours, parsed from the same YAML file the Helm chart renders.

Honoured: profiles[].schedulerName, extenders[] (urlPrefix, filterVerb, bindVerb, prioritizeVerb,
weight, nodeCacheCapable, managedResources, httpTimeout, enableHTTPS, tlsConfig, ignorable),
percentageOfNodesToScore, podInitialBackoffSeconds, podMaxBackoffSeconds, leaderElection
(leaderElect, leaseDuration, renewDeadline, retryPeriod, resourceLock, resourceName,
resourceNamespace; defaults as kube-scheduler's: on, 15s/10s/2s, leases, kube-scheduler in
kube-system). Everything else is accepted and ignored.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

API_VERSION = "kubescheduler.config.k8s.io/v1"
DEFAULT_EXTENDER_TIMEOUT = 5.0  # seconds, kube-scheduler's DefaultExtenderTimeout


class ConfigError(ValueError):
    """The configuration file is not usable; the message names the field and the fix."""


@dataclass(frozen=True)
class ManagedResource:
    name: str
    ignored_by_scheduler: bool = False


@dataclass(frozen=True)
class TLSConfig:
    insecure: bool = False
    server_name: str = ""
    ca_data: bytes = b""
    ca_file: str = ""
    cert_data: bytes = b""
    key_data: bytes = b""
    cert_file: str = ""
    key_file: str = ""

    @property
    def has_ca(self) -> bool:
        return bool(self.ca_data or self.ca_file)


@dataclass(frozen=True)
class ExtenderConfig:
    url_prefix: str
    filter_verb: str = ""
    bind_verb: str = ""
    prioritize_verb: str = ""
    weight: int = 0
    node_cache_capable: bool = False
    managed_resources: tuple[ManagedResource, ...] = ()
    http_timeout: float = DEFAULT_EXTENDER_TIMEOUT
    enable_https: bool = False
    tls: TLSConfig = field(default_factory=TLSConfig)
    ignorable: bool = False


@dataclass(frozen=True)
class LeaderElection:
    leader_elect: bool = True
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    resource_lock: str = "leases"
    resource_name: str = "kube-scheduler"
    resource_namespace: str = "kube-system"


@dataclass(frozen=True)
class SchedulerConfig:
    scheduler_names: tuple[str, ...] = ("default-scheduler",)
    extenders: tuple[ExtenderConfig, ...] = ()
    percentage_of_nodes_to_score: int = 0  # 0 = adaptive, as kube-scheduler
    initial_backoff: float = 1.0
    max_backoff: float = 10.0
    leader_election: LeaderElection = field(default_factory=LeaderElection)


_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: Any, where: str) -> float:
    """A Go duration string ("30s", "1m30s", "500ms") in seconds."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f'{where}: expected a duration string such as "30s", got {text!r}')
    s = text.strip()
    if s == "0":
        return 0.0
    pos, total = 0, 0.0
    for m in _DURATION_RE.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(s):
        raise ConfigError(f'{where}: {text!r} is not a duration: use forms like "500ms", "30s", "1m30s"')
    return total


def _bytes(value: Any, where: str) -> bytes:
    if not value:
        return b""
    try:
        return base64.b64decode(value, validate=True)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{where}: must be base64-encoded bytes ({exc})") from exc


def _tls(raw: Any, where: str) -> TLSConfig:
    if raw is None:
        return TLSConfig()
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: must be a mapping")
    return TLSConfig(
        insecure=bool(raw.get("insecure", False)),
        server_name=str(raw.get("serverName") or ""),
        ca_data=_bytes(raw.get("caData"), f"{where}.caData"),
        ca_file=str(raw.get("caFile") or ""),
        cert_data=_bytes(raw.get("certData"), f"{where}.certData"),
        key_data=_bytes(raw.get("keyData"), f"{where}.keyData"),
        cert_file=str(raw.get("certFile") or ""),
        key_file=str(raw.get("keyFile") or ""),
    )


def _extender(raw: Any, i: int) -> ExtenderConfig:
    where = f"extenders[{i}]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: must be a mapping")
    url = raw.get("urlPrefix")
    if not url or not isinstance(url, str):
        raise ConfigError(f"{where}.urlPrefix: required, e.g. https://127.0.0.1:443")
    managed = []
    for j, mr in enumerate(raw.get("managedResources") or []):
        if not isinstance(mr, dict) or not mr.get("name"):
            raise ConfigError(f"{where}.managedResources[{j}].name: required (an extended resource name)")
        managed.append(ManagedResource(str(mr["name"]), bool(mr.get("ignoredByScheduler", False))))
    timeout = raw.get("httpTimeout")
    http_timeout = parse_duration(timeout, f"{where}.httpTimeout") if timeout is not None else 0.0
    weight = int(raw.get("weight") or 0)
    if raw.get("prioritizeVerb") and weight <= 0:
        raise ConfigError(f"{where}.weight: must be positive when prioritizeVerb is set")
    return ExtenderConfig(
        url_prefix=url,
        filter_verb=str(raw.get("filterVerb") or ""),
        bind_verb=str(raw.get("bindVerb") or ""),
        prioritize_verb=str(raw.get("prioritizeVerb") or ""),
        weight=weight,
        node_cache_capable=bool(raw.get("nodeCacheCapable", False)),
        managed_resources=tuple(managed),
        http_timeout=http_timeout or DEFAULT_EXTENDER_TIMEOUT,
        enable_https=bool(raw.get("enableHTTPS", False)),
        tls=_tls(raw.get("tlsConfig"), f"{where}.tlsConfig"),
        ignorable=bool(raw.get("ignorable", False)),
    )


def _leader_election(raw: Any) -> LeaderElection:
    if raw is None:
        return LeaderElection()
    if not isinstance(raw, dict):
        raise ConfigError("leaderElection: must be a mapping")
    d = LeaderElection()

    def seconds(key: str, default: float) -> float:
        value = raw.get(key)
        return default if value is None else parse_duration(value, f"leaderElection.{key}")

    cfg = LeaderElection(
        leader_elect=bool(raw.get("leaderElect", d.leader_elect)),
        lease_duration=seconds("leaseDuration", d.lease_duration),
        renew_deadline=seconds("renewDeadline", d.renew_deadline),
        retry_period=seconds("retryPeriod", d.retry_period),
        resource_lock=str(raw.get("resourceLock") or d.resource_lock),
        resource_name=str(raw.get("resourceName") or d.resource_name),
        resource_namespace=str(raw.get("resourceNamespace") or d.resource_namespace),
    )
    if not cfg.leader_elect:
        return cfg
    if cfg.resource_lock != "leases":
        raise ConfigError(
            f'leaderElection.resourceLock: {cfg.resource_lock!r} is not supported; use "leases"'
        )
    # client-go's rules (leaderelection.NewLeaderElector)
    if not cfg.lease_duration > cfg.renew_deadline:
        raise ConfigError("leaderElection.leaseDuration: must be greater than renewDeadline")
    if not cfg.renew_deadline > 1.2 * cfg.retry_period:
        raise ConfigError("leaderElection.renewDeadline: must be greater than retryPeriod*1.2")
    if cfg.retry_period <= 0:
        raise ConfigError("leaderElection.retryPeriod: must be greater than zero")
    return cfg


def parse(doc: Any) -> SchedulerConfig:
    if not isinstance(doc, dict):
        raise ConfigError("the file must hold one KubeSchedulerConfiguration mapping")
    if doc.get("apiVersion") != API_VERSION or doc.get("kind") != "KubeSchedulerConfiguration":
        raise ConfigError(
            f"apiVersion/kind: expected {API_VERSION} KubeSchedulerConfiguration, got "
            f"{doc.get('apiVersion')!r} {doc.get('kind')!r}"
        )
    profiles = doc.get("profiles") or [{}]
    names = tuple(str((p or {}).get("schedulerName") or "default-scheduler") for p in profiles)
    if len(set(names)) != len(names):
        raise ConfigError(f"profiles[].schedulerName: names must be unique, got {list(names)}")
    extenders = tuple(_extender(raw, i) for i, raw in enumerate(doc.get("extenders") or []))
    if sum(1 for e in extenders if e.bind_verb) > 1:
        raise ConfigError("extenders[].bindVerb: only one extender can implement bind")
    seen: set[str] = set()
    for i, e in enumerate(extenders):
        for mr in e.managed_resources:
            if mr.name in seen:
                raise ConfigError(f"extenders[{i}].managedResources: duplicate resource name {mr.name!r}")
            seen.add(mr.name)
    pct = int(doc.get("percentageOfNodesToScore") or 0)
    if not 0 <= pct <= 100:
        raise ConfigError("percentageOfNodesToScore: must be between 0 and 100")
    return SchedulerConfig(
        scheduler_names=names,
        extenders=extenders,
        percentage_of_nodes_to_score=pct,
        initial_backoff=float(doc.get("podInitialBackoffSeconds") or 1),
        max_backoff=float(doc.get("podMaxBackoffSeconds") or 10),
        leader_election=_leader_election(doc.get("leaderElection")),
    )


def load(path: str | Path) -> SchedulerConfig:
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read the scheduler configuration: {exc}") from exc
    return parse(doc)
