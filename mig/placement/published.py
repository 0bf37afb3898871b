"""Build `PublishedProfile`s from what a node publishes or, for tools and tests, from the catalog."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mig.catalog import GpuModel, core_percent
from mig.placement.request import PublishedProfile
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
    """What a device plugin would publish for `model` with these allowlisted profile names.

    Names the model does not have are skipped, as discovery skips them.
    """
    out = []
    for name in names:
        spec = model.profile(name)
        if spec is not None:
            out.append(
                PublishedProfile(
                    spec.name, spec.memory_mib, core_percent(model, spec), spec.slice_count, spec.placements
                )
            )
    return tuple(out)
