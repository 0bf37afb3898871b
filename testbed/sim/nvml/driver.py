"""What the NVIDIA driver does with MIG, as pure functions over the simulated `State`.

Every rule raises `NvmlFault(code)` exactly where the driver returns that code: illegal placement
-> INVALID_ARGUMENT, overlap / instance count / ALL_ME exclusion -> INSUFFICIENT_RESOURCES,
destroy with CIs or processes -> IN_USE, unknown IDs -> NOT_FOUND, MIG disabled -> NOT_SUPPORTED.
No ctypes here: `library.py` translates the C ABI into these calls.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.nvml import codes
from sim.nvml.codes import NvmlFault
from sim.nvml.hardware import (
    CI_ENUM_BY_SLICES,
    COMPUTE_INSTANCE_PROFILE_COUNT,
    ENUM_1_SLICE_ALL_ME,
    ENUM_1_SLICE_NO_ME,
    ENUM_2_SLICE_ALL_ME,
    ENUM_2_SLICE_NO_ME,
    GPU_INSTANCE_PROFILE_COUNT,
    Placement,
)
from sim.nvml.hardware import GiProfile as ProfileSpec
from sim.nvml.identity import driver_slot_order, mig_uuid, tree_gi_id
from sim.nvml.state import FRESH, ComputeInstance, Gpu, GpuInstance, Process, State

CI_PROFILE_COUNT = COMPUTE_INSTANCE_PROFILE_COUNT
ENGINE_PROFILE_SHARED = 0
_ALL_ME = {ENUM_1_SLICE_ALL_ME, ENUM_2_SLICE_ALL_ME}
_NO_ME = {ENUM_1_SLICE_NO_ME, ENUM_2_SLICE_NO_ME}


# ---- MIG mode -----------------------------------------------------------------------------------


def require_mig(gpu: Gpu) -> None:
    if gpu.mig_current != codes.MIG_ENABLE:
        raise NvmlFault(codes.NOT_SUPPORTED, f"MIG mode is disabled on {gpu.uuid}")


def set_mig_mode(state: State, gpu: Gpu, mode: int) -> int:
    """Returns the activation status (the driver's out-parameter)."""
    if mode not in (codes.MIG_DISABLE, codes.MIG_ENABLE):
        raise NvmlFault(codes.INVALID_ARGUMENT, f"MIG mode {mode}")
    if mode == codes.MIG_DISABLE and gpu.gis:
        raise NvmlFault(codes.IN_USE, "GPU instances exist")
    gpu.mig_pending = mode
    if gpu.mig_current == mode:
        return codes.SUCCESS
    if gpu.processes:
        return codes.IN_USE
    if gpu.needs_reset:
        return codes.RESET_REQUIRED
    gpu.mig_current = mode
    state.record("set_mig_mode", gpu=gpu.uuid, mode=mode)
    return codes.SUCCESS


def reset_gpu(state: State, gpu: Gpu) -> None:
    """A GPU reset: the pending MIG mode takes effect and every instance and process is gone."""
    gpu.mig_current = gpu.mig_pending
    gpu.needs_reset = False
    gpu.gis.clear()
    gpu.processes.clear()
    state.record("reset", gpu=gpu.uuid, mode=gpu.mig_current)


# ---- GPU-instance profiles ----------------------------------------------------------------------


def gi_profile_by_enum(gpu: Gpu, enum: int) -> ProfileSpec:
    if not 0 <= enum < GPU_INSTANCE_PROFILE_COUNT:
        raise NvmlFault(codes.INVALID_ARGUMENT, f"profile enum {enum} >= NVML_GPU_INSTANCE_PROFILE_COUNT")
    require_mig(gpu)
    spec = gpu.model.profile_by_enum(enum)
    if spec is None:
        raise NvmlFault(codes.NOT_SUPPORTED, f"{gpu.model.key} has no profile with enum {enum}")
    return spec


def gi_profile_by_id(gpu: Gpu, profile_id: int) -> ProfileSpec:
    spec = gpu.model.profile_by_id(profile_id)
    if spec is None:
        raise NvmlFault(codes.INVALID_ARGUMENT, f"{gpu.model.key} has no GI profile ID {profile_id}")
    return spec


def possible_placements(gpu: Gpu, profile_id: int) -> list[Placement]:
    """Static: all placements of the profile, whatever is occupied (and whatever the MIG mode)."""
    return list(gi_profile_by_id(gpu, profile_id).placements)


def remaining_capacity(gpu: Gpu, profile_id: int) -> int:
    require_mig(gpu)
    spec = gi_profile_by_id(gpu, profile_id)
    if _all_me_blocks(gpu, spec):
        return 0
    taken = [g.placement for g in gpu.gis]
    free = 0
    for placement in spec.placements:
        if not any(placement.overlaps(t) for t in taken):
            taken.append(placement)
            free += 1
    existing = sum(1 for g in gpu.gis if g.profile_id == profile_id)
    return max(0, min(free, spec.instance_count - existing))


# ---- GPU instances ------------------------------------------------------------------------------


def reported_gi_id(gpu: Gpu, placement: Placement) -> int:
    tree = tree_gi_id(gpu.model, placement, gpu.gi_numbering)
    return gpu.gi_id_map[tree] if gpu.gi_id_map else tree


def create_gi(state: State, gpu: Gpu, profile_id: int, placement: Placement | None) -> GpuInstance:
    require_mig(gpu)
    spec = gi_profile_by_id(gpu, profile_id)
    if placement is not None and placement not in spec.placements:
        legal = ", ".join(str(p) for p in spec.placements)
        raise NvmlFault(codes.INVALID_ARGUMENT, f"placement {placement} is not one of {spec.name}'s: {legal}")
    if any(p.gi_id is None for p in gpu.processes):
        raise NvmlFault(codes.IN_USE, "a process holds the GPU")
    _tick_create_failure(state, "gi")
    _check_room(gpu, spec)
    chosen = placement or _driver_choice(gpu, spec)
    if any(chosen.overlaps(g.placement) for g in gpu.gis):
        raise NvmlFault(codes.INSUFFICIENT_RESOURCES, f"placement {chosen} overlaps an existing GPU instance")
    gi = GpuInstance(state.take_serial(), reported_gi_id(gpu, chosen), profile_id, chosen.start, chosen.size)
    gpu.gis.append(gi)
    state.record("create_gi", gpu=gpu.uuid, gi_id=gi.gi_id, profile=spec.name, placement=str(chosen))
    return gi


def _check_room(gpu: Gpu, spec: ProfileSpec) -> None:
    existing = sum(1 for g in gpu.gis if g.profile_id == spec.profile_id)
    if existing >= spec.instance_count:
        raise NvmlFault(
            codes.INSUFFICIENT_RESOURCES, f"{spec.name}: instanceCount {spec.instance_count} reached"
        )
    if _all_me_blocks(gpu, spec):
        raise NvmlFault(
            codes.INSUFFICIENT_RESOURCES, f"{spec.name}: excluded by an all-media-engine instance"
        )


def _all_me_blocks(gpu: Gpu, spec: ProfileSpec) -> bool:
    """ALL_ME profiles allow only _NO_ME profiles beside them (nvml.h)."""
    enums = [gpu.model.profile_by_id(g.profile_id).enum for g in gpu.gis]
    if spec.enum in _ALL_ME:
        return any(e not in _NO_ME for e in enums)
    return spec.enum not in _NO_ME and any(e in _ALL_ME for e in enums)


def _driver_choice(gpu: Gpu, spec: ProfileSpec) -> Placement:
    by_start = {p.start: p for p in spec.placements}
    for start in driver_slot_order(gpu.model, spec.placement_size, list(by_start)):
        if not any(by_start[start].overlaps(g.placement) for g in gpu.gis):
            return by_start[start]
    raise NvmlFault(codes.INSUFFICIENT_RESOURCES, f"no free slot for {spec.name}")


def _tick_create_failure(state: State, kind: str) -> None:
    for failure in list(state.faults.create_failures):
        if failure.kind != kind:
            continue
        failure.countdown -= 1
        if failure.countdown <= 0:
            state.faults.create_failures.remove(failure)
            raise NvmlFault(failure.code, f"injected failure of this {kind} create")


def list_gis(gpu: Gpu, profile_id: int) -> list[GpuInstance]:
    require_mig(gpu)
    gi_profile_by_id(gpu, profile_id)
    return sorted((g for g in gpu.gis if g.profile_id == profile_id), key=lambda g: g.gi_id)


def gi_by_id(gpu: Gpu, gi_id: int) -> GpuInstance:
    require_mig(gpu)
    gi = gpu.gi(gi_id)
    if gi is None:
        raise NvmlFault(codes.NOT_FOUND, f"no GPU instance {gi_id} on {gpu.uuid}")
    return gi


def destroy_gi(state: State, gpu: Gpu, gi: GpuInstance) -> None:
    if gi.cis:
        raise NvmlFault(codes.IN_USE, f"GPU instance {gi.gi_id} still has compute instances")
    if processes_of(gpu, gi, None):
        raise NvmlFault(codes.IN_USE, f"processes run on GPU instance {gi.gi_id}")
    gpu.gis.remove(gi)
    state.record(
        "destroy_gi",
        gpu=gpu.uuid,
        gi_id=gi.gi_id,
        placement=str(gi.placement),
        profile=gpu.model.profile_by_id(gi.profile_id).name,
    )


# ---- compute-instance profiles and compute instances --------------------------------------------


@dataclass(frozen=True)
class CiProfile:
    profile_id: int  # = the CI profile enum
    slice_count: int
    placements: tuple[Placement, ...]
    sm_count: int
    name: str

    @property
    def instance_count(self) -> int:
        return len(self.placements)


def ci_profiles(gi_spec: ProfileSpec) -> dict[int, CiProfile]:
    """CI profiles a GI of this profile offers: the full CI plus the smaller 1c/2c/3c/4c splits."""
    s = gi_spec.slice_count
    out = {}
    for k, enum in CI_ENUM_BY_SLICES.items():
        if k > s or (k != s and (k > 4 or (s == 4 and k == 3))):
            continue
        placements = tuple(Placement(start, k) for start in range(0, s - k + 1, k))
        name = f"MIG {gi_spec.name}" if k == s else f"MIG {k}c.{gi_spec.name}"
        out[enum] = CiProfile(enum, k, placements, gi_spec.sm_count * k // s, name)
    return out


def ci_profile_by_enum(gpu: Gpu, gi: GpuInstance, enum: int, engine_profile: int) -> CiProfile:
    if not 0 <= enum < CI_PROFILE_COUNT or engine_profile != ENGINE_PROFILE_SHARED:
        raise NvmlFault(codes.INVALID_ARGUMENT, f"CI profile {enum}, engine profile {engine_profile}")
    profile = ci_profiles(gi_spec(gpu, gi)).get(enum)
    if profile is None:
        raise NvmlFault(codes.NOT_SUPPORTED, f"GPU instance {gi.gi_id} has no CI profile {enum}")
    return profile


def ci_profile_by_id(gpu: Gpu, gi: GpuInstance, profile_id: int) -> CiProfile:
    profile = ci_profiles(gi_spec(gpu, gi)).get(profile_id)
    if profile is None:
        raise NvmlFault(codes.INVALID_ARGUMENT, f"GPU instance {gi.gi_id} has no CI profile ID {profile_id}")
    return profile


def gi_spec(gpu: Gpu, gi: GpuInstance) -> ProfileSpec:
    return gpu.model.profile_by_id(gi.profile_id)


def ci_remaining_capacity(gpu: Gpu, gi: GpuInstance, profile_id: int) -> int:
    profile = ci_profile_by_id(gpu, gi, profile_id)
    taken = [Placement(c.start, c.size) for c in gi.cis]
    free = 0
    for placement in profile.placements:
        if not any(placement.overlaps(t) for t in taken):
            taken.append(placement)
            free += 1
    return free


def create_ci(
    state: State, gpu: Gpu, gi: GpuInstance, profile_id: int, placement: Placement | None
) -> ComputeInstance:
    profile = ci_profile_by_id(gpu, gi, profile_id)
    if placement is not None and placement not in profile.placements:
        raise NvmlFault(codes.INVALID_ARGUMENT, f"CI placement {placement} is not legal for {profile.name}")
    _tick_create_failure(state, "ci")
    taken = [Placement(c.start, c.size) for c in gi.cis]
    candidates = [placement] if placement else list(profile.placements)
    chosen = next((p for p in candidates if not any(p.overlaps(t) for t in taken)), None)
    if chosen is None:
        raise NvmlFault(
            codes.INSUFFICIENT_RESOURCES, f"no room for {profile.name} in GPU instance {gi.gi_id}"
        )
    ci_id = min(set(range(len(gi.cis) + 1)) - {c.ci_id for c in gi.cis})
    serial = state.take_serial()
    generation = serial if state.mig_uuids == FRESH else 0
    uuid = mig_uuid(gpu.uuid, gi.placement, gi.profile_id, chosen.start, profile_id, generation)
    ci = ComputeInstance(serial, ci_id, profile_id, chosen.start, chosen.size, uuid)
    gi.cis.append(ci)
    state.record("create_ci", gpu=gpu.uuid, gi_id=gi.gi_id, ci_id=ci_id, uuid=uuid)
    return ci


def list_cis(gpu: Gpu, gi: GpuInstance, profile_id: int) -> list[ComputeInstance]:
    ci_profile_by_id(gpu, gi, profile_id)
    return sorted((c for c in gi.cis if c.profile_id == profile_id), key=lambda c: c.ci_id)


def ci_by_id(gi: GpuInstance, ci_id: int) -> ComputeInstance:
    ci = gi.ci(ci_id)
    if ci is None:
        raise NvmlFault(codes.NOT_FOUND, f"no compute instance {ci_id} in GPU instance {gi.gi_id}")
    return ci


def destroy_ci(state: State, gpu: Gpu, gi: GpuInstance, ci: ComputeInstance) -> None:
    if processes_of(gpu, gi, ci):
        raise NvmlFault(codes.IN_USE, f"processes run on compute instance {gi.gi_id}/{ci.ci_id}")
    gi.cis.remove(ci)
    state.record("destroy_ci", gpu=gpu.uuid, gi_id=gi.gi_id, ci_id=ci.ci_id, uuid=ci.uuid)


# ---- MIG devices and processes ------------------------------------------------------------------


def mig_devices(gpu: Gpu, listed_at: float | None = None) -> list[tuple[GpuInstance, ComputeInstance]]:
    """One MIG device per CI, indexed in (GI ID, CI ID) order as the driver does. With `listed_at`
    (a wall-clock time), only the MIG devices NVML's list shows by then (a node spec's listing lag)."""
    if gpu.mig_current != codes.MIG_ENABLE:
        return []
    pairs = [(gi, ci) for gi in gpu.gis for ci in gi.cis if listed_at is None or ci.visible_at <= listed_at]
    return sorted(pairs, key=lambda pair: (pair[0].gi_id, pair[1].ci_id))


def processes_of(gpu: Gpu, gi: GpuInstance | None, ci: ComputeInstance | None) -> list[Process]:
    """Processes of the whole GPU (gi None), of a GI (ci None), or of one CI."""
    if gi is None:
        return list(gpu.processes)
    return [
        p
        for p in gpu.processes
        if p.gi_id == gi.gi_id and (ci is None or p.ci_id is None or p.ci_id == ci.ci_id)
    ]
