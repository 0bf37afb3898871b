"""Build `PublishedProfile`s from what a node publishes or, for tools and tests, from the catalog."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mig.catalog import GpuModel, core_percent
from mig.placement.request import PublishedProfile
from mig.resolve import on_model
from mig.types import Placement


def from_mig_profile(profile: Any) -> PublishedProfile:
    """From a `mig.annotations.MigProfile` (HAMi's `{name, memoryMB, core, sliceCount, placements}`)."""
    return PublishedProfile(
        name=profile.name,
        memory_mb=profile.memoryMB,
        core=profile.core,
        slice_count=profile.sliceCount,
        placements=tuple(Placement(p.start, p.size) for p in profile.placements),
    )


def from_catalog(model: GpuModel, names: Iterable[str]) -> tuple[PublishedProfile, ...]:
    """What a device plugin would publish for `model` with these allowlisted profile names: each
    name that resolves (`mig.resolve`), under that name, with the real profile's facts."""
    return tuple(
        PublishedProfile(
            r.label,
            r.profile.memory_mib,
            core_percent(model, r.profile),
            r.profile.slice_count,
            r.profile.placements,
        )
        for r in on_model(model, names)
    )
