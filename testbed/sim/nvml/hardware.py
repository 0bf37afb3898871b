"""The simulated GPUs' driver facts: models, MIG profiles and driver releases, read from `drivers/*.yaml`.

These files are the simulator's only source of GPU facts. They are written from NVIDIA's
documents and real `nvidia-smi mig -lgip/-lgipp` output (each with its source), never from the
code under test: a wrong fact in dynmig's catalog then shows up as a disagreement with the
simulated driver instead of passing silently (tests/sim/test_nvml_driver_facts.py).

A model's profile memory, the profiles it offers and the names it prints change between driver
releases; `model(key, release)` gives the model as one release reports it.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

# ---- nvml.h constants ---------------------------------------------------------------------------

GPU_INSTANCE_PROFILE_COUNT = 0x12
COMPUTE_INSTANCE_PROFILE_COUNT = 0x9
ENUM_1_SLICE_NO_ME, ENUM_2_SLICE_NO_ME = 0xD, 0xE
ENUM_1_SLICE_ALL_ME, ENUM_2_SLICE_ALL_ME = 0xF, 0x10
# NVML_COMPUTE_INSTANCE_PROFILE_<N>_SLICE per compute-slice count.
CI_ENUM_BY_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}

# GI ID numberings a driver uses (identity.py turns a placement into an ID by them).
HEAP, HALVES_SWAPPED = "heap", "halves-swapped"
NUMBERINGS = (HEAP, HALVES_SWAPPED)

_DATA = Path(str(resources.files(__package__).joinpath("drivers")))  # shipped in the wheel too
_PLACEMENTS = re.compile(r"^\{(\d+(?:,\d+)*)\}:(\d+)$")


@dataclass(frozen=True, order=True)
class Placement:
    """[start, start+size) on a GPU's memory-slice axis (nvmlGpuInstancePlacement_t)."""

    start: int
    size: int

    @property
    def end(self) -> int:
        return self.start + self.size

    def overlaps(self, other: Placement) -> bool:
        return self.start < other.end and other.start < self.end

    def __str__(self) -> str:
        return f"{self.start}:{self.size}"


@dataclass(frozen=True)
class Engines:
    copy: int
    decoder: int
    encoder: int
    jpeg: int
    ofa: int


@dataclass(frozen=True)
class GiProfile:
    """One GPU-instance profile as nvmlDeviceGetGpuInstanceProfileInfo reports it."""

    name: str
    enum: int
    profile_id: int
    memory_mib: int
    sm_count: int
    slice_count: int
    instance_count: int
    placements: tuple[Placement, ...]
    engines: Engines

    @property
    def placement_size(self) -> int:
        return self.placements[0].size


@dataclass(frozen=True)
class Release:
    key: str  # e.g. "R550"
    version: str  # what nvmlSystemGetDriverVersion returns


SERIALIZATIONS = ("gpu", "node")  # which simulated MIG mutations wait for each other
TIMED_CALLS = ("create_gi", "create_ci", "destroy_ci", "destroy_gi")


@dataclass(frozen=True)
class Timing:
    """Seconds one MIG mutation takes on this model (estimates: see drivers/ampere.yaml), how far
    NVML's MIG device list may lag a compute-instance create, and the default serialization."""

    create_gi_s: float = 0.0
    create_ci_s: float = 0.0
    destroy_ci_s: float = 0.0
    destroy_gi_s: float = 0.0
    listing_lag_s: float = 0.0
    serialization: str = "gpu"

    def seconds(self, call: str) -> float:
        return float(getattr(self, f"{call}_s"))


@dataclass(frozen=True)
class GpuModel:
    """A MIG-capable GPU under one driver release."""

    key: str
    nvml_names: tuple[str, ...]
    pci_device_id: int
    memory_mib: int
    max_mig_devices: int
    axis_length: int
    gi_numberings: tuple[str, ...]  # observed GI ID numberings; a node's GPUs take them in turn
    release: Release
    releases: tuple[str, ...]  # every release the data knows, default first
    profiles: tuple[GiProfile, ...]
    timing: Timing = Timing()

    @property
    def nvml_name(self) -> str:
        return self.nvml_names[0]

    def profile(self, name: str) -> GiProfile | None:
        return next((p for p in self.profiles if p.name == name), None)

    def profile_by_enum(self, enum: int) -> GiProfile | None:
        return next((p for p in self.profiles if p.enum == enum), None)

    def profile_by_id(self, profile_id: int) -> GiProfile | None:
        return next((p for p in self.profiles if p.profile_id == profile_id), None)


class UnknownModel(LookupError):
    pass


class UnknownRelease(LookupError):
    pass


# ---- lookup -------------------------------------------------------------------------------------


def model_keys() -> tuple[str, ...]:
    return tuple(_raw_models())


def model(key: str, release: str | None = None) -> GpuModel:
    """The model `key` as driver `release` reports it (None: the model's default release)."""
    return _resolve(key, release_key(key, release))


def release_key(key: str, wanted: str | None) -> str:
    """A release by its key ("R570", "R570-early") or by a version prefix ("570", "570.124.06")."""
    raw = _raw_models()[key]
    if wanted is None:
        return raw["default_release"]
    releases = raw["releases"]
    if wanted in releases:
        return wanted
    prefix = wanted.removeprefix("R")
    for name, rel in releases.items():
        if rel["version"] == prefix or rel["version"].startswith(prefix + "."):
            return name
    raise UnknownRelease(f"{key} has no driver release {wanted!r}; known: {', '.join(releases)}")


def find_model(name: str) -> str:
    """A model's key by key, exact NVML name, or a unique part of an NVML name."""
    raw = _raw_models()
    for key, data in raw.items():
        if name == key or name in data["names"]:
            return key
    hits = [k for k, d in raw.items() if any(name in n for n in d["names"])]
    if not hits:
        wanted = _norm(name)
        hits = [
            k for k, d in raw.items() if wanted in _norm(k) or any(wanted in _norm(n) for n in d["names"])
        ]
    exact = [k for k in hits if _norm(k) == _norm(name) or _norm(raw[k]["names"][0]) == _norm(name)]
    if len(hits) == 1 or len(exact) == 1:
        return hits[0] if len(hits) == 1 else exact[0]
    if not hits:
        raise UnknownModel(f"unknown GPU model {name!r}; known models: {', '.join(raw)}")
    raise UnknownModel(f"GPU model {name!r} is ambiguous: {', '.join(hits)}")


def _norm(text: str) -> str:
    return text.lower().replace("nvidia", "").replace("-", " ").replace("_", " ").strip()


# ---- loading ------------------------------------------------------------------------------------


@functools.cache
def _raw_models() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(_DATA.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        for entry in doc["models"]:
            if entry["key"] in out:
                raise ValueError(f"{path.name}: model {entry['key']} is defined twice")
            out[entry["key"]] = {**entry, "timing": {**(doc.get("timing") or {}), **entry.get("timing", {})}}
    return out


def _timing(raw: dict[str, Any], key: str) -> Timing:
    allowed = {f"{c}_s" for c in TIMED_CALLS} | {"listing_lag_s", "serialization"}
    unknown = set(raw) - allowed
    if unknown:
        raise ValueError(f"{key}: unknown timing fields {sorted(unknown)}")
    serialization = str(raw.get("serialization", "gpu"))
    if serialization not in SERIALIZATIONS:
        raise ValueError(f"{key}: timing.serialization must be one of {SERIALIZATIONS}")
    values = {k: float(v) for k, v in raw.items() if k != "serialization"}
    if any(not 0 <= v <= 60 for v in values.values()):
        raise ValueError(f"{key}: timing values are seconds from 0 to 60")
    return Timing(**values, serialization=serialization)


@functools.cache
def _resolve(key: str, release: str) -> GpuModel:
    raw = _raw_models()[key]
    default = raw["releases"][raw["default_release"]]
    rel = raw["releases"][release]
    memory = {**default.get("memory", {}), **rel.get("memory", {})}
    names = rel.get("names", {})
    without = set(rel.get("without", ()))
    profiles = tuple(_profile(row, memory, names, key) for row in raw["profiles"] if row[0] not in without)
    axis = max(p.end for prof in profiles for p in prof.placements)
    numberings = tuple(raw["gi_ids"])
    if not numberings or any(n not in NUMBERINGS for n in numberings):
        raise ValueError(f"{key}: gi_ids must list some of {NUMBERINGS}, got {numberings}")
    others = [k for k in raw["releases"] if k != raw["default_release"]]
    return GpuModel(
        key=key,
        nvml_names=tuple(raw["names"]),
        pci_device_id=int(raw["pci_device_id"]),
        memory_mib=int(raw["memory_mib"]),
        max_mig_devices=int(raw["max_mig_devices"]),
        axis_length=axis,
        gi_numberings=numberings,
        release=Release(release, str(rel["version"])),
        releases=(raw["default_release"], *others),
        profiles=profiles,
        timing=_timing(raw.get("timing") or {}, key),
    )


def _profile(row: list[Any], memory: dict[str, int], names: dict[str, str], key: str) -> GiProfile:
    name, profile_id, enum, slices, count, sm, engines, placements = row
    if name not in memory:
        raise ValueError(f"{key}: no release gives the memory of {name}")
    return GiProfile(
        name=names.get(name, name),
        enum=int(enum),
        profile_id=int(profile_id),
        memory_mib=int(memory[name]),
        sm_count=int(sm),
        slice_count=int(slices),
        instance_count=int(count),
        placements=_placements(placements, f"{key} {name}"),
        engines=Engines(*(int(e) for e in engines)),
    )


def _placements(text: str, where: str) -> tuple[Placement, ...]:
    match = _PLACEMENTS.match(text)
    if not match:
        raise ValueError(f"{where}: placements {text!r} must look like '{{0,2,4}}:2'")
    size = int(match.group(2))
    return tuple(Placement(int(s), size) for s in match.group(1).split(","))
