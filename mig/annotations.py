"""Codecs for the HAMi v2.10 Dynamic MIG annotations dynmig reads and writes.

- `hami.io/node-nvidia-register` (node): the GPUs a device plugin published, with MIG profiles.
- `hami.io/vgpu-mig-allocations` (pod): the durable record of which placement a pod owns.
- `hami.io/vgpu-devices-to-allocate` / `-allocated` (pod): HAMi's per-container device strings.
- `hami.io/device-cordon` (node): GPU UUIDs an operator closed to new allocations.
- `hami.io/mutex.lock` (node): the node lock, `<RFC3339>,<pod namespace>,<pod name>`.

Every annotation key dynmig reads or writes is defined here and nowhere else.

Encoding is byte-compatible with HAMi (Go `encoding/json`: compact, struct field order, omitempty, and
`null` for a profile without placements, since that Go field has no omitempty); a test holds the
node registration to a HAMi-shaped fixture byte for byte.
Decoding of the allocation annotation is strict: any invalid entry rejects the whole annotation,
because a half-understood ownership record must never drive a destructive action.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
)

from mig import jsontext
from mig.jsontext import nesting_depth_exceeds
from mig.types import Placement

# Annotation keys (HAMi's names, so the two systems read each other's state).
NODE_REGISTER = "hami.io/node-nvidia-register"
MIG_ALLOCATIONS = "hami.io/vgpu-mig-allocations"
DEVICES_TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"
DEVICES_ALLOCATED = "hami.io/vgpu-devices-allocated"
VGPU_NODE = "hami.io/vgpu-node"
VGPU_TIME = "hami.io/vgpu-time"
BIND_PHASE = "hami.io/bind-phase"
BIND_TIME = "hami.io/bind-time"
NODE_LOCK = "hami.io/mutex.lock"
PROFILE_PREFERENCE = "nvidia.com/mig-profile-preference"
NODE_SCHEDULER_POLICY = "hami.io/node-scheduler-policy"
GPU_SCHEDULER_POLICY = "hami.io/gpu-scheduler-policy"
USE_GPU_UUID = "nvidia.com/use-gpuuuid"
NOUSE_GPU_UUID = "nvidia.com/nouse-gpuuuid"
USE_GPU_TYPE = "nvidia.com/use-gputype"
NOUSE_GPU_TYPE = "nvidia.com/nouse-gputype"
VGPU_MODE = "nvidia.com/vgpu-mode"
WEBHOOK_IGNORE_LABEL = "hami.io/webhook"
DEVICE_CORDON = "hami.io/device-cordon"
LEFTOVERS = "dynmig.io/node-leftover-instances"  # ours: see mig/leftovers.py
# dynmig's own (mig/defrag/): the scheduler's defrag advice for a pending pod, and a running pod's
# consent to be evicted by the defrag controller ("true"; anything else is no).
DEFRAG_ADVICE = "dynmig.io/defrag-advice"
EVICTABLE = "dynmig.io/evictable"
# dynmig's own (plugin/podresources.py): the node's device plugin is dynmig's and finds Allocate's
# pod through kubelet's PodResources API, so the scheduler need not hold HAMi's node lock there.
# The value names the protocol; a node without it (or with another value) keeps HAMi's lock exactly.
PLUGIN_CLAIMS = "dynmig.io/plugin-claims"
PLUGIN_CLAIMS_PODRESOURCES = "podresources-v1"
# dynmig's own: set by the node's device plugin while it leaves the node's GPUs alone because another
# component manages them (NVIDIA's device plugin, MIG Manager); the value says which and the fix.
# `dynmig status` shows it; the plugin removes it once the neighbour is gone.
PLUGIN_REFUSED = "dynmig.io/plugin-refused"

BIND_PHASE_ALLOCATING, BIND_PHASE_SUCCESS, BIND_PHASE_FAILED = "allocating", "success", "failed"


class AnnotationError(ValueError):
    """An annotation that cannot be trusted; the message names the entry and field."""


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _first_error(error: ValidationError, prefix: str) -> str:
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    return f"{prefix}{where}: {first['msg']}" if where else f"{prefix}{first['msg']}"


NonNegative = Annotated[StrictInt, Field(ge=0)]


# ---------------------------------------------------------------- node registration


class PlacementModel(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    start: NonNegative
    size: NonNegative

    def to_placement(self) -> Placement:
        return Placement(self.start, self.size)


class MigProfile(BaseModel):
    """A profile a GPU offers: exactly HAMi's keys (instanceCount is read but never written)."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    name: StrictStr
    memoryMB: NonNegative
    core: NonNegative = 0
    sliceCount: NonNegative = 0
    placements: tuple[PlacementModel, ...] = ()

    @field_validator("placements", mode="before")
    @classmethod
    def _null_is_none(cls, value: Any) -> Any:
        """Go writes `null` for a profile with no placements: that profile offers none."""
        return () if value is None else value

    def encode_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "memoryMB": self.memoryMB,
            "core": self.core,
            "sliceCount": self.sliceCount,
            "placements": [{"start": p.start, "size": p.size} for p in self.placements] or None,
        }

    def encode(self) -> str:
        return _compact(self.encode_dict())


class DeviceInfo(BaseModel):
    """One registered GPU in `hami.io/node-nvidia-register`."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    id: StrictStr
    index: NonNegative = 0
    count: NonNegative = 0
    devmem: NonNegative = 0
    devcore: NonNegative = 0
    type: StrictStr = ""
    numa: NonNegative = 0
    health: StrictBool = False
    mode: StrictStr = ""
    migProfiles: tuple[MigProfile, ...] = ()

    @field_validator("migProfiles", mode="before")
    @classmethod
    def _null_is_none(cls, value: Any) -> Any:
        return () if value is None else value  # Go reads `null` as no profiles

    def encode_dict(self) -> dict[str, Any]:
        """HAMi's DeviceInfo field order, with its omitempty: zero values are left out."""
        full: dict[str, Any] = {
            "id": self.id,
            "index": self.index,
            "count": self.count,
            "devmem": self.devmem,
            "devcore": self.devcore,
            "type": self.type,
            "numa": self.numa,
            "mode": self.mode,
            "migProfiles": [p.encode_dict() for p in self.migProfiles],
            "health": self.health,
        }
        return {k: v for k, v in full.items() if v not in (0, "", False, [])}


def encode_node_register(devices: list[DeviceInfo] | tuple[DeviceInfo, ...]) -> str:
    return _compact([d.encode_dict() for d in devices])


MAX_ANNOTATION_DEPTH = 16  # our annotations nest 4 levels


def _json_array(text: str, annotation: str, items: str) -> list[Any]:
    """The annotation's JSON array; AnnotationError naming the annotation when it is not one."""
    if nesting_depth_exceeds(text, MAX_ANNOTATION_DEPTH):
        raise AnnotationError(f"{annotation}: nests deeper than {MAX_ANNOTATION_DEPTH} levels")
    try:
        raw = jsontext.loads(text)  # lone surrogate escapes decode as U+FFFD
    except json.JSONDecodeError as error:
        raise AnnotationError(f"{annotation}: not JSON ({error.msg} at {error.pos})") from None
    if not isinstance(raw, list):
        raise AnnotationError(f"{annotation}: must be a JSON array of {items}")
    return raw


def decode_node_register(text: str) -> tuple[DeviceInfo, ...]:
    """Decode a node's registration; raise AnnotationError naming the field on bad input."""
    if not text or not text.strip():
        return ()
    raw = _json_array(text, NODE_REGISTER, "devices")
    devices = []
    for i, item in enumerate(raw):
        try:
            devices.append(DeviceInfo.model_validate(item))
        except ValidationError as error:
            raise AnnotationError(_first_error(error, f"{NODE_REGISTER}[{i}].")) from None
    return tuple(devices)


# ---------------------------------------------------------------- MIG allocations (reservations)


class MigAllocation(BaseModel):
    """One reserved MIG instance of a pod: logical part from the scheduler, runtime part from the plugin."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    containerIndex: NonNegative
    deviceIndex: NonNegative
    gpuUUID: Annotated[StrictStr, Field(min_length=1)]
    profile: Annotated[StrictStr, Field(min_length=1)]
    placement: PlacementModel
    migUUID: StrictStr | None = None
    gpuInstanceID: NonNegative | None = None
    computeInstanceID: NonNegative | None = None

    @property
    def key(self) -> tuple[int, int]:
        return (self.containerIndex, self.deviceIndex)

    @property
    def placement_value(self) -> Placement:
        return self.placement.to_placement()

    @property
    def runtime_ready(self) -> bool:
        """All three runtime fields present (0 is a valid ID: presence matters, not truthiness)."""
        return (
            self.migUUID is not None and self.gpuInstanceID is not None and self.computeInstanceID is not None
        )

    @property
    def runtime_partial(self) -> bool:
        present = [
            self.migUUID is not None,
            self.gpuInstanceID is not None,
            self.computeInstanceID is not None,
        ]
        return any(present) and not all(present)

    def with_runtime(self, mig_uuid: str, gi_id: int, ci_id: int) -> MigAllocation:
        return self.model_copy(
            update={"migUUID": mig_uuid, "gpuInstanceID": gi_id, "computeInstanceID": ci_id}
        )

    def without_runtime(self) -> MigAllocation:
        return self.model_copy(update={"migUUID": None, "gpuInstanceID": None, "computeInstanceID": None})

    def encode_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "containerIndex": self.containerIndex,
            "deviceIndex": self.deviceIndex,
            "gpuUUID": self.gpuUUID,
            "profile": self.profile,
            "placement": {"start": self.placement.start, "size": self.placement.size},
        }
        if self.runtime_ready:
            out.update(
                migUUID=self.migUUID,
                gpuInstanceID=self.gpuInstanceID,
                computeInstanceID=self.computeInstanceID,
            )
        return out


def _validate_entry(i: int, item: object) -> MigAllocation:
    prefix = f"{MIG_ALLOCATIONS}[{i}]."
    try:
        entry = MigAllocation.model_validate(item)
    except ValidationError as error:
        raise AnnotationError(_first_error(error, prefix)) from None
    if entry.placement.size == 0:
        raise AnnotationError(f"{prefix}placement.size: must be at least 1")
    if entry.migUUID == "":
        raise AnnotationError(f"{prefix}migUUID: must not be empty when present")
    if entry.runtime_partial:
        raise AnnotationError(
            f"{prefix}: partial runtime identity (migUUID, gpuInstanceID and computeInstanceID go together)"
        )
    return entry


def decode_allocations(text: str | None) -> tuple[MigAllocation, ...]:
    """Decode a pod's reservations; any invalid entry rejects the whole annotation."""
    if text is None or not text.strip():
        return ()
    raw = _json_array(text, MIG_ALLOCATIONS, "reservations")
    entries = [_validate_entry(i, item) for i, item in enumerate(raw)]
    seen: set[tuple[int, int]] = set()
    for entry in entries:
        if entry.key in seen:
            raise AnnotationError(
                f"{MIG_ALLOCATIONS}: duplicate reservation for containerIndex "
                f"{entry.containerIndex}, deviceIndex {entry.deviceIndex}"
            )
        seen.add(entry.key)
    return tuple(entries)


def encode_allocations(entries: list[MigAllocation] | tuple[MigAllocation, ...]) -> str | None:
    """Encode reservations; None when there is nothing to write (the annotation is then not set)."""
    kept = [e for e in entries if e.profile and e.placement.size > 0]
    return _compact([e.encode_dict() for e in kept]) if kept else None


# ---------------------------------------------------------------- HAMi device strings


@dataclass(frozen=True)
class ContainerDevice:
    """One device entry of `hami.io/vgpu-devices-*`: `UUID,Type,Usedmem,Usedcores`."""

    uuid: str
    type: str
    usedmem: int
    usedcores: int

    def encode(self) -> str:
        return f"{self.uuid},{self.type},{self.usedmem},{self.usedcores}:"


def encode_devices(containers: list[list[ContainerDevice]]) -> str:
    """Per container, entries `UUID,Type,mem,cores:` concatenated, each container closed by `;`."""
    return "".join("".join(d.encode() for d in devices) + ";" for devices in containers)


def _decode_device(text: str, where: str) -> ContainerDevice:
    parts = text.split(",")
    if len(parts) != 4 or not parts[0]:
        raise AnnotationError(f"{where}: expected 'UUID,Type,Usedmem,Usedcores', got {text!r}")
    try:
        return ContainerDevice(parts[0], parts[1], int(parts[2]), int(parts[3]))
    except ValueError:
        raise AnnotationError(f"{where}: Usedmem and Usedcores must be integers, got {text!r}") from None


def split_devices(text: str | None, key: str = DEVICES_TO_ALLOCATE) -> list[list[ContainerDevice]]:
    """Every `;` piece of a devices string as HAMi splits it, the empty one after the last `;` kept."""
    if not text:
        return []
    return [
        [_decode_device(d, f"{key}[{c}][{i}]") for i, d in enumerate(seg.split(":")) if d]
        for c, seg in enumerate(text.split(";"))
    ]


def decode_devices(text: str | None, key: str = DEVICES_TO_ALLOCATE) -> list[list[ContainerDevice]]:
    """Decode a devices string into per-container lists (empty containers kept)."""
    pieces = split_devices(text, key)
    return pieces[:-1] if text and text.endswith(";") else pieces


def drain_container(pieces: list[list[ContainerDevice]], container_index: int) -> str:
    """The devices string (from `split_devices` pieces) after Allocate took this container's devices.

    HAMi closes every piece with `;` again, so a one-container `GPU-…:;` drains to `;;`; both forms
    decode to the same containers."""
    if container_index >= len(pieces):
        return encode_devices(pieces)
    return encode_devices([*pieces[:container_index], [], *pieces[container_index + 1 :]])


# ---------------------------------------------------------------- per-GPU cordon

MAX_CORDON_TEXT = 64 * 1024  # ~1,500 GPU UUIDs; a node has a handful


def decode_device_cordon(value: object) -> frozenset[str]:
    """The GPU UUIDs of `hami.io/device-cordon`: comma-separated, blanks and stray commas skipped (as
    HAMi reads it). Absent or empty means none; a value that is not text or is longer than
    MAX_CORDON_TEXT raises AnnotationError (the caller then closes the whole node)."""
    if value is None:
        return frozenset()
    if not isinstance(value, str):
        raise AnnotationError(f"{DEVICE_CORDON}: must be a comma-separated list of GPU UUIDs")
    if len(value) > MAX_CORDON_TEXT:
        raise AnnotationError(
            f"{DEVICE_CORDON}: {len(value)} characters, more than {MAX_CORDON_TEXT}; "
            "list only the UUIDs of GPUs to close"
        )
    return frozenset(u for u in (part.strip() for part in value.split(",")) if u)


# ---------------------------------------------------------------- node lock

NODE_LOCK_SEPARATOR = ","


@dataclass(frozen=True)
class NodeLockValue:
    """A decoded `hami.io/mutex.lock`. `taken` None: the time is unreadable (the lock counts as
    expired); empty namespace and name: the lock names no pod (HAMi's legacy bare timestamp)."""

    taken: dt.datetime | None
    namespace: str = ""
    name: str = ""

    @property
    def owner(self) -> tuple[str, str] | None:
        """(namespace, name) of the pod holding the lock, or None when it names none."""
        return (self.namespace, self.name) if self.namespace and self.name else None


def encode_node_lock(now: dt.datetime, namespace: str, name: str) -> str:
    """`<RFC3339 UTC>,<namespace>,<name>`; ValueError for a name the format cannot carry (a comma:
    no Kubernetes namespace or pod name has one, and HAMi would read the value as malformed)."""
    for what, value in (("namespace", namespace), ("name", name)):
        if NODE_LOCK_SEPARATOR in value:
            raise ValueError(f"{NODE_LOCK}: pod {what} {value[:64]!r} contains a comma")
    when = now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return NODE_LOCK_SEPARATOR.join((when, namespace, name))


def _lock_time(text: str) -> dt.datetime | None:
    try:
        taken = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    return taken if taken.tzinfo is not None else taken.replace(tzinfo=dt.UTC)


def decode_node_lock(value: str) -> NodeLockValue:
    """Read the node lock as HAMi's ParseNodeLock does (pkg/util/nodelock): no comma is the legacy
    bare timestamp; otherwise exactly three parts, time, namespace, name. A value with another
    number of parts (a comma inside a name) is malformed: it names no pod and, like an unreadable
    time, counts as expired (HAMi's bind would fail on it until someone removes it)."""
    if NODE_LOCK_SEPARATOR not in value:
        return NodeLockValue(_lock_time(value))
    parts = value.split(NODE_LOCK_SEPARATOR)
    if len(parts) != 3:
        return NodeLockValue(None)
    return NodeLockValue(_lock_time(parts[0]), parts[1], parts[2])
