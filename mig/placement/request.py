"""What the scheduler hands the placement engine: GPUs as published, and a pod's request.

The scheduler builds these from node annotations (`hami.io/node-nvidia-register`) and the
reservations of active pods (`hami.io/vgpu-mig-allocations`); the engine never reads the cluster
itself, so it stays pure and is tested as a table of cases.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from mig.types import Placement

PREFERENCE = "nvidia.com/mig-profile-preference"
NODE_POLICY = "hami.io/node-scheduler-policy"
GPU_POLICY = "hami.io/gpu-scheduler-policy"
USE_UUID = "nvidia.com/use-gpuuuid"
NOUSE_UUID = "nvidia.com/nouse-gpuuuid"
USE_TYPE = "nvidia.com/use-gputype"
NOUSE_TYPE = "nvidia.com/nouse-gputype"

BINPACK, SPREAD = "binpack", "spread"
DEFAULT_NODE_POLICY = BINPACK
# HAMi defaults the GPU policy to spread; we default to binpack because the fragmentation score
# already keeps large profiles placeable, and packing partially used GPUs keeps whole GPUs free.
DEFAULT_GPU_POLICY = BINPACK


@dataclass(frozen=True)
class PublishedProfile:
    """One MIG profile as a node publishes it (HAMi's MigProfile shape)."""

    name: str
    memory_mb: int
    core: int
    slice_count: int
    placements: tuple[Placement, ...]

    @property
    def slice_key(self) -> str:
        """Text before the first '.', e.g. '1g' for '1g.10gb+me' (what a preference entry may name)."""
        return self.name.split(".", 1)[0]

    @property
    def size(self) -> int:
        """Placement size on the memory-slice axis (not sliceCount)."""
        return max((p.size for p in self.placements), default=0)


@dataclass(frozen=True)
class GpuState:
    """One GPU of one node: what its node published and which placements reservations hold.

    `index` orders GPUs within a node (the order of the node annotation); it is the "GPU order"
    tie-break. `occupied` may hold placements of profiles that are no longer published.
    """

    node: str
    uuid: str
    type: str
    profiles: tuple[PublishedProfile, ...]
    occupied: tuple[Placement, ...] = ()
    healthy: bool = True
    index: int = 0

    @property
    def occupied_mask(self) -> int:
        mask = 0
        for p in self.occupied:
            if p.size > 0:  # zero-size placements are ignored, as HAMi does
                mask |= p.mask
        return mask


@dataclass(frozen=True)
class ContainerRequest:
    """One container's GPU request: `nvidia.com/gpu` devices of at least `memory_mib` each.

    `memory_mib=None` (no `nvidia.com/gpumem`) asks for a whole GPU: the largest published profile.
    """

    devices: int
    memory_mib: int | None = None


def _split(value: str | None) -> tuple[str, ...]:
    """A comma list, trimmed, empties and duplicates dropped, order kept."""
    out: list[str] = []
    for part in (value or "").split(","):
        part = part.strip()
        if part and part not in out:
            out.append(part)
    return tuple(out)


def _policy(value: str | None, default: str) -> str:
    """The first known key of a (possibly chained) policy value; unknown keys fall back to the default."""
    for key in _split((value or "").lower()):
        if key in (BINPACK, SPREAD):
            return key
    return default


@dataclass(frozen=True)
class PodRequest:
    """A pod's GPU request: containers in HAMi order (init containers first) plus its annotations.

    Build it with `PodRequest.from_annotations` so annotation strings are parsed one way everywhere.
    """

    containers: tuple[ContainerRequest, ...]
    preference: tuple[str, ...] = ()
    node_policy: str = DEFAULT_NODE_POLICY
    gpu_policy: str = DEFAULT_GPU_POLICY
    use_uuids: tuple[str, ...] = ()
    nouse_uuids: tuple[str, ...] = ()
    use_types: tuple[str, ...] = ()
    nouse_types: tuple[str, ...] = ()
    name: str = field(default="", compare=False)

    @classmethod
    def from_annotations(
        cls, containers: Iterable[ContainerRequest], annotations: Mapping[str, str] | None = None,
        name: str = "",
    ) -> PodRequest:
        a = annotations or {}
        return cls(
            containers=tuple(containers),
            preference=_split(a.get(PREFERENCE)),
            node_policy=_policy(a.get(NODE_POLICY), DEFAULT_NODE_POLICY),
            gpu_policy=_policy(a.get(GPU_POLICY), DEFAULT_GPU_POLICY),
            use_uuids=_split(a.get(USE_UUID)),
            nouse_uuids=_split(a.get(NOUSE_UUID)),
            use_types=tuple(t.lower() for t in _split(a.get(USE_TYPE))),
            nouse_types=tuple(t.lower() for t in _split(a.get(NOUSE_TYPE))),
            name=name,
        )

    @property
    def device_count(self) -> int:
        return sum(c.devices for c in self.containers)

    def devices(self) -> list[tuple[int, int, int | None]]:
        """Every requested device as (containerIndex, deviceIndex, memory MiB or None)."""
        return [(ci, di, c.memory_mib) for ci, c in enumerate(self.containers) for di in range(c.devices)]

    def type_exclusion(self, gpu_type: str) -> str | None:
        """Which annotation excludes a GPU of this NVML type, or None (case-insensitive substring)."""
        low = gpu_type.lower()
        if self.use_types and not any(t in low for t in self.use_types):
            return f"{USE_TYPE}={','.join(self.use_types)} does not match type {gpu_type!r}"
        hit = next((t for t in self.nouse_types if t in low), None)
        if hit is not None:
            return f"{NOUSE_TYPE} lists {hit!r}, which matches type {gpu_type!r}"
        return None

    def uuid_exclusion(self, uuid: str) -> str | None:
        """Which annotation excludes this GPU UUID, or None (exact match)."""
        if self.use_uuids and uuid not in self.use_uuids:
            return f"{USE_UUID} does not list {uuid}"
        if uuid in self.nouse_uuids:
            return f"{NOUSE_UUID} lists {uuid}"
        return None
