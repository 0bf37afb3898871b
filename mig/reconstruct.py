"""Occupancy reconstruction: which placements of which GPU active pods hold, from annotations only.

Pure functions over Kubernetes JSON (dicts). Semantics follow HAMi's scheduler (reference §4.6),
including failing closed: a MIG GPU that has an allocated device without a reservation, or a
reservation naming a GPU the node does not publish, is marked unhealthy rather than guessed free,
because handing out slices that may be in use would make the device plugin's create fail or,
worse, collide with a running workload.

Instances a node's device plugin publishes in `dynmig.io/node-leftover-instances` (mig/leftovers.py:
left over, or being reclaimed, with no active reservation) count as occupied until they are gone;
an unreadable list fails the node's GPUs closed.

Instances the plugin keeps idle for reuse (`dynmig.io/node-idle-instances`, mig/idle.py) are free
for every reservation: the plugin destroys one that a reservation overlaps without matching it. They
are carried along (`NodeGpus.idle`) and never occupy a placement; an unreadable idle list is
reported (`idle_error`) and changes nothing.

GPUs listed in the node's `hami.io/device-cordon` take no new reservations; what pods already hold on
them stays counted, as in HAMi. A cordon list dynmig cannot read closes every GPU of the node.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from mig.annotations import (
    DEVICE_CORDON,
    LEFTOVERS,
    NODE_REGISTER,
    AnnotationError,
    DeviceInfo,
    MigAllocation,
    decode_device_cordon,
    decode_node_register,
)
from mig.idle import IDLE, IdleError, IdleInstance, decode_idle
from mig.idle import by_gpu as idle_by_gpu
from mig.leftovers import LeftoverError, by_gpu, decode_leftovers
from mig.placement import GpuState
from mig.placement.published import from_mig_profile
from mig.pods import PodReservation, active_for_scheduler, annotations_of
from mig.types import Placement

MIG_MODE = "mig"


# ---------------------------------------------------------------- nodes


@dataclass(frozen=True)
class NodeGpus:
    """What a node publishes: its MIG GPUs (as the engine sees them, unoccupied) and why any are ignored."""

    node: str
    gpus: tuple[GpuState, ...] = ()
    error: str = ""  # the registration annotation could not be decoded
    blocked: Mapping[str, tuple[Placement, ...]] = field(default_factory=dict)  # GPU -> leftover placements
    leftover_error: str = ""  # the leftover list could not be decoded: every GPU fails closed
    idle: Mapping[str, tuple[IdleInstance, ...]] = field(default_factory=dict)  # GPU -> kept idle (free)
    idle_error: str = ""  # the idle list could not be decoded: reported, nothing else changes


def _is_mig(device: DeviceInfo) -> bool:
    return device.mode == MIG_MODE or (not device.mode and bool(device.migProfiles))


def node_gpus(
    name: str,
    register: str | None,
    leftovers: str | None = None,
    cordon: object = None,
    idle: str | None = None,
) -> NodeGpus:
    """The MIG GPUs of a node from `hami.io/node-nvidia-register` (non-MIG GPUs are not ours), with
    the placements its plugin publishes as left over, the GPUs its cordon list closes and the
    instances it keeps idle (free for the scheduler)."""
    try:
        devices = decode_node_register(register or "")
    except AnnotationError as error:
        return NodeGpus(name, (), str(error))
    closed = _cordon(cordon)
    gpus = tuple(
        GpuState(
            node=name,
            uuid=d.id,
            type=d.type,
            profiles=tuple(from_mig_profile(p) for p in d.migProfiles),
            healthy=d.health,
            index=d.index,
            memory_mb=d.devmem,
            cordoned=closed(d.id),
        )
        for d in devices
        if _is_mig(d)
    )
    kept, idle_error = {}, ""
    try:
        kept = idle_by_gpu(decode_idle(idle))
    except IdleError as error:
        idle_error = str(error)
    try:
        return NodeGpus(
            name, gpus, blocked=by_gpu(decode_leftovers(leftovers)), idle=kept, idle_error=idle_error
        )
    except LeftoverError as error:
        return NodeGpus(name, gpus, leftover_error=str(error), idle=kept, idle_error=idle_error)


def _cordon(value: object) -> Callable[[str], str]:
    """GPU UUID -> why it is cordoned ("" = open), from the node's `hami.io/device-cordon`."""
    try:
        listed = decode_device_cordon(value)
    except AnnotationError as error:
        why = f"node cordon list unreadable, so no GPU of this node takes new pods: {error}"
        return lambda uuid: why
    why = (
        f"GPU is cordoned: the node lists it in {DEVICE_CORDON}; pods already on it keep running "
        "(remove the UUID from that list to uncordon)"
    )
    return lambda uuid: why if uuid in listed else ""


def node_cordon(node: Mapping[str, Any]) -> object:
    return annotations_of(node).get(DEVICE_CORDON)


def node_register(node: Mapping[str, Any]) -> str | None:
    return annotations_of(node).get(NODE_REGISTER)


def node_leftovers(node: Mapping[str, Any]) -> str | None:
    return annotations_of(node).get(LEFTOVERS)


def node_idle(node: Mapping[str, Any]) -> str | None:
    return annotations_of(node).get(IDLE)


# ---------------------------------------------------------------- pods


@dataclass(frozen=True)
class PodUsage:
    """What one active pod holds on its node, as written in its annotations."""

    uid: str
    namespace: str
    name: str
    node: str
    allocations: tuple[MigAllocation, ...] = ()
    devices: tuple[str, ...] = ()  # GPU UUIDs of every allocated device entry, in order
    problem: str = ""  # an annotation that could not be decoded (fail closed on the node)


def pod_usage(pod: Mapping[str, Any]) -> PodUsage | None:
    """The usage of a pod that holds GPUs (has `hami.io/vgpu-node` and is active for the scheduler:
    a terminating pod still holds them until it ends, see mig/pods.py), else None."""
    reservation = PodReservation(annotations_of(pod))
    node = reservation.node
    if not node or not active_for_scheduler(pod):
        return None
    meta = pod.get("metadata") or {}
    problems = []
    try:
        allocations = reservation.allocations
    except AnnotationError as error:
        allocations = ()  # HAMi treats an undecodable reservation as absent: the devices then fail closed
        problems.append(str(error))
    try:
        devices = tuple(d.uuid for c in reservation.allocated for d in c)
    except AnnotationError as error:
        devices = ()
        problems.append(str(error))
    return PodUsage(
        uid=meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}",
        namespace=meta.get("namespace") or "",
        name=meta.get("name") or "",
        node=node,
        allocations=allocations,
        devices=devices,
        problem="; ".join(problems),
    )


# ---------------------------------------------------------------- reconstruction


@dataclass
class GpuOccupancy:
    occupied: list[Placement] = field(default_factory=list)
    holders: list[tuple[PodUsage, MigAllocation]] = field(default_factory=list)
    unhealthy: str = ""  # why this GPU is not schedulable right now ("" = fine)


@dataclass(frozen=True)
class NodeOccupancy:
    """A node's GPUs with their reserved placements and fail-closed health applied."""

    node: str
    gpus: tuple[GpuState, ...]
    holders: Mapping[str, tuple[tuple[PodUsage, MigAllocation], ...]]
    closed: Mapping[str, str]  # GPU UUID -> why it was failed closed


def reconstruct(published: NodeGpus, usages: Iterable[PodUsage]) -> NodeOccupancy:
    """Apply the reservations of the node's active pods to its published GPUs (HAMi §4.6)."""
    by_uuid = {g.uuid: GpuOccupancy() for g in published.gpus}
    all_closed = ""
    for usage in usages:
        pending: dict[str, list[MigAllocation]] = {}
        for a in usage.allocations:
            pending.setdefault(a.gpuUUID, []).append(a)
        if usage.problem and not usage.devices:  # nothing to attribute per GPU: distrust the node
            all_closed = f"pod {usage.namespace}/{usage.name}: {usage.problem}"
        for uuid in usage.devices:
            occ = by_uuid.get(uuid)
            if occ is None:
                continue  # a device on a GPU this node does not publish as MIG is not ours
            queue = pending.get(uuid)
            if not queue:
                occ.unhealthy = occ.unhealthy or (
                    f"pod {usage.namespace}/{usage.name} has a device on this MIG GPU without a reservation"
                )
                continue
            _hold(occ, usage, queue.pop(0))
        for uuid, rest in pending.items():
            occ = by_uuid.get(uuid)
            if occ is None:
                if rest:
                    all_closed = (
                        f"pod {usage.namespace}/{usage.name} reserves GPU {uuid}, which the node "
                        "does not publish"
                    )
                continue
            for a in rest:
                _hold(occ, usage, a)
    gpus, holders, closed = [], {}, {}
    for g in published.gpus:
        occ = by_uuid[g.uuid]
        why = occ.unhealthy or all_closed or _overlap(occ) or published.leftover_error
        if why:
            closed[g.uuid] = why
        occupied = (*occ.occupied, *published.blocked.get(g.uuid, ()))  # leftovers: not a holder's overlap
        # a GPU nothing holds and nothing closes stays the published one (most GPUs of a node)
        same = not occupied and not why and not g.occupied
        gpus.append(g if same else replace(g, occupied=occupied, healthy=g.healthy and not why))
        holders[g.uuid] = tuple(occ.holders)
    return NodeOccupancy(published.node, tuple(gpus), holders, closed)


def _hold(occ: GpuOccupancy, usage: PodUsage, allocation: MigAllocation) -> None:
    occ.occupied.append(allocation.placement_value)
    occ.holders.append((usage, allocation))


def _overlap(occ: GpuOccupancy) -> str:
    """Two holders of overlapping placements: the record is inconsistent, so trust neither."""
    seen = 0
    for p in occ.occupied:
        if p.mask & seen:
            return f"reservations overlap at placement {p}"
        seen |= p.mask
    return ""
