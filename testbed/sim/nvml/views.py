"""Read-only views of the simulated node for tests, the lab and `nvidia-smi -L`-style text."""

from __future__ import annotations

from dataclasses import dataclass

from sim.nvml import driver
from sim.nvml.hardware import Placement
from sim.nvml.state import Gpu, State


@dataclass(frozen=True)
class SimComputeInstance:
    ci_id: int
    profile_id: int
    placement: Placement  # compute slices inside the GI
    mig_uuid: str
    mig_index: int  # index for nvmlDeviceGetMigDeviceHandleByIndex
    name: str  # e.g. "1g.10gb" or "1c.3g.40gb"


@dataclass(frozen=True)
class SimGpuInstance:
    gi_id: int
    profile: str
    profile_id: int
    placement: Placement
    compute_instances: tuple[SimComputeInstance, ...]


@dataclass(frozen=True)
class SimProcess:
    pid: int
    used_mib: int
    gi_id: int | None
    ci_id: int | None


@dataclass(frozen=True)
class SimGpu:
    index: int
    uuid: str
    model: str  # model key (drivers/*.yaml)
    name: str  # NVML name
    mig_current: int
    mig_pending: int
    gpu_instances: tuple[SimGpuInstance, ...]
    processes: tuple[SimProcess, ...]

    @property
    def mig_uuids(self) -> tuple[str, ...]:
        pairs = [(ci.mig_index, ci.mig_uuid) for gi in self.gpu_instances for ci in gi.compute_instances]
        return tuple(uuid for _, uuid in sorted(pairs))

    @property
    def placements(self) -> tuple[Placement, ...]:
        return tuple(sorted(gi.placement for gi in self.gpu_instances))


def gpu_views(state: State) -> list[SimGpu]:
    return [_gpu_view(gpu) for gpu in state.gpus]


def _gpu_view(gpu: Gpu) -> SimGpu:
    index = {ci.serial: i for i, (_, ci) in enumerate(driver.mig_devices(gpu))}
    gis = []
    for gi in sorted(gpu.gis, key=lambda g: g.gi_id):
        spec = driver.gi_spec(gpu, gi)
        cis = tuple(
            SimComputeInstance(
                ci.ci_id,
                ci.profile_id,
                Placement(ci.start, ci.size),
                ci.uuid,
                index.get(ci.serial, -1),
                driver.ci_profile_by_id(gpu, gi, ci.profile_id).name.removeprefix("MIG "),
            )
            for ci in sorted(gi.cis, key=lambda c: c.ci_id)
        )
        gis.append(SimGpuInstance(gi.gi_id, spec.name, gi.profile_id, gi.placement, cis))
    procs = tuple(SimProcess(p.pid, p.used_mib, p.gi_id, p.ci_id) for p in gpu.processes)
    return SimGpu(
        gpu.index,
        gpu.uuid,
        gpu.model.key,
        gpu.model.nvml_name,
        gpu.mig_current,
        gpu.mig_pending,
        tuple(gis),
        procs,
    )


def nvidia_smi_list(state: State) -> str:
    """Text like `nvidia-smi -L` (R470+ format, mig-facts §7.2)."""
    lines = []
    for gpu in gpu_views(state):
        lines.append(f"GPU {gpu.index}: {gpu.name} (UUID: {gpu.uuid})")
        devices = sorted((ci.mig_index, ci) for gi in gpu.gpu_instances for ci in gi.compute_instances)
        for idx, ci in devices:
            lines.append(f"  MIG {ci.name:<11} Device {idx:>2}: (UUID: {ci.mig_uuid})")
    return "\n".join(lines) + "\n"
