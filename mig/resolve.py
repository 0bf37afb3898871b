"""How an allowlisted profile name finds one of a GPU's MIG profiles: HAMi v2.10's rule, stated once.

HAMi's device plugin (`pkg/device-plugin/nvidiadevice/nvinternal/plugin/register.go`,
`discoverMigProfiles`) takes each name of the GPU's allowlist entry in order, cuts it at the first
'.' (`migmgr.go`, `profileSliceKey`: `7g.79gb` -> `7g`), maps that slice key to NVML's base GPU
instance profile (`profileNameToGIProfileID`: 1g -> GPU_INSTANCE_PROFILE_1_SLICE, ... 8g ->
GPU_INSTANCE_PROFILE_8_SLICE), and publishes what NVML says of that profile (memory, compute,
placements) under **the allowlist's name**. A name whose slice key NVML cannot resolve is omitted.

dynmig does the same, with one refinement: a name the GPU's driver reports itself (`1g.10gb` on an
A100-SXM4-40GB, a `+me` profile) is that profile, not the base profile of its slice key (HAMi would
give `1g.10gb` there the 1g.5gb profile's 4,864 MiB). A profile is published once: a name resolved by
its slice key is omitted when an exact name of the same entry, or an earlier name, has its profile.

The label published is always the allowlist's name (HAMi's, so a reservation HAMi wrote carrying
`7g.79gb` names a profile the node publishes); `Resolved.profile` keeps the real one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from mig.catalog import (
    ENUM_1_SLICE,
    ENUM_2_SLICE,
    ENUM_3_SLICE,
    ENUM_4_SLICE,
    ENUM_6_SLICE,
    ENUM_7_SLICE,
    ENUM_8_SLICE,
    GpuModel,
    ProfileSpec,
)

# HAMi v2.10 migmgr.go `profileNameToGIProfileID`: slice key -> NVML_GPU_INSTANCE_PROFILE_* (base)
SLICE_KEY_ENUM = {
    "1g": ENUM_1_SLICE,
    "2g": ENUM_2_SLICE,
    "3g": ENUM_3_SLICE,
    "4g": ENUM_4_SLICE,
    "6g": ENUM_6_SLICE,
    "7g": ENUM_7_SLICE,
    "8g": ENUM_8_SLICE,
}


class Profile(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def enum(self) -> int: ...


P = TypeVar("P", bound=Profile)


@dataclass(frozen=True)
class Resolved(Generic[P]):
    """An allowlisted name (`label`, what the node publishes) and the GPU profile it resolved to."""

    label: str
    profile: P

    @property
    def by_slice_key(self) -> bool:
        """The label is not a name of the profile: it resolved by its slice key alone."""
        return self.label != self.profile.name


def slice_key(name: str) -> str:
    """HAMi's `profileSliceKey`: the text before the first '.' (`7g` for `7g.79gb`)."""
    return name.split(".", 1)[0]


def resolve(
    names: Iterable[str],
    profiles: Sequence[P],
    names_of: Callable[[P], Iterable[str]] = lambda p: (p.name,),
) -> tuple[Resolved[P], ...]:
    """The allowlisted `names` that resolve on a GPU with these `profiles`, in allowlist order
    (module doc); `names_of` gives every name a profile goes by (the catalog adds other drivers')."""
    ordered = list(dict.fromkeys(names))
    exact = {n: next((p for p in profiles if n in names_of(p)), None) for n in ordered}
    claimed = [p for p in exact.values() if p is not None]
    out: list[Resolved[P]] = []
    for name in ordered:
        profile = exact[name]
        if profile is None:
            enum = SLICE_KEY_ENUM.get(slice_key(name))
            profile = next((p for p in profiles if p.enum == enum), None)
            if profile is None or profile in claimed:
                continue
        if any(r.profile == profile for r in out):
            continue
        out.append(Resolved(name, profile))
    return tuple(out)


def on_model(model: GpuModel, names: Iterable[str]) -> tuple[Resolved[ProfileSpec], ...]:
    """What a GPU of a catalog model publishes for these allowlisted names."""
    return resolve(names, model.profiles, lambda p: (p.name, *p.driver_names))
