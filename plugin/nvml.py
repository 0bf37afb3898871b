"""Thin adapter over nvidia-ml-py (`pynvml`): the only module that talks to the NVIDIA driver.

Every call goes through `pynvml.<name>` looked up at call time (never `from pynvml import X`), so the
simulated library installed under `pynvml` is what runs in tests, with our code unchanged.

Traps handled here (shared reference mig-facts §3/§4):
- GI profiles are resolved by FULL name: every enum 0..COUNT-1 is queried (NOT_SUPPORTED and
  INVALID_ARGUMENT skipped) and the v2 info `name` (bytes, maybe "MIG 1g.10gb") is matched, so
  `1g.10gb`, `1g.20gb` and `1g.10gb+me` are distinct. `info.id`, not the enum, goes to later calls.
- Placements are caller-allocated arrays (two-call pattern).
- `CreateGpuInstanceWithPlacement` takes a pointer: the placement is passed with `ctypes.byref`.
- GI IDs are opaque: a GI's placement is always read from `GpuInstanceGetInfo`, never derived.

Time spent inside NVML is added to `Nvml.nvml_seconds` so the Allocate overhead can be measured
without the driver's (or the simulator's) own time.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pynvml

from mig.catalog import CI_ENUM_BY_SLICES
from mig.types import Placement

# NVML return codes we branch on (nvml.h; stable ABI values).
NOT_SUPPORTED, INVALID_ARGUMENT, NOT_FOUND, INSUFFICIENT_SIZE = 3, 2, 6, 7
IN_USE, INSUFFICIENT_RESOURCES, FUNCTION_NOT_FOUND = 19, 23, 13
GI_PROFILE_COUNT = 0x12
CI_PROFILE_COUNT = 0x9
CI_ENGINE_SHARED = 0
MIG_DISABLE, MIG_ENABLE = 0, 1


class NvmlError(RuntimeError):
    """An NVML call failed; `code` is NVML's return code, `op` the call."""

    def __init__(self, op: str, code: int, detail: str = ""):
        self.op, self.code = op, code
        super().__init__(f"{op}: NVML error {code}" + (f" ({detail})" if detail else ""))


@dataclass(frozen=True)
class GpuDevice:
    index: int
    uuid: str
    name: str
    memory_mib: int
    numa: int
    handle: Any


@dataclass(frozen=True)
class GiProfile:
    """A GPU-instance profile as this GPU's NVML reports it."""

    name: str
    enum: int
    id: int
    memory_mib: int
    sm_count: int
    slice_count: int
    instance_count: int
    placements: tuple[Placement, ...]


@dataclass(frozen=True)
class GiRecord:
    gi_id: int
    profile_id: int
    placement: Placement
    handle: Any


@dataclass(frozen=True)
class CiRecord:
    ci_id: int
    profile_id: int
    handle: Any


def profile_name(raw: bytes | str) -> str:
    """The profile name from a v2 info `name` (bytes, NUL-padded; some drivers prefix "MIG ")."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, (bytes, bytearray)) else str(raw)
    text = text.split("\x00", 1)[0].strip()
    return text[4:].strip() if text.startswith("MIG ") else text


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, (bytes, bytearray)) else str(value)


class Nvml:
    """NVML operations the plugin needs, each a few pynvml calls, errors as NvmlError."""

    def __init__(self) -> None:
        self.nvml_seconds = 0.0
        self.nvml_calls = 0
        self._time_lock = threading.Lock()

    # ---- plumbing

    def _call(self, name: str, *args: Any) -> Any:
        fn: Callable[..., Any] = getattr(pynvml, name)
        started = time.perf_counter()
        try:
            return fn(*args)
        except pynvml.NVMLError as error:
            raise NvmlError(name, int(error.value), _safe_str(error)) from None
        except Exception as error:  # noqa: BLE001 - e.g. NVMLLibraryMismatchError: a symbol the driver lacks
            raise NvmlError(name, FUNCTION_NOT_FOUND, f"{type(error).__name__}: {error}") from None
        finally:
            elapsed = time.perf_counter() - started
            with self._time_lock:
                self.nvml_seconds += elapsed
                self.nvml_calls += 1

    def _optional(self, codes: tuple[int, ...], name: str, *args: Any) -> Any:
        try:
            return self._call(name, *args)
        except NvmlError as error:
            if error.code in codes:
                return None
            raise

    def init(self) -> None:
        self._call("nvmlInit")

    def shutdown(self) -> None:
        self._call("nvmlShutdown")

    # ---- devices

    def devices(self) -> list[GpuDevice]:
        out = []
        for index in range(self._call("nvmlDeviceGetCount")):
            handle = self._call("nvmlDeviceGetHandleByIndex", index)
            memory = self._call("nvmlDeviceGetMemoryInfo", handle)
            numa = self._optional((NOT_SUPPORTED, FUNCTION_NOT_FOUND), "nvmlDeviceGetNumaNodeId", handle)
            out.append(
                GpuDevice(
                    index=index,
                    uuid=_text(self._call("nvmlDeviceGetUUID", handle)),
                    name=_text(self._call("nvmlDeviceGetName", handle)),
                    memory_mib=int(memory.total) // (1024 * 1024),
                    numa=int(numa) if isinstance(numa, int) and numa >= 0 else 0,
                    handle=handle,
                )
            )
        return out

    def minor_number(self, handle: Any) -> int:
        """The GPU's device minor: its `/dev/nvidia<minor>` and its rows in the MIG capability table."""
        return int(self._call("nvmlDeviceGetMinorNumber", handle))

    def mig_mode(self, handle: Any) -> tuple[int, int]:
        current, pending = self._call("nvmlDeviceGetMigMode", handle)
        return int(current), int(pending)

    def enable_mig(self, handle: Any) -> int:
        """Returns NVML's activation status (0 = active now; otherwise pending a reset or in use)."""
        # why: MIG mode must be on before any GPU instance can exist; it is only enabled on GPUs
        # the caller proved idle, allowlisted and not excluded.
        return int(self._call("nvmlDeviceSetMigMode", handle, MIG_ENABLE))

    # ---- profiles and placements

    def gi_profiles(self, handle: Any) -> list[GiProfile]:
        """Every GI profile this GPU supports, with its full NVML name and possible placements."""
        out = []
        for enum in range(GI_PROFILE_COUNT):
            info = self._optional(
                (NOT_SUPPORTED, INVALID_ARGUMENT), "nvmlDeviceGetGpuInstanceProfileInfo", handle, enum
            )
            if info is None:
                continue
            out.append(
                GiProfile(
                    name=profile_name(info.name),
                    enum=enum,
                    id=int(info.id),
                    memory_mib=int(info.memorySizeMB),
                    sm_count=int(info.multiprocessorCount),
                    slice_count=int(info.sliceCount),
                    instance_count=int(info.instanceCount),
                    placements=self.possible_placements(handle, int(info.id)),
                )
            )
        return out

    def possible_placements(self, handle: Any, profile_id: int) -> tuple[Placement, ...]:
        count = ctypes.c_uint(0)
        self._call(
            "nvmlDeviceGetGpuInstancePossiblePlacements", handle, profile_id, None, ctypes.byref(count)
        )
        if count.value == 0:
            return ()
        array = (pynvml.c_nvmlGpuInstancePlacement_t * count.value)()
        self._call(
            "nvmlDeviceGetGpuInstancePossiblePlacements", handle, profile_id, array, ctypes.byref(count)
        )
        return tuple(Placement(int(array[i].start), int(array[i].size)) for i in range(count.value))

    # ---- GPU and compute instances

    def create_gi(self, handle: Any, profile_id: int, placement: Placement) -> GiRecord:
        c_placement = pynvml.c_nvmlGpuInstancePlacement_t()
        c_placement.start, c_placement.size = placement.start, placement.size
        # why: this carves the reserved slices out of the GPU; only ever at the exact placement the
        # scheduler reserved (checked against NVML's possible placements by the caller).
        gi = self._call(
            "nvmlDeviceCreateGpuInstanceWithPlacement", handle, profile_id, ctypes.byref(c_placement)
        )
        return self.gi_record(gi)

    def gi_record(self, gi: Any) -> GiRecord:
        info = self._call("nvmlGpuInstanceGetInfo", gi)
        return GiRecord(
            int(info.id),
            int(info.profileId),
            Placement(int(info.placement.start), int(info.placement.size)),
            gi,
        )

    def create_ci(self, gi: Any, slice_count: int) -> CiRecord:
        """The full, shared-engine CI of a GI with `slice_count` compute slices."""
        enum = CI_ENUM_BY_SLICES.get(slice_count)
        if enum is None:
            raise NvmlError(
                "nvmlGpuInstanceCreateComputeInstance",
                NOT_SUPPORTED,
                f"no compute-instance profile for {slice_count} slices",
            )
        info = self._call("nvmlGpuInstanceGetComputeInstanceProfileInfo", gi, enum, CI_ENGINE_SHARED)
        # why: a GI is usable by a container only through a compute instance (the MIG device).
        ci = self._call("nvmlGpuInstanceCreateComputeInstance", gi, int(info.id))
        return self.ci_record(ci)

    def ci_record(self, ci: Any) -> CiRecord:
        info = self._call("nvmlComputeInstanceGetInfo", ci)
        return CiRecord(int(info.id), int(info.profileId), ci)

    def gi_by_id(self, handle: Any, gi_id: int) -> GiRecord | None:
        """None when NVML says the GI is gone (NOT_FOUND, or NOT_SUPPORTED: MIG off)."""
        gi = self._optional((NOT_FOUND, NOT_SUPPORTED), "nvmlDeviceGetGpuInstanceById", handle, gi_id)
        return None if gi is None else self.gi_record(gi)

    def ci_by_id(self, gi: Any, ci_id: int) -> CiRecord | None:
        ci = self._optional((NOT_FOUND,), "nvmlGpuInstanceGetComputeInstanceById", gi, ci_id)
        return None if ci is None else self.ci_record(ci)

    def list_gis(self, handle: Any, profiles: list[GiProfile]) -> list[GiRecord]:
        out: list[GiRecord] = []
        for profile in profiles:
            size = max(profile.instance_count, 1)
            array = (pynvml.c_nvmlGpuInstance_t * size)()
            count = ctypes.c_uint(size)
            self._call("nvmlDeviceGetGpuInstances", handle, profile.id, array, ctypes.byref(count))
            out.extend(self.gi_record(array[i]) for i in range(count.value))
        return out

    def list_cis(self, gi: Any) -> list[CiRecord]:
        out: list[CiRecord] = []
        for enum in range(CI_PROFILE_COUNT):
            info = self._optional(
                (NOT_SUPPORTED, INVALID_ARGUMENT),
                "nvmlGpuInstanceGetComputeInstanceProfileInfo",
                gi,
                enum,
                CI_ENGINE_SHARED,
            )
            if info is None:
                continue
            size = max(int(info.instanceCount), 1)
            array = (pynvml.c_nvmlComputeInstance_t * size)()
            count = ctypes.c_uint(size)
            self._call("nvmlGpuInstanceGetComputeInstances", gi, int(info.id), array, ctypes.byref(count))
            out.extend(self.ci_record(array[i]) for i in range(count.value))
        return out

    def destroy_ci(self, ci: Any) -> None:
        self._call("nvmlComputeInstanceDestroy", ci)

    def destroy_gi(self, gi: Any) -> None:
        self._call("nvmlGpuInstanceDestroy", gi)

    def mig_uuid(self, handle: Any, gi_id: int, ci_id: int) -> str | None:
        """The MIG device UUID of (GI, CI), found by walking the MIG device handles."""
        for migdev in self._mig_devices(handle):
            if (
                self._call("nvmlDeviceGetGpuInstanceId", migdev) == gi_id
                and self._call("nvmlDeviceGetComputeInstanceId", migdev) == ci_id
            ):
                return _text(self._call("nvmlDeviceGetUUID", migdev))
        return None

    def _mig_devices(self, handle: Any) -> list[Any]:
        out = []
        for i in range(int(self._call("nvmlDeviceGetMaxMigDeviceCount", handle))):
            migdev = self._optional(
                (NOT_FOUND, INVALID_ARGUMENT), "nvmlDeviceGetMigDeviceHandleByIndex", handle, i
            )
            if migdev is not None:
                out.append(migdev)
        return out

    # ---- processes

    def mig_processes(self, handle: Any, gi_id: int, ci_id: int) -> list[int]:
        """PIDs of compute processes on the MIG device (GI, CI) of a GPU (queried on the MIG device
        handle, as NVML reports per MIG device); a GI without that MIG device has none."""
        for migdev in self._mig_devices(handle):
            if (
                self._call("nvmlDeviceGetGpuInstanceId", migdev) == gi_id
                and self._call("nvmlDeviceGetComputeInstanceId", migdev) == ci_id
            ):
                return [int(p.pid) for p in self._call("nvmlDeviceGetComputeRunningProcesses", migdev)]
        return []

    def has_processes(self, handle: Any) -> bool:
        """True if any compute or graphics process runs on the GPU or one of its MIG devices.

        Raises NvmlError when NVML cannot tell; callers count that as busy.
        """
        targets = [handle]
        current, _ = self.mig_mode(handle)
        if current == MIG_ENABLE:
            targets.extend(self._mig_devices(handle))
        for target in targets:
            if self._call("nvmlDeviceGetComputeRunningProcesses", target):
                return True
            # A library without the graphics query cannot have graphics clients to report.
            if self._optional((FUNCTION_NOT_FOUND,), "nvmlDeviceGetGraphicsRunningProcesses", target):
                return True
        return False


def _safe_str(error: Exception) -> str:
    try:
        return str(error)
    except Exception:  # noqa: BLE001 - pynvml's str() can call into the library
        return ""
