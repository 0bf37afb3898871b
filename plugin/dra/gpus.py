"""The node's MIG GPUs as this plugin publishes and mutates them, read through NVML.

A GPU is ours to publish when its model is in the catalog, MIG mode is on and the allowlist allows
at least one of its profiles. MIG mode is never switched here: a GPU not in MIG mode is left out
(with a log line), so a node in DRA mode never resets a GPU someone is using.
Every GI that exists, whoever made it, is an instance the published counters must account for.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from mig.allowlist import Allowlist
from mig.catalog import GpuModel, UnknownModel, find_model
from mig.dra.devices import Gpu, Instance
from mig.types import Placement
from plugin.config import DeviceFilter
from plugin.discovery import GpuInventory, Inventory
from plugin.nvml import MIG_ENABLE, GiProfile, GiRecord, GpuDevice, Nvml

log = logging.getLogger("dynmig.dra.gpus")


@dataclass(frozen=True)
class NodeGpu:
    """One publishable GPU: NVML's handle and profiles beside the catalog's facts."""

    minor: int
    uuid: str
    model: GpuModel
    allowed: tuple[str, ...]
    handle: Any
    profiles: tuple[GiProfile, ...]  # as this GPU's NVML reports them

    def profile(self, name: str) -> GiProfile | None:
        return next((p for p in self.profiles if p.name == name), None)

    def profile_name(self, profile_id: int) -> str | None:
        return next((p.name for p in self.profiles if p.id == profile_id), None)


def discover(nvml: Nvml, allowlist: Allowlist, excluded: DeviceFilter | None = None) -> list[NodeGpu]:
    """The publishable GPUs; one the node config's `filterdevices` names is not even queried (as
    the device plugin leaves it: never published, never mutated)."""
    out = []
    for dev in nvml.devices():
        if excluded is not None and excluded.excludes(dev.uuid, dev.index):
            log.info(
                "GPU %s (%s): excluded by the node config's filterdevices; not published", dev.index, dev.uuid
            )
            continue
        try:
            model = find_model(dev.name)
        except UnknownModel:
            log.info("GPU %s (%s): not a MIG model dynmig knows; not published", dev.index, dev.name)
            continue
        if nvml.mig_mode(dev.handle)[0] != MIG_ENABLE:
            log.warning(
                "GPU %s (%s): MIG mode is off; not published (turn MIG mode on first)", dev.index, dev.uuid
            )
            continue
        allowed = allowlist.profiles_for(model.nvml_name)
        if not allowed:
            log.info("GPU %s (%s): the allowlist allows no profile of %s", dev.index, dev.uuid, model.key)
            continue
        profiles = tuple(nvml.gi_profiles(dev.handle))
        out.append(NodeGpu(dev.index, dev.uuid, model, tuple(allowed), dev.handle, profiles))
    return out


def inventory(gpus: list[NodeGpu]) -> Inventory:
    """The GPUs as the node's instance manager (`plugin.instances`) mutates them: only the profiles
    the allowlist allows, under the driver's names (as the DRA devices carry them)."""
    out = []
    for g in gpus:
        allowed = {s.name for s in Gpu(g.minor, g.uuid, g.model, g.allowed).specs()}
        device = GpuDevice(g.minor, g.uuid, g.model.nvml_name, 0, -1, g.handle)
        out.append(GpuInventory(device, g.profiles, tuple(p for p in g.profiles if p.name in allowed)))
    return Inventory(tuple(out))


def live_instances(nvml: Nvml, gpu: NodeGpu) -> list[GiRecord]:
    return nvml.list_gis(gpu.handle, list(gpu.profiles))


def publishable(nvml: Nvml, gpus: list[NodeGpu], pending: dict[str, list[Instance]]) -> list[Gpu]:
    """The GPUs as `mig.dra` publishes them: every live GI (anyone's) and every allocated but not yet
    prepared device (`pending`, by GPU UUID) as an instance, so no overlapping device is offered."""
    out = []
    for g in gpus:
        live = [
            Instance(name, gi.placement)
            for gi in live_instances(nvml, g)
            if (name := g.profile_name(gi.profile_id)) is not None
        ]
        seen = {(i.profile, i.placement) for i in live}
        extra = []
        for i in pending.get(g.uuid, []):  # one device allocated twice (a hostile status) is one instance
            if (i.profile, i.placement) not in seen:
                seen.add((i.profile, i.placement))
                extra.append(i)
        out.append(Gpu(g.minor, g.uuid, g.model, g.allowed, tuple(live + extra)))
    return out


def unheld_slices(
    nvml: Nvml, gpus: list[NodeGpu], held: dict[str, list[Placement]]
) -> dict[str, frozenset[int]]:
    """Per GPU UUID, the memory slices of live GIs nothing holds (`held`: the placements of claims
    allocated here and of the journal's entries; what is left was made by someone else), less every
    slice a held placement covers.

    A listed device's counters are taken only while an allocation names it (the allocator subtracts
    allocated devices alone), so such an instance would leave its slices free to allocate. Published
    as 0, they are not; a held slice is never zeroed, since a counter below what the allocations
    consume makes the allocator refuse every device of the pool."""
    out = {}
    for g in gpus:
        mine = held.get(g.uuid, [])
        covered = {i for p in mine for i in range(p.start, p.end)}
        free = {
            i
            for gi in live_instances(nvml, g)
            if gi.placement not in mine
            for i in range(gi.placement.start, gi.placement.end)
        }
        if free - covered:
            out[g.uuid] = frozenset(free - covered)
    return out
