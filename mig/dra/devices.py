"""DRA devices of one MIG GPU, named, counted and ordered as NVIDIA's DRA driver publishes them.

What NVIDIA's driver (kubernetes-sigs/dra-driver-nvidia-gpu, `DynamicMIG` gate) publishes for a GPU,
read in its `cmd/gpu-kubelet-plugin/{mig.go,partitions.go,nvlib.go,driver.go}`:

- one abstract device per GI profile × legal placement, named by `MigSpecTuple.ToCanonicalName`:
  `gpu-<minor>-mig-<profile>-<profileID>-<start>`, the profile name lower-cased with its dots dropped
  and any other character outside `[a-z0-9-]` turned into `-` (`toRFC1123Compliant`), so `1g.5gb+me`
  is `1g5gb-me`;
- one counter set per GPU, `gpu-<minor>-counter-set` (`GetSharedCounterSetName`), holding one counter
  per capacity dimension at the largest value any profile of the GPU has (`inspectMigProfilesAndPlacements`
  takes the maximum per dimension over every profile and placement; names camelCase → dash-case by
  `camelToDNSName`) and one counter `memory-slice-<i>` of value 1 per memory slice, the axis being the
  largest placement size;
- each device consumes, from its GPU's set, its own capacities and `memory-slice-<i>` for every
  slice of its placement (`MigSpec.PartConsumesCounters`, `addCountersForMemSlices`);
- attributes `type` ("mig"), `parentUUID`, `profile`, `productName` (`CommonAttributesMig`; the
  driver also publishes brand, architecture and driver versions, which a simulation does not need)
  and capacities `multiprocessors`, `copyEngines`, `decoders`, `encoders`, `jpegEngines`,
  `ofaEngines`, `memory` in bytes (`CommonCapacitiesMig`);
- within a GPU's slice, devices sorted by name (`slices.Sorted(maps.Keys(allocatable))` in
  `generateSplitResourceSlices`), which `ToCanonicalName`'s comment says the scheduler relies on:
  it "iterates through devices from top to bottom and picks the first match".

dynmig publishes the same devices (same names, counters and attributes, so a claim written for one
works on the other) but only for the profiles its allowlist allows, and adds two attributes a CEL
selector may use: `placementStart` and `placementSize`, and one counter, `slices` (the GPU's compute
slices in its set, the profile's in each device's consumption), which quota tools that count
partitionable devices by a named counter (Kueue's counter sources) can charge in MIG slices. The
driver also announces the full GPU (`gpu-<minor>`) where MIG mode can be toggled; it is not a MIG
device and is left out here.

Pure: the facts come from the catalog (`mig.catalog.GpuModel`), the occupancy from the caller.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mig.catalog import GpuModel, ProfileSpec
from mig.resolve import on_model
from mig.types import Placement

MIB = 1024 * 1024

# (capacity name, its counter name): CommonCapacitiesMig's keys and camelToDNSName of each
CAPACITIES: tuple[tuple[str, str], ...] = (
    ("multiprocessors", "multiprocessors"),
    ("copyEngines", "copy-engines"),
    ("decoders", "decoders"),
    ("encoders", "encoders"),
    ("jpegEngines", "jpeg-engines"),
    ("ofaEngines", "ofa-engines"),
    ("memory", "memory"),
)


def _rfc1123(text: str) -> str:
    """toRFC1123Compliant: lower case, every character outside [a-z0-9-.] to '-', '-' trimmed."""
    return re.sub(r"[^a-z0-9.-]", "-", text.lower()).strip("-").removesuffix(".")[:253]


def device_name(minor: int, profile: str, profile_id: int, start: int) -> str:
    """`gpu-<minor>-mig-<profile>-<profileID>-<start>`, as NVIDIA's ToCanonicalName builds it."""
    return f"gpu-{minor}-mig-{_rfc1123(profile.replace('.', ''))}-{profile_id}-{start}"


def counter_set_name(minor: int) -> str:
    return _rfc1123(f"gpu-{minor}-counter-set")


SLICES = "slices"  # dynmig's own counter: compute slices (a quota unit for Kueue; docs/dra.md)


def slice_counter(i: int) -> str:
    return f"memory-slice-{i}"


def _capacities(spec: ProfileSpec) -> tuple[tuple[str, int], ...]:
    e = spec.engines
    values = (spec.sm_count, e.copy, e.decoder, e.encoder, e.jpeg, e.ofa, spec.memory_mib * MIB)
    return tuple((name, v) for (name, _), v in zip(CAPACITIES, values, strict=True))


@dataclass(frozen=True)
class Instance:
    """A MIG instance that exists (or is allocated) on a GPU: its profile and placement."""

    profile: str
    placement: Placement


@dataclass(frozen=True)
class Gpu:
    """One MIG GPU as the plugin knows it: identity, model, allowed profiles and current instances."""

    minor: int
    uuid: str
    model: GpuModel
    allowed: tuple[str, ...]  # allowlisted profile names (resolved as HAMi resolves them: specs())
    instances: tuple[Instance, ...] = ()

    @property
    def axis(self) -> int:
        """Memory slices: the largest placement size over the model's profiles (the driver's rule)."""
        return max((p.size for spec in self.model.profiles for p in spec.placements), default=0)

    @property
    def mask(self) -> int:
        m = 0
        for inst in self.instances:
            m |= inst.placement.mask
        return m

    def specs(self) -> tuple[ProfileSpec, ...]:
        """The allowed profiles of the model, in allowlist order, each name resolved as HAMi resolves it
        (mig/resolve.py: `7g.79gb` is an A100-80GB's 7g.80gb); DRA devices carry the driver's name."""
        return tuple(r.profile for r in on_model(self.model, self.allowed))


@dataclass(frozen=True)
class MigDevice:
    """One abstract MIG device: a profile at a placement on one GPU."""

    name: str
    gpu_minor: int
    gpu_uuid: str
    product: str  # the GPU's NVML name (NVIDIA's `productName`)
    profile: str
    profile_id: int
    placement: Placement
    capacity: tuple[tuple[str, int], ...]  # CommonCapacitiesMig's names; memory in bytes
    counter_set: str
    slices: int = 0  # the profile's compute slices (dynmig's `slices` counter)

    @property
    def memory_mib(self) -> int:
        return dict(self.capacity)["memory"] // MIB

    def consumes(self) -> dict[str, int]:
        """Counters this device takes from its GPU's counter set when allocated."""
        out = {counter: dict(self.capacity)[cap] for cap, counter in CAPACITIES}
        out[SLICES] = self.slices
        for i in range(self.placement.start, self.placement.end):
            out[slice_counter(i)] = 1
        return out


def mig_device(gpu: Gpu, spec: ProfileSpec, placement: Placement) -> MigDevice:
    return MigDevice(
        name=device_name(gpu.minor, spec.name, spec.profile_id, placement.start),
        gpu_minor=gpu.minor,
        gpu_uuid=gpu.uuid,
        product=gpu.model.nvml_name,
        profile=spec.name,
        profile_id=spec.profile_id,
        placement=placement,
        capacity=_capacities(spec),
        counter_set=counter_set_name(gpu.minor),
        slices=spec.slice_count,
    )


_NATURAL: dict[tuple[object, ...], tuple[MigDevice, ...]] = {}


def natural_devices(gpu: Gpu) -> tuple[MigDevice, ...]:
    """Every allowed profile × legal placement of the GPU, in the driver's order (by device name).
    They do not depend on the occupancy (memoized per GPU identity, model and allowlist)."""
    key = (gpu.minor, gpu.uuid, gpu.model.key, gpu.allowed)
    hit = _NATURAL.get(key)
    if hit is None:
        devices = [mig_device(gpu, spec, p) for spec in gpu.specs() for p in spec.placements if p.size > 0]
        if len(_NATURAL) > 65536:
            _NATURAL.clear()
        hit = _NATURAL[key] = tuple(sorted(devices, key=lambda d: d.name))
    return hit


_COUNTERS: dict[str, dict[str, int]] = {}


def counter_set(gpu: Gpu) -> dict[str, int]:
    """The GPU's shared counters: per capacity the largest value over all of the model's profiles,
    and one counter per memory slice (a fresh dict; the model's is memoized)."""
    hit = _COUNTERS.get(gpu.model.key)
    if hit is None:
        hit = _COUNTERS[gpu.model.key] = _counter_set(gpu)
    return dict(hit)


def _counter_set(gpu: Gpu) -> dict[str, int]:
    out: dict[str, int] = {}
    for spec in gpu.model.profiles:
        for cap, value in _capacities(spec):
            counter = dict(CAPACITIES)[cap]
            out[counter] = max(out.get(counter, 0), value)
    out[SLICES] = max((spec.slice_count for spec in gpu.model.profiles), default=0)
    for i in range(gpu.axis):
        out[slice_counter(i)] = 1
    return out


def instance_device(gpu: Gpu, inst: Instance) -> MigDevice | None:
    """The device naming an instance (None if its profile is not one the model has)."""
    spec = gpu.model.profile(inst.profile)
    if spec is None or inst.placement not in spec.placements:
        return None
    return mig_device(gpu, spec, inst.placement)


def by_name(gpus: Iterable[Gpu]) -> dict[str, tuple[Gpu, MigDevice]]:
    """Every device any of these GPUs can publish (all model profiles), by name."""
    out = {}
    for g in gpus:
        for spec in g.model.profiles:
            for p in spec.placements:
                d = mig_device(g, spec, p)
                out[d.name] = (g, d)
    return out


def fits(devices: Sequence[MigDevice], counters: dict[str, int], taken: Iterable[MigDevice]) -> bool:
    """Whether all `devices` can be allocated beside `taken` within `counters` (one counter set)."""
    used: dict[str, int] = {}
    for d in (*taken, *devices):
        for k, v in d.consumes().items():
            used[k] = used.get(k, 0) + v
    return all(used.get(k, 0) <= v for k, v in counters.items())
