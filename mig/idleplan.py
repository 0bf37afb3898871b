"""Where a single-device pod goes relative to the MIG instances its node keeps idle (mig/idle.py).

The engine counts an idle instance as free and does not prefer it, so a churning service's new pod
would land beside its predecessor's idle instance: a create in its Allocate, and a destroy later.
After the engine's plan the extender (webhooks/fleet.py) therefore moves the pod:

- `onto_idle`: onto an idle instance of the planned profile on the planned node, where the node's
  plugin would hand it over (its last user was of the pod's namespace, or is not known);
- else `around_idle`: off an idle instance it would overlap and not be handed, on the same GPU.

Pure functions of the node's GPUs as the scheduler counts them (idle placements free), the node's
idle list and the namespaces of the placements' last users, so the packing bench replays exactly the
extender's rules (bench/_packing/reuse.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from mig.idle import IdleInstance
from mig.placement import DevicePlacement, GpuState, Plan, PodRequest, Refusal, plan_pod
from mig.types import Placement

# (GPU UUID, profile, start, size) -> namespace of the last pod that held that placement
LastUsers = Mapping[tuple[str, str, int, int], str]


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
