"""What the scheduler hands the placement engine: GPUs as published, and a pod's request.

The scheduler builds these from node annotations (`hami.io/node-nvidia-register`) and the
reservations of active pods (`hami.io/vgpu-mig-allocations`); the engine never reads the cluster
itself, so it stays pure and is tested as a table of cases.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mig.allowlist import ResourceNames
from mig.annotations import (
    GPU_SCHEDULER_POLICY,
    NODE_SCHEDULER_POLICY,
    NOUSE_GPU_TYPE,
    NOUSE_GPU_UUID,
    PROFILE_PREFERENCE,
    USE_GPU_TYPE,
    USE_GPU_UUID,
)
from mig.quantity import QuantityError, parse_quantity
from mig.types import Placement

# The scheduling annotations a pod may carry (bounded by `annotation_problem`).
SCHEDULING_ANNOTATIONS = (
    PROFILE_PREFERENCE,
    NODE_SCHEDULER_POLICY,
    GPU_SCHEDULER_POLICY,
    USE_GPU_UUID,
    NOUSE_GPU_UUID,
    USE_GPU_TYPE,
    NOUSE_GPU_TYPE,
)

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
    memory_mb: int = 0  # total memory as published (`devmem`); sizes gpumem-percentage requests
    cordoned: str = ""  # why no new reservation may land here (an operator's cordon); "" = open

    @property
    def occupied_mask(self) -> int:
        mask = 0
        for p in self.occupied:
            if p.size > 0:  # zero-size placements are ignored, as HAMi does
                mask |= p.mask
        return mask


@dataclass(frozen=True)
class Percent:
    """A share of the candidate GPU's total memory (`nvidia.com/gpumem-percentage`, 1..99)."""

    value: int

    def __str__(self) -> str:
        return f"{self.value}% of GPU memory"


# One device's memory ask: MiB, a share of the GPU's memory, or None for a whole GPU.
Memory = int | Percent | None
UNSIZABLE = 1 << 62  # a percentage of a GPU that publishes no total memory: no profile covers it


MIB = 1024 * 1024


def counts_mib(name: str, raw: str, value: int) -> str:
    """For a memory count beyond any MiB count (most likely written in bytes, `8Gi`), the sentence
    that says so, `nvidia.com/gpumem counts MiB: 8Gi is 8192`; "" for a count that can be MiB."""
    if value <= INT32_MAX:
        return ""
    return f"{name} counts MiB: {raw} is {bytes_in_mib(value)}"


def bytes_in_mib(value: int) -> int:
    return -(-value // MIB)


def memory_on(ask: Memory, total_mb: int) -> int | None:
    """The MiB an ask needs on a GPU of `total_mb` total memory (None: a whole GPU), as HAMi sizes it."""
    if isinstance(ask, Percent):
        return total_mb * ask.value // 100 if total_mb > 0 else UNSIZABLE
    return ask


@dataclass(frozen=True)
class ContainerRequest:
    """One container's GPU request: `nvidia.com/gpu` devices of at least `memory_mib` each.

    `memory_mib=None` (no `nvidia.com/gpumem`) asks for a whole GPU: the largest published profile,
    unless `memory_percent` (1..99) asks for that share of each candidate GPU's total memory.
    """

    devices: int
    memory_mib: int | None = None
    memory_percent: int | None = None

    @property
    def memory(self) -> Memory:
        if self.memory_mib is not None:
            return self.memory_mib
        return Percent(self.memory_percent) if self.memory_percent else None


class RequestError(ValueError):
    """A container's GPU resources cannot be read; the message names the container and the resource."""


def devices_problem(containers: Iterable[ContainerRequest], resource: str = "nvidia.com/gpu") -> str:
    """Why the pod's devices together can never be placed (more than MAX_DEVICES), or ""."""
    total = sum(c.devices for c in containers)
    if total > MAX_DEVICES:
        return (
            f"the pod's containers ask for {total} {resource} devices together, more than {MAX_DEVICES}, "
            "the most dynmig places for one pod"
        )
    return ""


INT32_MAX = (1 << 31) - 1
# No node has more MIG instances than this (16 GPUs × 7 instances = 112), so a request beyond it can
# never be placed; refusing it up front keeps a pod asking for 10^8 devices from costing memory.
MAX_DEVICES = 128


# quantity text -> (its exact integer value, None when not whole), for texts read before
_WHOLE: dict[str, tuple[int | None]] = {}
_WHOLE_MEMO, _WHOLE_TEXT = 1024, 32


def _resource(container: str, resource: str, value: Any) -> int:
    """A resource value as an exact non-negative integer (HAMi reads them with Quantity.AsInt64)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise RequestError(
            f'container {container}: {resource} must be a quantity string such as "1" or '
            f'"8k", not {type(value).__name__}'
        )
    text = value if isinstance(value, str) else str(value)
    read = _WHOLE.get(text)
    if read is None:
        try:
            read = (parse_quantity(text).as_int64(),)
        except QuantityError as error:
            raise RequestError(f"container {container}: {resource}: {error}") from None
        if len(text) <= _WHOLE_TEXT:  # short texts only: a pod's values repeat, and stay bounded
            if len(_WHOLE) >= _WHOLE_MEMO:
                _WHOLE.clear()
            _WHOLE[text] = read
    number = read[0]
    if number is None:
        raise RequestError(f"container {container}: {resource} {str(value)[:40]!r} is not a whole number")
    if number < 0:
        raise RequestError(f"container {container}: {resource} must not be negative")
    return number


def _first(kinds: tuple[Mapping[str, Any], Mapping[str, Any]], resource: str) -> Any:
    """The limit, else the request (HAMi's order)."""
    for kind in kinds:
        if resource in kind:
            return kind[resource]
    return None


def container_request(
    container: str, limits: Mapping[str, Any], requests: Mapping[str, Any], names: ResourceNames
) -> ContainerRequest:
    """A container's request from its resources, combined as HAMi combines them.

    `gpumem` (MiB, above 0) wins; otherwise `gpumem-percentage` 1..99 asks for that share of each
    candidate GPU's memory; otherwise (absent, 0 or 100) the device is a whole GPU.
    """
    kinds = (limits, requests)
    raw = {r: _first(kinds, r) for r in (names.count, names.memory, names.memory_percentage)}
    count, memory, percent = (None if v is None else _resource(container, r, v) for r, v in raw.items())
    if memory is not None and memory > INT32_MAX:
        raise RequestError(f"container {container}: {names.memory} {memory} MiB is beyond {INT32_MAX}")
    if percent is not None and percent > 100:
        raise RequestError(
            f"container {container}: {names.memory_percentage} {percent} must be an integer between 0 and 100"
        )
    if not count:
        return ContainerRequest(0)
    if count > MAX_DEVICES:
        raise RequestError(
            f"container {container}: {names.count} {count} is more than {MAX_DEVICES} devices, "
            f"the most dynmig places for one pod (no node has more MIG instances)"
        )
    if memory:
        return ContainerRequest(count, memory)
    return ContainerRequest(count, None, percent if percent and percent < 100 else None)


def _split(value: str | None) -> tuple[str, ...]:
    """A comma list, trimmed, empties and duplicates dropped, order kept (linear in its length)."""
    if not value:  # most scheduling annotations are absent
        return ()
    return tuple(dict.fromkeys(p for p in (part.strip() for part in value.split(",")) if p))


MAX_ANNOTATION_TEXT = 4096  # ~100 GPU UUIDs; far more than any preference or policy needs


def annotation_problem(annotations: Mapping[str, str] | None) -> str:
    """Why one of the scheduling annotations dynmig reads is unusable (too long), or ""."""
    for key in SCHEDULING_ANNOTATIONS:
        value = (annotations or {}).get(key)
        if value is not None and len(value) > MAX_ANNOTATION_TEXT:
            return (
                f"annotation {key} is {len(value)} characters; the limit is {MAX_ANNOTATION_TEXT} "
                "(list fewer entries)"
            )
    return ""


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
        cls,
        containers: Iterable[ContainerRequest],
        annotations: Mapping[str, str] | None = None,
        name: str = "",
    ) -> PodRequest:
        a = annotations or {}
        return cls(
            containers=tuple(containers),
            preference=_split(a.get(PROFILE_PREFERENCE)),
            node_policy=_policy(a.get(NODE_SCHEDULER_POLICY), DEFAULT_NODE_POLICY),
            gpu_policy=_policy(a.get(GPU_SCHEDULER_POLICY), DEFAULT_GPU_POLICY),
            use_uuids=_split(a.get(USE_GPU_UUID)),
            nouse_uuids=_split(a.get(NOUSE_GPU_UUID)),
            use_types=tuple(t.lower() for t in _split(a.get(USE_GPU_TYPE))),
            nouse_types=tuple(t.lower() for t in _split(a.get(NOUSE_GPU_TYPE))),
            name=name,
        )

    @property
    def device_count(self) -> int:
        return sum(c.devices for c in self.containers)

    def devices(self) -> list[tuple[int, int, Memory]]:
        """Every requested device as (containerIndex, deviceIndex, memory ask)."""
        return [(ci, di, c.memory) for ci, c in enumerate(self.containers) for di in range(c.devices)]

    def type_exclusion(self, gpu_type: str) -> str | None:
        """Which annotation excludes a GPU of this NVML type, or None (case-insensitive substring)."""
        low = gpu_type.lower()
        if self.use_types and not any(t in low for t in self.use_types):
            return f"{USE_GPU_TYPE}={','.join(self.use_types)} does not match type {gpu_type!r}"
        hit = next((t for t in self.nouse_types if t in low), None)
        if hit is not None:
            return f"{NOUSE_GPU_TYPE} lists {hit!r}, which matches type {gpu_type!r}"
        return None

    def uuid_exclusion(self, uuid: str) -> str | None:
        """Which annotation excludes this GPU UUID, or None (exact match)."""
        if self.use_uuids and uuid not in self.use_uuids:
            return f"{USE_GPU_UUID} does not list this GPU"
        if uuid in self.nouse_uuids:
            return f"{NOUSE_GPU_UUID} lists this GPU"
        return None
