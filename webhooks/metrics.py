"""Prometheus metrics of `dynmig serve`, in a registry the app owns (nothing registers at import).

HAMi-compatible (HAMi's scheduler, cmd/scheduler/metrics.go; same names, labels and the constant
`zone="vGPU"` HAMi's registry adds): per GPU `hami_gpu_memory_limit_bytes`,
`hami_gpu_memory_allocated_bytes`, `hami_gpu_core_limit_ratio`, `hami_gpu_core_allocated_ratio`,
`hami_gpu_shared_count`, `hami_node_gpu_overview`, `hami_node_gpu_memory_allocated_ratio`; per
container device `hami_vgpu_memory_allocated_bytes`, `hami_vgpu_core_allocated_ratio`; per realized
instance `hami_node_gpu_mig_instance_info`. "Allocated" is what the scheduler reserved: the memory
and cores of each reserved MIG profile, as HAMi counts a MIG pod's devices. dynmig's own: admission
decisions, filter and bind latency, memory slices (all, used, free) and the largest placeable
profile per GPU, pods pending by reason and how long the oldest has waited, each realized instance
with its pod (`dynmig_mig_instance_info`, for joins with DCGM exporter's per-instance series), MIG
pods' time to Running, whether this replica leads, events dropped; and the process's
`process_*`/`python_*`.
The per-GPU and per-reservation series are computed at scrape time from the fleet the scheduler
decides on (`Fleet.view`, sampled by `sample`), so they can never drift from it.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily

from base.process_metrics import register_process_collectors
from base.version import register_build_info
from mig.annotations import MigAllocation
from mig.placement import GpuState
from mig.reconstruct import PodUsage
from webhooks.fleet import FleetView

MIB = 1024 * 1024
HAMI_ZONE = ("zone", "vGPU")  # HAMi's scheduler wraps its registry with this constant label
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
# dynmig_mig_instance_info: a realized MIG instance and the pod it serves, the labels a join with
# DCGM exporter's per-instance series (Hostname, UUID, GPU_I_ID) needs
OWNER_LABELS = (
    "node",
    "gpu_uuid",
    "gpu_instance_id",
    "compute_instance_id",
    "profile",
    "mig_uuid",
    "namespace",
    "pod",
)
_START_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


@dataclass(frozen=True)
class GpuSample:
    node: str
    uuid: str
    index: int
    free_slices: int
    largest_profile: str  # "" when nothing is placeable
    largest_memory_mb: int
    slices: int = 0  # memory slices of the GPU (the placement axis)
    type: str = ""  # the published device type, e.g. "NVIDIA-NVIDIA A100-SXM4-40GB"
    memory_mb: int = 0  # published total memory (devmem)
    cores: int = 100  # published core capacity (devcore; dynmig's plugin publishes 100, as HAMi's)
    allocated_mb: int = 0  # memory of the reserved profiles
    allocated_cores: int = 0
    shared: int = 0  # reserved MIG devices on this GPU


@dataclass(frozen=True)
class DeviceSample:
    """One container's reserved MIG devices on one GPU (HAMi's per-container series)."""

    namespace: str
    node: str
    pod: str
    container_index: int
    uuid: str
    memory_mb: int
    cores: int


@dataclass(frozen=True)
class Snapshot:
    """What the cache exposes at scrape time."""

    instances: tuple[tuple[str, ...], ...] = ()  # label values in MIG_INSTANCE_LABELS order
    gpus: tuple[GpuSample, ...] = ()
    refused: tuple[tuple[str, int], ...] = ()  # (reason code, pods the filter refused): dynmig_pods_pending
    cache_synced: bool = False
    devices: tuple[DeviceSample, ...] = ()
    waited: tuple[tuple[str, float], ...] = ()  # (reason code, seconds the longest-refused pod waited)
    owners: tuple[tuple[str, ...], ...] = ()  # label values in OWNER_LABELS order


def sample(view: FleetView) -> Snapshot:
    """What the metrics show of the fleet now: per GPU its slices and what its reservations hold,
    per container its devices, per realized instance its identity and pod, and the refused pods."""
    instances: list[tuple[str, ...]] = []
    owners: list[tuple[str, ...]] = []
    gpus: list[GpuSample] = []
    devices: list[DeviceSample] = []
    for occ in view.occupancies:
        for g in occ.gpus:
            holders = occ.holders.get(g.uuid, ())
            realized = [(u, a) for u, a in holders if a.runtime_ready]
            instances.extend(_instance_labels(occ.node, g, a) for _u, a in realized)
            owners.extend(_owner_labels(occ.node, u, a) for u, a in realized)
            gpus.append(_gpu_sample(g, holders))
            devices.extend(_device_samples(occ.node, g, holders))
    refused = tuple(sorted(Tally(reason for reason, _since in view.refused).items()))
    return Snapshot(
        tuple(instances),
        tuple(gpus),
        refused,
        view.synced,
        tuple(devices),
        _waited(view),
        tuple(owners),
    )


def _waited(view: FleetView) -> tuple[tuple[str, float], ...]:
    """(reason, seconds) of the longest-waiting refused pod of each reason: since the filter
    first refused it, under whatever reason it has now."""
    oldest: dict[str, float] = {}
    for reason, since in view.refused:
        oldest[reason] = max(oldest.get(reason, 0.0), view.now - since)
    return tuple(sorted(oldest.items()))


Holders = tuple[tuple[PodUsage, MigAllocation], ...]


def _instance_labels(node: str, g: GpuState, a: MigAllocation) -> tuple[str, ...]:
    """hami_node_gpu_mig_instance_info's label values for a realized reservation."""
    return (
        node,
        a.gpuUUID,
        str(g.index),
        a.migUUID or "",
        a.profile,
        str(a.gpuInstanceID),
        str(a.computeInstanceID),
        str(a.placement.start),
        str(a.placement.size),
    )


def _owner_labels(node: str, u: PodUsage, a: MigAllocation) -> tuple[str, ...]:
    """dynmig_mig_instance_info's label values (OWNER_LABELS) for a realized reservation: the
    instance and the pod it serves."""
    return (
        node,
        a.gpuUUID,
        str(a.gpuInstanceID),
        str(a.computeInstanceID),
        a.profile,
        a.migUUID or "",
        u.namespace,
        u.name,
    )


def _profile_sizes(g: GpuState, a: MigAllocation) -> tuple[int, int]:
    """(memory MiB, cores) of a reservation's profile as the GPU publishes it; (0, 0) if it no longer
    publishes that profile."""
    found = next((p for p in g.profiles if p.name == a.profile), None)
    return (found.memory_mb, found.core) if found else (0, 0)


def _gpu_sample(g: GpuState, holders: Holders = ()) -> GpuSample:
    axis = max((p.end for pr in g.profiles for p in pr.placements), default=0)
    mask = g.occupied_mask
    free = sum(1 for i in range(axis) if not mask >> i & 1)
    best = ("", 0)
    if g.healthy and not g.cordoned:
        for pr in g.profiles:
            if pr.memory_mb > best[1] and any(p.size and not p.mask & mask for p in pr.placements):
                best = (pr.name, pr.memory_mb)
    sizes = [_profile_sizes(g, a) for _u, a in holders]
    return GpuSample(
        g.node,
        g.uuid,
        g.index,
        free,
        best[0],
        best[1],
        slices=axis,
        type=g.type,
        memory_mb=g.memory_mb,
        allocated_mb=sum(m for m, _ in sizes),
        allocated_cores=sum(c for _, c in sizes),
        shared=len(holders),
    )


def _device_samples(node: str, g: GpuState, holders: Holders) -> list[DeviceSample]:
    """Per container of each pod, what its reservations on this GPU hold (summed: HAMi's series has
    one sample per container and GPU)."""
    summed: dict[tuple[str, str, int], list[int]] = {}
    for usage, a in holders:
        memory, cores = _profile_sizes(g, a)
        acc = summed.setdefault((usage.namespace, usage.name, a.containerIndex), [0, 0])
        acc[0] += memory
        acc[1] += cores
    return [
        DeviceSample(ns, node, pod, index, g.uuid, memory, cores)
        for (ns, pod, index), (memory, cores) in sorted(summed.items())
    ]


def _hami(name: str, help_text: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help_text, labels=[*labels, HAMI_ZONE[0]])


GPU_LABELS = ["node", "device_uuid", "device_index"]
HAMI_GPU_LABELS = ["node", "device_uuid", "device_index", "device_type"]


class _StateCollector:
    def __init__(self, fleet: Callable[[], FleetView]):
        self._fleet = fleet

    def collect(self) -> Iterable[GaugeMetricFamily]:
        snap = sample(self._fleet())
        yield from _hami_families(snap)
        yield from _gpu_families(snap.gpus)
        pending = GaugeMetricFamily(
            "dynmig_pods_pending", "MIG pods the extender could not place, by reason", labels=["reason"]
        )
        for reason, count in snap.refused:
            pending.add_metric([reason], count)
        yield pending
        oldest = GaugeMetricFamily(
            "dynmig_pods_pending_oldest_seconds",
            "How long the longest-waiting MIG pod of each reason has waited since the extender first refused it",
            labels=["reason"],
        )
        for reason, seconds in snap.waited:
            oldest.add_metric([reason], seconds)
        yield oldest
        owners = GaugeMetricFamily(
            "dynmig_mig_instance_info",
            "1 per realized MIG instance, with the pod it serves",
            labels=list(OWNER_LABELS),
        )
        for values in snap.owners:
            owners.add_metric(list(values), 1)
        yield owners
        synced = GaugeMetricFamily("dynmig_cache_synced", "1 once the node and pod caches are synced")
        synced.add_metric([], 1 if snap.cache_synced else 0)
        yield synced


def _gpu_families(gpus: Iterable[GpuSample]) -> Iterable[GaugeMetricFamily]:
    total = GaugeMetricFamily("dynmig_gpu_slices", "Memory slices of each MIG GPU", labels=GPU_LABELS)
    used = GaugeMetricFamily(
        "dynmig_gpu_used_slices",
        "Memory slices held by reservations or by instances no reservation covers, per MIG GPU",
        labels=GPU_LABELS,
    )
    free = GaugeMetricFamily("dynmig_gpu_free_slices", "Free memory slices per MIG GPU", labels=GPU_LABELS)
    largest = GaugeMetricFamily(
        "dynmig_gpu_largest_placeable_profile_memory_bytes",
        "Memory of the largest profile that still has a free placement "
        "(0 when none); the profile name is a label",
        labels=[*GPU_LABELS, "profile"],
    )
    for g in gpus:
        labels = [g.node, g.uuid, str(g.index)]
        total.add_metric(labels, g.slices)
        used.add_metric(labels, g.slices - g.free_slices)
        free.add_metric(labels, g.free_slices)
        largest.add_metric([*labels, g.largest_profile], g.largest_memory_mb * MIB)
    return (total, used, free, largest)


def _hami_families(snap: Snapshot) -> Iterable[GaugeMetricFamily]:
    zone = HAMI_ZONE[1]
    info = _hami(
        "hami_node_gpu_mig_instance_info",
        "Realized MIG instance identity and scheduler placement",
        list(MIG_INSTANCE_LABELS),
    )
    for values in snap.instances:
        info.add_metric([*values, zone], 1)
    limit = _hami("hami_gpu_memory_limit_bytes", "Device memory limit for a certain GPU", HAMI_GPU_LABELS)
    core_limit = _hami("hami_gpu_core_limit_ratio", "Device core limit for a certain GPU", HAMI_GPU_LABELS)
    allocated = _hami(
        "hami_gpu_memory_allocated_bytes",
        "Device memory allocated for a certain GPU",
        ["node", "device_uuid", "device_index", "device_cores", "device_type"],
    )
    shared = _hami("hami_gpu_shared_count", "Number of containers sharing this GPU", HAMI_GPU_LABELS)
    core_allocated = _hami(
        "hami_gpu_core_allocated_ratio", "Device core allocated for a certain GPU", HAMI_GPU_LABELS
    )
    overview = _hami(
        "hami_node_gpu_overview",
        "GPU overview on a certain node",
        ["node", "device_uuid", "device_index", "device_cores", "device_memory_limit", "device_type"],
    )
    ratio = _hami(
        "hami_node_gpu_memory_allocated_ratio",
        "GPU Memory Allocated Percentage on a certain GPU",
        HAMI_GPU_LABELS,
    )
    for g in snap.gpus:
        base = [g.node, g.uuid, str(g.index)]
        limit.add_metric([*base, g.type, zone], g.memory_mb * MIB)
        core_limit.add_metric([*base, g.type, zone], g.cores)
        allocated.add_metric([*base, str(g.cores), g.type, zone], g.allocated_mb * MIB)
        shared.add_metric([*base, g.type, zone], g.shared)
        core_allocated.add_metric([*base, g.type, zone], g.allocated_cores)
        overview.add_metric([*base, str(g.cores), str(g.memory_mb), g.type, zone], g.allocated_mb * MIB)
        if g.memory_mb > 0:
            ratio.add_metric([*base, g.type, zone], g.allocated_mb / g.memory_mb)
    container = ["namespace", "node", "pod", "container_index", "device_uuid"]
    vgpu_memory = _hami(
        "hami_vgpu_memory_allocated_bytes", "vGPU memory allocated from a container", container
    )
    vgpu_cores = _hami("hami_vgpu_core_allocated_ratio", "vGPU core allocated from a container", container)
    for d in snap.devices:
        labels = [d.namespace, d.node, d.pod, str(d.container_index), d.uuid, zone]
        vgpu_memory.add_metric(labels, d.memory_mb * MIB)
        vgpu_cores.add_metric(labels, d.cores)
    return (
        info,
        limit,
        core_limit,
        allocated,
        shared,
        core_allocated,
        overview,
        ratio,
        vgpu_memory,
        vgpu_cores,
    )


class Metrics:
    """All of the server's metrics in one registry (one per app, so tests can build many apps)."""

    def __init__(self, fleet: Callable[[], FleetView] | None = None):
        """`fleet`: the fleet now (`Fleet.view`), sampled at every scrape; None: no fleet series."""
        self.registry = CollectorRegistry(auto_describe=False)
        register_build_info(self.registry, "serve")
        register_process_collectors(self.registry)
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
        self.time_to_running = Histogram(
            "dynmig_pod_time_to_running_seconds",
            "From a MIG pod's creation to its containers running (their latest startedAt)",
            buckets=_START_BUCKETS,
            registry=self.registry,
        )
        if fleet is not None:
            self.registry.register(_StateCollector(fleet))

    def follow_leader(self, is_leader: Callable[[], bool]) -> None:
        """`dynmig_leader`: 1 while this replica filters and binds (read at scrape time)."""
        leader = Gauge(
            "dynmig_leader",
            "1 while this replica leads: its kube-scheduler holds the Lease, so it filters and binds",
            registry=self.registry,
        )
        leader.set_function(lambda: 1.0 if is_leader() else 0.0)

    def event_dropped(self, reason: str) -> None:
        self.events_dropped.labels(reason).inc()
