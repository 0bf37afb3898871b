"""Discovery: which GPUs of this node dynmig manages and which MIG profiles each one offers.

NVML is the truth about hardware; the allowlist is policy. A GPU is managed when it is not excluded
by `filterdevices`, an allowlist entry matches its NVML name, and at least one allowlisted profile
resolves on it (`mig.resolve`: its own name, else its slice key, as HAMi v2.10 resolves it). Everything
else on the node is left alone, GPU by GPU.

An allowlisted profile is published, reserved and created under the allowlist's name (HAMi's label,
e.g. `7g.79gb` on an A100-SXM4-80GB whose driver says `7g.80gb`): `GpuInventory.allowed` holds NVML's
profile renamed so, and `profiles` the profiles as NVML names them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from mig.allowlist import Allowlist
from mig.annotations import DeviceInfo, MigProfile, PlacementModel
from mig.resolve import resolve
from plugin.config import DeviceFilter
from plugin.nvml import GiProfile, GpuDevice, Nvml, NvmlError


@dataclass(frozen=True)
class GpuInventory:
    device: GpuDevice
    profiles: tuple[GiProfile, ...] = ()  # every GI profile NVML reports on this GPU
    allowed: tuple[GiProfile, ...] = ()  # allowlisted profiles, named by the allowlist (module doc)
    excluded: bool = False
    problem: str = ""  # why discovery could not read this GPU ("" when fine)

    @property
    def uuid(self) -> str:
        return self.device.uuid

    @property
    def index(self) -> int:
        return self.device.index

    @property
    def managed(self) -> bool:
        """dynmig may create and destroy instances here."""
        return not self.excluded and bool(self.allowed)

    @property
    def count(self) -> int:
        """Replicas to advertise: the largest instance count of the allowed profiles."""
        return max((p.instance_count for p in self.allowed), default=0)

    def profile(self, name: str) -> GiProfile | None:
        return next((p for p in self.allowed if p.name == name), None)

    def any_profile(self, profile_id: int) -> GiProfile | None:
        """The profile of a GI NVML lists, by the name it is reserved under when it is allowed."""
        return next((p for p in self.allowed if p.id == profile_id), None) or next(
            (p for p in self.profiles if p.id == profile_id), None
        )


@dataclass(frozen=True)
class Inventory:
    gpus: tuple[GpuInventory, ...] = ()
    _by_uuid: dict[str, GpuInventory] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._by_uuid.update({g.uuid: g for g in self.gpus})

    def gpu(self, uuid: str) -> GpuInventory | None:
        return self._by_uuid.get(uuid)

    @property
    def managed(self) -> tuple[GpuInventory, ...]:
        return tuple(g for g in self.gpus if g.managed)


# ---------------------------------------------------------------- pure parts


def resolve_allowed(
    allowlist: Allowlist, gpu_name: str, profiles: tuple[GiProfile, ...]
) -> tuple[GiProfile, ...]:
    """Allowlisted profiles of this GPU in allowlist order, each under its allowlisted name."""
    return tuple(
        replace(r.profile, name=r.label) for r in resolve(allowlist.profiles_for(gpu_name), profiles)
    )


def core_percent(profile: GiProfile, profiles: tuple[GiProfile, ...]) -> int:
    """ceil(SMs × 100 / the largest SM count over the GPU's profiles)."""
    largest = max((p.sm_count for p in profiles), default=0)
    return math.ceil(profile.sm_count * 100 / largest) if largest else 0


def device_type(nvml_name: str) -> str:
    return nvml_name if nvml_name.startswith("NVIDIA") else f"NVIDIA-{nvml_name}"


def device_info(gpu: GpuInventory) -> DeviceInfo:
    """One entry of `hami.io/node-nvidia-register` in HAMi's format (reference §4.2)."""
    return DeviceInfo(
        id=gpu.uuid,
        index=gpu.index,
        count=gpu.count,
        devmem=gpu.device.memory_mib,
        devcore=100,
        type=device_type(gpu.device.name),
        numa=gpu.device.numa,
        health=True,
        mode="mig",
        migProfiles=tuple(
            MigProfile(
                name=p.name,
                memoryMB=p.memory_mib,
                core=core_percent(p, gpu.profiles),
                sliceCount=p.slice_count,
                placements=tuple(PlacementModel(start=x.start, size=x.size) for x in p.placements),
            )
            for p in gpu.allowed
        ),
    )


def registration(inventory: Inventory) -> list[DeviceInfo]:
    """The GPUs to publish: managed ones only (a GPU with no profile is not registered)."""
    return [device_info(g) for g in inventory.managed]


# ---------------------------------------------------------------- NVML


def discover(
    nvml: Nvml, allowlist: Allowlist, excluded: DeviceFilter, devices: list[GpuDevice] | None = None
) -> Inventory:
    """Read every GPU's profiles (read-only NVML queries; excluded GPUs are not even queried)."""
    out = []
    for device in devices if devices is not None else nvml.devices():
        if excluded.excludes(device.uuid, device.index):
            out.append(GpuInventory(device, excluded=True))
            continue
        if allowlist.entry_for(device.name) is None:
            out.append(GpuInventory(device))
            continue
        try:
            profiles = tuple(nvml.gi_profiles(device.handle))
        except NvmlError as error:
            out.append(GpuInventory(device, problem=str(error)))
            continue
        out.append(GpuInventory(device, profiles, resolve_allowed(allowlist, device.name, profiles)))
    return Inventory(tuple(out))
