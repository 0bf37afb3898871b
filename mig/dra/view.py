"""DRA nodes on the slice map: from dynmig's ResourceSlices and the ResourceClaims allocated from them
to the same `NodeMap`s `dynmig status` and the live page draw for extender nodes.

On a DRA node kube-scheduler allocates; what runs there is written in two kinds of objects:
- the driver's ResourceSlices (`mig.dra.slices`): per device its GPU (`parentUUID`), catalog model
  (`model`), profile and placement (`placementStart`, `placementSize`); a pool is one node, and only
  its newest generation counts (as the allocator reads pools);
- the ResourceClaims whose `status.allocation.devices.results` name a device of the driver's pool:
  each such result is an instance, held by the pods in the claim's `status.reservedFor` (the claim's
  own name when none is reserved yet); once the plugin has prepared it, the claim's
  `status.devices` entry of the driver carries its MIG UUID and GI/CI IDs (`plugin.dra.status`), so
  the instance is drawn as created (`realized`), else as reserved.

Hostile input never raises here: a slice or device that cannot be read is skipped and counted in
`DraView.unreadable` (by name), an allocation naming a device no slice lists is listed there too
(the pool may have moved on; the allocation still holds its device, so the map says so).

Pure: JSON dicts in, maps out; the catalog gives each model's profiles and memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mig.annotations import MigAllocation, PlacementModel
from mig.catalog import GpuModel, UnknownModel, find_model
from mig.jsontext import at
from mig.placement.published import from_catalog
from mig.placement.request import GpuState
from mig.slicemap import GpuMap, Holding, NodeMap, gpu_map, node_map
from mig.types import Placement

MAX_UNREADABLE = 50  # names kept of what could not be read (the count is exact)


@dataclass(frozen=True)
class Device:
    """One published MIG device: where it is and what it is."""

    node: str
    gpu_uuid: str
    minor: int
    model: GpuModel
    profile: str
    placement: Placement


@dataclass
class DraView:
    """DRA nodes' maps, and what could not be read (names, first `MAX_UNREADABLE`; `problems` exact)."""

    nodes: list[NodeMap] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    problems: int = 0

    def note(self, what: str) -> None:
        self.problems += 1
        if len(self.unreadable) < MAX_UNREADABLE:
            self.unreadable.append(what[:200])


def _attr(device: Mapping[str, Any], name: str, kind: str) -> Any:
    value = at(device, "attributes", name, kind)
    if kind == "int":
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    return value if isinstance(value, str) and value else None


def _minor(device: Mapping[str, Any]) -> int | None:
    """The GPU's minor from its counter set's name (`gpu-<minor>-counter-set`)."""
    consumes = device.get("consumesCounters")
    name = at(consumes[0], "counterSet") if isinstance(consumes, list) and consumes else None
    if not isinstance(name, str) or not name.startswith("gpu-"):
        return None
    digits = name[4:].split("-", 1)[0]
    return int(digits) if digits.isdigit() and len(digits) <= 4 else None


def _device(node: str, raw: object) -> Device | None:
    if not isinstance(raw, Mapping):
        return None
    uuid, profile = _attr(raw, "parentUUID", "string"), _attr(raw, "profile", "string")
    start, size = _attr(raw, "placementStart", "int"), _attr(raw, "placementSize", "int")
    model_key, minor = _attr(raw, "model", "string"), _minor(raw)
    if uuid is None or profile is None or model_key is None or minor is None:
        return None
    if start is None or size is None or not 0 <= start < 64 or not 0 < size <= 64:
        return None
    try:
        model = find_model(model_key)
    except UnknownModel:
        return None
    spec = model.profile(profile)
    if spec is None:
        return None
    return Device(node, uuid, minor, model, spec.name, Placement(start, size))


def _newest(slices: Iterable[object], driver: str) -> list[Mapping[str, Any]]:
    """The driver's slices of each pool's newest generation."""
    newest: dict[str, int] = {}
    mine = []
    for s in slices:
        spec = at(s, "spec")
        if not isinstance(spec, Mapping) or spec.get("driver") != driver:
            continue
        pool, gen = at(spec, "pool", "name"), at(spec, "pool", "generation")
        if not isinstance(pool, str) or not isinstance(gen, int) or isinstance(gen, bool):
            continue
        mine.append(spec)
        newest[pool] = max(gen, newest.get(pool, gen))
    return [s for s in mine if s["pool"]["generation"] == newest[s["pool"]["name"]]]


def published_devices(slices: Iterable[object], driver: str, view: DraView) -> dict[tuple[str, str], Device]:
    """(pool, device name) -> the device, over the driver's newest slices."""
    out: dict[tuple[str, str], Device] = {}
    for spec in _newest(slices, driver):
        node, pool = spec.get("nodeName"), spec["pool"]["name"]
        devices = spec.get("devices")
        if not isinstance(node, str) or not node or not isinstance(devices, list):
            continue
        for raw in devices[:1024]:
            name = at(raw, "name")
            found = _device(node, raw)
            if found is None or not isinstance(name, str):
                view.note(
                    f"device {name if isinstance(name, str) else '?'} in pool {pool}: not a dynmig MIG device"
                )
                continue
            out[(pool, name)] = found
    return out


def _holders(claim: Mapping[str, Any]) -> list[str]:
    reserved = at(claim, "status", "reservedFor")
    names = (
        [r.get("name") for r in reserved[:64] if isinstance(r, Mapping)] if isinstance(reserved, list) else []
    )
    return [n for n in names if isinstance(n, str) and n] or [str(at(claim, "metadata", "name") or "?")]


def _runtime(claim: Mapping[str, Any], driver: str, key: tuple[str, str]) -> dict[str, Any]:
    """The MIG UUID and GI/CI IDs the driver reported for this device in `status.devices` ({} if none
    or unreadable)."""
    devices = at(claim, "status", "devices")
    for entry in devices[:128] if isinstance(devices, list) else []:
        if (at(entry, "driver"), at(entry, "pool"), at(entry, "device")) != (driver, *key):
            continue
        uuid, gi, ci = (at(entry, "data", k) for k in ("migUUID", "gpuInstanceID", "computeInstanceID"))
        ids_ok = all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 16 for v in (gi, ci))
        if isinstance(uuid, str) and 0 < len(uuid) <= 64 and ids_ok:
            return {"migUUID": uuid, "gpuInstanceID": gi, "computeInstanceID": ci}
    return {}


def claimed(
    claims: Iterable[object], devices: Mapping[tuple[str, str], Device], driver: str, view: DraView
) -> list[tuple[Device, Holding]]:
    """Every allocated device of the driver with the pod (or claim) holding it."""
    out = []
    for claim in claims:
        results = at(claim, "status", "allocation", "devices", "results")
        if not isinstance(claim, Mapping) or not isinstance(results, list):
            continue
        namespace = str(at(claim, "metadata", "namespace") or "")
        deleting = bool(at(claim, "metadata", "deletionTimestamp"))
        holder = ",".join(_holders(claim))
        for i, r in enumerate(results[:128]):
            if at(r, "driver") != driver:
                continue
            key = (str(at(r, "pool")), str(at(r, "device")))
            device = devices.get(key)
            if device is None:
                view.note(
                    f"claim {namespace}/{at(claim, 'metadata', 'name')}: device {key[1]} of pool {key[0]} is not published"
                )
                continue
            allocation = MigAllocation(
                containerIndex=0,
                deviceIndex=i,
                gpuUUID=device.gpu_uuid,
                profile=device.profile,
                placement=PlacementModel(start=device.placement.start, size=device.placement.size),
                **_runtime(claim, driver, key),
            )
            out.append((device, Holding(namespace, holder, allocation, deleting)))
    return out


def _gpu_state(gpu: Sequence[Device], held: Sequence[Placement]) -> GpuState:
    """The GPU as the extender draws it. The profiles are those published here, plus the model's
    profiles none of whose placements is free (a full GPU publishes none of them, yet they set the
    slice axis: an A100-40GB has 8 slices whatever is left free); those can fit nothing."""
    first = gpu[0]
    seen = {d.profile for d in gpu}
    taken = 0
    for p in held:
        taken |= p.mask
    for spec in first.model.profiles:
        if all(p.mask & taken for p in spec.placements if p.size):
            seen.add(spec.name)
    names = [n for n in first.model.profile_names if n in seen]  # the catalog's order
    return GpuState(
        node=first.node,
        uuid=first.gpu_uuid,
        type=first.model.nvml_name,
        profiles=from_catalog(first.model, names),
        occupied=tuple(held),
        index=first.minor,
        memory_mb=first.model.memory_mib,
    )


def devices_by_gpu(devices: Iterable[Device]) -> dict[tuple[str, str], list[Device]]:
    """Published devices grouped by (node, GPU UUID)."""
    out: dict[tuple[str, str], list[Device]] = {}
    for d in devices:
        out.setdefault((d.node, d.gpu_uuid), []).append(d)
    return out


def dra_view(slices: Iterable[object], claims: Iterable[object], driver: str) -> DraView:
    """The DRA nodes' maps from the driver's ResourceSlices and the cluster's ResourceClaims."""
    view = DraView()
    devices = published_devices(slices, driver, view)
    held = claimed(claims, devices, driver, view)
    by_gpu = devices_by_gpu(devices.values())
    by_node: dict[str, list[GpuMap]] = {}
    for (node, uuid), gpu in sorted(by_gpu.items()):
        holdings = [h for d, h in held if (d.node, d.gpu_uuid) == (node, uuid)]
        state = _gpu_state(gpu, [h.allocation.placement_value for h in holdings])
        by_node.setdefault(node, []).append(gpu_map(state, holdings))
    view.nodes = [node_map(name, gpus, allocator=f"dra:{driver}") for name, gpus in sorted(by_node.items())]
    return view
