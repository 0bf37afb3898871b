"""Prometheus metrics of `dynmig serve`, in a registry the app owns (nothing registers at import).

HAMi-compatible: `hami_node_gpu_mig_instance_info` with exactly HAMi's labels, one sample per
realized (runtime-ready) reservation on a MIG GPU. dynmig's own: admission decisions, filter and
bind latency, free slices and the largest placeable profile per GPU, pods pending by reason.
The per-GPU and per-reservation series are computed at scrape time from the cache (a collector),
so they can never drift from what the scheduler decides on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily

from dynmig.version import register_build_info

MIG_INSTANCE_LABELS = (
    "node",
    "device_uuid",
    "device_index",
    "mig_uuid",
    "profile",
    "gpu_instance_id",
    "compute_instance_id",
    "placement_start",
    "placement_size",
)
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


@dataclass(frozen=True)
class GpuSample:
    node: str
    uuid: str
    index: int
    free_slices: int
    largest_profile: str  # "" when nothing is placeable
    largest_memory_mb: int


@dataclass(frozen=True)
class Snapshot:
    """What the cache exposes at scrape time."""

    instances: tuple[tuple[str, ...], ...] = ()  # label values in MIG_INSTANCE_LABELS order
    gpus: tuple[GpuSample, ...] = ()
    pending: tuple[tuple[str, int], ...] = ()  # (reason code, pods)
    cache_synced: bool = False


class _StateCollector:
    def __init__(self, snapshot: Callable[[], Snapshot]):
        self._snapshot = snapshot

    def collect(self) -> Iterable[GaugeMetricFamily]:
        snap = self._snapshot()
        info = GaugeMetricFamily(
            "hami_node_gpu_mig_instance_info",
            "Realized MIG instance identity and scheduler placement",
            labels=list(MIG_INSTANCE_LABELS),
        )
        for values in snap.instances:
            info.add_metric(list(values), 1)
        yield info
        free = GaugeMetricFamily(
            "dynmig_gpu_free_slices",
            "Free memory slices per MIG GPU",
            labels=["node", "device_uuid", "device_index"],
        )
        largest = GaugeMetricFamily(
            "dynmig_gpu_largest_placeable_profile_memory_mb",
            "Memory of the largest profile that still has a free placement "
            "(0 when none); the profile name is a label",
            labels=["node", "device_uuid", "device_index", "profile"],
        )
        for g in snap.gpus:
            free.add_metric([g.node, g.uuid, str(g.index)], g.free_slices)
            largest.add_metric([g.node, g.uuid, str(g.index), g.largest_profile], g.largest_memory_mb)
        yield free
        yield largest
        pending = GaugeMetricFamily(
            "dynmig_pods_pending", "GPU pods the extender could not place, by reason", labels=["reason"]
        )
        for reason, count in snap.pending:
            pending.add_metric([reason], count)
        yield pending
        synced = GaugeMetricFamily("dynmig_cache_synced", "1 once the node and pod caches are synced")
        synced.add_metric([], 1 if snap.cache_synced else 0)
        yield synced


class Metrics:
    """All of the server's metrics in one registry (one per app, so tests can build many apps)."""

    def __init__(self, snapshot: Callable[[], Snapshot] | None = None):
        self.registry = CollectorRegistry(auto_describe=False)
        register_build_info(self.registry, "serve")
        self.admission = Counter(
            "dynmig_admission_decisions",
            "Admission decisions by route and result",
            ["route", "result"],
            registry=self.registry,
        )
        self.admission_latency = Histogram(
            "dynmig_admission_duration_seconds",
            "Admission handling time",
            ["route"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.filter_latency = Histogram(
            "dynmig_filter_duration_seconds",
            "Extender filter handling time",
            ["result"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.bind_latency = Histogram(
            "dynmig_bind_duration_seconds",
            "Extender bind handling time",
            ["result"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.fail_closed = Counter(
            "dynmig_occupancy_fail_closed",
            "GPUs marked unschedulable because their reservations could not be trusted",
            ["reason"],
            registry=self.registry,
        )
        self.events_dropped = Counter(
            "dynmig_events_dropped",
            "Kubernetes Events not posted (queue full, or the API server refused or was unreachable)",
            ["reason"],
            registry=self.registry,
        )
        if snapshot is not None:
            self.registry.register(_StateCollector(snapshot))

    def event_dropped(self, reason: str) -> None:
        self.events_dropped.labels(reason).inc()
