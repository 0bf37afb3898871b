"""Helpers that call pynvml the way real callers do (two-call arrays, byref placements)."""

from __future__ import annotations

import ctypes
from typing import Any

import pynvml
from sim.nvml import hardware
from sim.nvml.hardware import CI_ENUM_BY_SLICES

A100, H100, RTX, A30 = "A100-SXM4-40GB", "H100-SXM5-80GB", "RTX-PRO-6000", "A30"
THREE_MODELS = (A100, H100, RTX)


def find_model(name: str, release: str | None = None) -> hardware.GpuModel:
    """The simulated driver's own facts for a model (never dynmig's catalog: these tests check the
    simulator against its driver data)."""
    return hardware.model(hardware.find_model(name), release)


def gpu0() -> Any:
    """GPU 0's handle, looked up afresh each time as callers do (a handle does not outlive nvmlShutdown)."""
    return pynvml.nvmlDeviceGetHandleByIndex(0)


def placements(handle: Any, profile_id: int) -> list[tuple[int, int]]:
    """The two-call pattern every real caller uses."""
    count = ctypes.c_uint(0)
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, None, ctypes.byref(count))
    array = (pynvml.c_nvmlGpuInstancePlacement_t * count.value)()
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, array, ctypes.byref(count))
    return [(p.start, p.size) for p in array[: count.value]]


def create_gi(handle: Any, profile_id: int, start: int, size: int) -> Any:
    placement = pynvml.c_nvmlGpuInstancePlacement_t()
    placement.start, placement.size = start, size
    return pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, profile_id, ctypes.byref(placement))


def full_ci(gi: Any, slice_count: int) -> Any:
    info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
        gi, CI_ENUM_BY_SLICES[slice_count], pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
    )
    return pynvml.nvmlGpuInstanceCreateComputeInstance(gi, info.id)


def gpu_instances(handle: Any, profile_id: int, capacity: int = 8) -> list[Any]:
    array = (pynvml.c_nvmlGpuInstance_t * capacity)()
    count = ctypes.c_uint(0)
    pynvml.nvmlDeviceGetGpuInstances(handle, profile_id, array, ctypes.byref(count))
    return [array[i] for i in range(count.value)]


def compute_instances(gi: Any, profile_id: int, capacity: int = 8) -> list[Any]:
    array = (pynvml.c_nvmlComputeInstance_t * capacity)()
    count = ctypes.c_uint(0)
    pynvml.nvmlGpuInstanceGetComputeInstances(gi, profile_id, array, ctypes.byref(count))
    return [array[i] for i in range(count.value)]


def mig_uuids_by_index(handle: Any) -> list[tuple[int, int, str]]:
    """HAMi's walk: (GI ID, CI ID, UUID) of every MIG device, in index order."""
    out = []
    for i in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
        except pynvml.NVMLError_NotFound:
            continue
        out.append(
            (
                pynvml.nvmlDeviceGetGpuInstanceId(mig),
                pynvml.nvmlDeviceGetComputeInstanceId(mig),
                pynvml.nvmlDeviceGetUUID(mig),
            )
        )
    return out


def child_create(argv: list[str]) -> int:
    """Entry for `python -m sim.nvml.launch ... -- nvml_testkit:child_create START`: a separate
    process creating a 1g GI + CI at START on GPU 0 through plain pynvml, as a plugin would."""
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE)
        gi = create_gi(handle, info.id, int(argv[0]), 1)
        full_ci(gi, 1)
        print(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, 0)))
        return 0
    except pynvml.NVMLError as error:
        print(f"error {error.value}")
        return 1
    finally:
        pynvml.nvmlShutdown()
