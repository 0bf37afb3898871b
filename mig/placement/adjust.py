"""Where a single-device pod goes after the engine's plan, on the node the engine chose.

The engine counts an idle instance (mig/idle.py) as free and does not prefer it, so a churning
service's new pod would land beside its predecessor's idle instance: a create in its Allocate, and a
destroy later. And a burst packed onto one GPU waits for that GPU's creates in series. So the
extender (webhooks/fleet.py) moves the plan (`adjust`):

- `onto_idle`: onto an idle instance of the planned profile on the planned node, where the node's
  plugin would hand it over (its last user was of the pod's namespace, or is not known);
- else `spread` (only on a node whose binds take no node lock): off a GPU with creates in flight;
- then `around_idle`: off an idle instance it would overlap and not be handed, on the same GPU.

Pure functions of the node's GPUs as the scheduler counts them (idle placements free), what holds
them, the node's idle list and the namespaces of the placements' last users, so the packing bench
replays exactly the extender's rules (bench/_packing/reuse.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from mig.annotations import MigAllocation
from mig.idle import IdleInstance
from mig.placement.index import PlacementIndex, plan_pod
from mig.placement.plan import DevicePlacement, Plan
from mig.placement.reasons import Refusal
from mig.placement.request import GpuState, PodRequest
from mig.types import Placement

# (GPU UUID, profile, start, size) -> namespace of the last pod that held that placement
LastUsers = Mapping[tuple[str, str, int, int], str]
# GPU UUID -> (holder, allocation) of everything counted there (mig.reconstruct.NodeOccupancy.holders)
Holders = Mapping[str, Sequence[tuple[object, MigAllocation]]]


def last_user_key(gpu_uuid: str, profile: str, placement: Placement) -> tuple[str, str, int, int]:
    """The key `LastUsers` remembers a placement's last holder under."""
    return (gpu_uuid, profile, placement.start, placement.size)


def onto_idle(
    request: PodRequest,
    plan: Plan,
    gpus: Sequence[GpuState],
    idle: Mapping[str, Sequence[IdleInstance]],
    namespace: str,
    last_users: LastUsers,
) -> Plan | None:
    """The single-device `plan` moved onto an idle instance (`idle`: the planned node's, by GPU) of
    the planned profile on the same node, so its Allocate creates nothing (the plan itself when it
    already is on one); None when no such instance is free and would be handed to this pod.

    Taken only on a GPU of `gpus` (the node's, with what is counted there occupied) the pod may use,
    at a placement nothing counted holds, and only when the last pod that held it was of `namespace`
    or is not known (a warm-pool instance, or one from before the scheduler started): elsewhere the
    plugin would not hand it over. The planned GPU's instances first, then the node's GPUs in order."""
    device = plan.devices[0]
    if not idle:
        return None
    by_uuid = {g.uuid: g for g in gpus}
    candidates = sorted(
        (x for xs in idle.values() for x in xs if x.profile == device.profile),
        key=lambda x: (x.gpuUUID != device.gpu_uuid, by_uuid[x.gpuUUID].index if x.gpuUUID in by_uuid else 0),
    )
    for x in candidates:
        last = last_users.get(last_user_key(x.gpuUUID, x.profile, x.placement_value))
        if last not in (None, namespace):
            continue  # the plugin would not hand it to this pod
        if x.gpuUUID == device.gpu_uuid and x.placement_value == device.placement:
            return plan  # the engine's own choice is one: no create, kept (never spread)
        g = by_uuid.get(x.gpuUUID)
        moved = onto(request, device, g, x.placement_value) if g is not None else None
        if moved is not None:
            return Plan(plan.node, (moved,))
    return None


def around_idle(
    request: PodRequest, plan: Plan, gpus: Sequence[GpuState], idle: Mapping[str, Sequence[IdleInstance]]
) -> Plan:
    """The single-device `plan` moved, on its GPU, off the idle instances it would overlap (and not
    be handed): the plugin would destroy such an instance in Allocate before creating this one (a
    destroy and a create instead of a create) and a pod of its last user's service would lose it.
    The engine plans the pod again on that GPU alone with the idle placements counted occupied; the
    same profile, else the plan stays."""
    device = plan.devices[0]
    held = [x.placement_value for x in idle.get(device.gpu_uuid, ())]
    if not any(p.overlaps(device.placement) for p in held):
        return plan
    g = next((g for g in gpus if g.uuid == device.gpu_uuid), None)
    if g is None:
        return plan
    asked = replace(request, use_uuids=(g.uuid,))
    other = plan_pod(asked, [replace(g, occupied=(*g.occupied, *held))])
    if isinstance(other, Refusal) or other.devices[0].profile != device.profile:
        return plan
    return Plan(plan.node, other.devices)


def onto(
    request: PodRequest, device: DevicePlacement, g: GpuState, placement: Placement
) -> DevicePlacement | None:
    """The device at `placement` on `g`, if the pod may use that GPU and the placement is one of the
    profile's and free there."""
    if not g.healthy or g.cordoned or request.uuid_exclusion(g.uuid) or request.type_exclusion(g.type):
        return None
    profile = next((p for p in g.profiles if p.name == device.profile), None)
    if profile is None or placement not in profile.placements or placement.mask & g.occupied_mask:
        return None
    return DevicePlacement(
        device.container_index,
        device.device_index,
        g.node,
        g.uuid,
        profile.name,
        placement,
        profile.memory_mb,
        profile.core,
    )


def adjust(
    request: PodRequest,
    plan: Plan,
    index: PlacementIndex,
    gpus: Sequence[GpuState],
    holders: Holders,
    idle: Mapping[str, Sequence[IdleInstance]],
    namespace: str,
    last_users: LastUsers,
    lock_free: bool = False,
) -> Plan:
    """The engine's `plan` for a pod of `namespace`, moved on its node (`gpus`, `holders`, `idle`:
    that node's, as the scheduler counts them; `index`: the scheduler's): onto an idle instance the
    plugin would hand this pod, else off a GPU with creates in flight when the node's binds take no
    node lock (`lock_free`), then off idle instances it would overlap. A plan of several devices
    stays the engine's."""
    if len(plan.devices) != 1:
        return plan
    found = onto_idle(request, plan, gpus, idle, namespace, last_users)
    if found is not None:
        return found
    if lock_free:
        plan = spread(request, plan, index, gpus, holders)
    return around_idle(request, plan, gpus, idle)


def spread(
    request: PodRequest, plan: Plan, index: PlacementIndex, gpus: Sequence[GpuState], holders: Holders
) -> Plan:
    """The engine's single-device plan moved, on its own node, off a GPU with creates in flight.

    A node creates its GPU instances one at a time per GPU, GPUs in parallel, and kubelet admits
    the node's pods one at a time, oldest first: a burst packed onto one GPU waits for that
    GPU's creates in series before kubelet reaches the next pod. So while the chosen GPU has
    reservations not yet realized (no instance on the record: bound but not admitted, or not yet
    bound), the pod takes the engine's best GPU of the same node among those with fewer, with
    the same profile, never a GPU nothing holds yet (that would cost packing: a whole GPU broken
    for a create's seconds); anything else (another profile, no such GPU) keeps the engine's plan. The
    node, the profile and the placement rule stay the engine's: the GPUs a burst touches fill
    first afterwards (fuller GPUs rank first). Only nodes whose pods are bound without HAMi's
    node lock get here: a locked node has one pod in flight at a time."""
    inflight = creates_in_flight(holders)
    untouched = tuple(g.uuid for g in gpus if not g.occupied_mask and not holders.get(g.uuid))
    device = plan.devices[0]
    busy = inflight.get(device.gpu_uuid, 0)
    while busy:
        # never onto a GPU nothing holds: breaking a whole GPU to save a create's seconds costs
        # the next whole-GPU pod its place (a 1g then a 3g share one GPU, as packing wants)
        avoid = tuple(u for u, n in inflight.items() if n >= busy) + untouched
        asked = replace(request, nouse_uuids=request.nouse_uuids + avoid)
        other = index.plan_on(asked, plan.node)
        if other is None or other.devices[0].profile != device.profile:
            break
        plan, device = other, other.devices[0]
        busy = inflight.get(device.gpu_uuid, 0)
    return plan


def creates_in_flight(holders: Holders) -> dict[str, int]:
    """Per GPU, the reservations counted there whose instance is not on a record yet."""
    return {uuid: sum(1 for _u, a in held if not a.runtime_ready) for uuid, held in holders.items()}
