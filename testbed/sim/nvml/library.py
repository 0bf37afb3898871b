"""The fake `libnvidia-ml.so.1` that `pynvml.nvmlLib` points at while the simulator is installed.

pynvml resolves each C symbol with `getattr(nvmlLib, name)` and calls it with raw ctypes
arguments; this object answers exactly those calls: `byref(x)` arrives as a CArgObject (we write
`._obj`), caller-allocated arrays as ctypes arrays, NULL as None, handles as `POINTER(struct)`
values holding an address we handed out. A symbol we do not implement is missing, so pynvml
raises `NVMLError_FunctionNotFound` as it would against an older driver.
"""

from __future__ import annotations

import collections
import ctypes
import itertools
import re
import time
from collections.abc import Callable
from typing import Any

from sim.nvml import codes, driver
from sim.nvml.codes import NvmlFault
from sim.nvml.hardware import GpuModel, Placement
from sim.nvml.state import DRIVER as TIMED
from sim.nvml.state import ComputeInstance, Gpu, GpuInstance, State

MIB = 1024 * 1024
GI_PROFILE_INFO_V2 = 0x02000098
CI_PROFILE_INFO_V2 = 0x02000088
MEMORY_V2 = 0x02000028
DRIVER_VERSION = "580.95.05"  # a node without GPUs; otherwise the first GPU's driver release
_HANDLE_BASE = 0x5EED_0000_0000
_VERSION_SUFFIX = re.compile(r"(_v\d+|V)$")
_NO_INIT_NEEDED = {"nvmlInitWithFlags", "nvmlInit_v2", "nvmlErrorString"}
# NVML's pre-R470 MIG device identifier, still accepted by nvmlDeviceGetHandleByUUID (NVML change
# log: "accept both UUID formats, 'MIG-UUID' and 'MIG-GPU UUID/GID/CID'").
_LEGACY_MIG_ID = re.compile(r"^MIG-(GPU-[0-9a-f-]{36})/(\d{1,4})/(\d{1,4})$")


class _Symbol:
    """One exported C function: a plain callable with settable `restype`/`argtypes`, as ctypes
    function pointers have (pynvml sets `nvmlErrorString.restype`)."""

    def __init__(self, lib: SimulatedLibrary, name: str, handler: Callable[..., Any]) -> None:
        self.__name__ = name
        self.restype: Any = ctypes.c_int
        self.argtypes: Any = None
        self._lib = lib
        self._handler = handler

    def __call__(self, *args: Any) -> Any:
        return self._lib.dispatch(self.__name__, self._handler, args)


class SimulatedLibrary:
    """Per-process library object: init refcount, handle table, call log. State is in the store."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.init_count = 0
        self.calls: collections.deque[str] = collections.deque(maxlen=20000)
        self.misuse: list[str] = []  # C-ABI mistakes a real driver would crash or misread on
        self._addr_by_key: dict[tuple[Any, ...], int] = {}
        self._key_by_addr: dict[int, tuple[Any, ...]] = {}
        self._next = itertools.count(1)
        self._symbols = {name: _Symbol(self, name, getattr(self, "_" + name)) for name in _EXPORTS}

    def __getattr__(self, name: str) -> _Symbol:
        symbols = self.__dict__.get("_symbols", {})
        if name in symbols:
            return symbols[name]
        raise AttributeError(name)

    # ---- call plumbing --------------------------------------------------------------------------

    def dispatch(self, name: str, handler: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        self.calls.append(name)
        if name == "nvmlErrorString":
            return handler(*args)
        if name not in _NO_INIT_NEEDED and self.init_count <= 0:
            return codes.UNINITIALIZED
        injected = self._take_injected(name)
        if injected is not None:
            return injected
        try:
            result = handler(*args)
        except NvmlFault as fault:
            return fault.code
        return codes.SUCCESS if result is None else result

    def _take_injected(self, name: str) -> int | None:
        keys = (name, _VERSION_SUFFIX.sub("", name))
        with self.store.read() as state:
            if not any(state.faults.errors.get(k) for k in keys):
                return None
        with self.store.mutate() as state:
            key = next((k for k in keys if state.faults.errors.get(k)), None)
            if key is None:
                return None
            queue = state.faults.errors[key]
            code, times = queue[0]
            if times <= 1:
                queue.pop(0)
            else:
                queue[0][1] = times - 1
            if not queue:
                del state.faults.errors[key]
            return code

    # ---- handles --------------------------------------------------------------------------------

    def _addr(self, key: tuple[Any, ...]) -> int:
        if key not in self._addr_by_key:
            addr = _HANDLE_BASE + next(self._next) * 0x40
            self._addr_by_key[key] = addr
            self._key_by_addr[addr] = key
        return self._addr_by_key[key]

    def _key(self, handle: Any) -> tuple[Any, ...]:
        addr = _address_of(handle)
        key = self._key_by_addr.get(addr)
        if key is None:
            raise NvmlFault(codes.INVALID_ARGUMENT, f"unknown handle 0x{addr:x}")
        return key

    def _resolve(
        self, state: State, handle: Any
    ) -> tuple[str, Gpu, GpuInstance | None, ComputeInstance | None]:
        """Handle -> (kind, gpu, gi, ci); stale handles (destroyed instances) are INVALID_ARGUMENT."""
        key = self._key(handle)
        gpu = state.gpu(key[1])
        if gpu is None:
            raise NvmlFault(codes.INVALID_ARGUMENT, "handle of a GPU that is gone")
        if key[0] == "gpu":
            return "gpu", gpu, None, None
        gi = next((g for g in gpu.gis if g.serial == key[2]), None)
        if gi is None:
            raise NvmlFault(codes.INVALID_ARGUMENT, "handle of a destroyed GPU instance")
        if key[0] == "gi":
            return "gi", gpu, gi, None
        ci = next((c for c in gi.cis if c.serial == key[3]), None)
        if ci is None:
            raise NvmlFault(codes.INVALID_ARGUMENT, "handle of a destroyed compute instance")
        return key[0], gpu, gi, ci

    def _device(self, state: State, handle: Any) -> tuple[Gpu, GpuInstance | None, ComputeInstance | None]:
        kind, gpu, gi, ci = self._resolve(state, handle)
        if kind not in ("gpu", "mig"):
            raise NvmlFault(codes.INVALID_ARGUMENT, f"a {kind} handle is not a device handle")
        return gpu, gi, ci

    def _parent(self, state: State, handle: Any) -> Gpu:
        gpu, gi, _ = self._device(state, handle)
        if gi is not None:
            raise NvmlFault(codes.NOT_SUPPORTED, "not supported on a MIG device handle")
        return gpu

    def _gi(self, state: State, handle: Any) -> tuple[Gpu, GpuInstance]:
        kind, gpu, gi, _ = self._resolve(state, handle)
        if kind != "gi":
            raise NvmlFault(codes.INVALID_ARGUMENT, "not a GPU instance handle")
        return gpu, gi

    def _ci(self, state: State, handle: Any) -> tuple[Gpu, GpuInstance, ComputeInstance]:
        kind, gpu, gi, ci = self._resolve(state, handle)
        if kind != "ci":
            raise NvmlFault(codes.INVALID_ARGUMENT, "not a compute instance handle")
        return gpu, gi, ci

    def gpu_addr(self, gpu: Gpu) -> int:
        return self._addr(("gpu", gpu.uuid))

    def mig_addr(self, gpu: Gpu, gi: GpuInstance, ci: ComputeInstance) -> int:
        return self._addr(("mig", gpu.uuid, gi.serial, ci.serial))

    def gi_addr(self, gpu: Gpu, gi: GpuInstance) -> int:
        return self._addr(("gi", gpu.uuid, gi.serial))

    def ci_addr(self, gpu: Gpu, gi: GpuInstance, ci: ComputeInstance) -> int:
        return self._addr(("ci", gpu.uuid, gi.serial, ci.serial))

    # ---- init, errors, system -------------------------------------------------------------------

    def _nvmlInitWithFlags(self, flags: Any) -> None:
        self.init_count += 1

    def _nvmlInit_v2(self) -> None:
        self.init_count += 1

    def _nvmlShutdown(self) -> None:
        self.init_count -= 1

    def _nvmlErrorString(self, code: Any) -> bytes:
        return codes.error_string(_int(code)).encode()

    def _nvmlSystemGetDriverVersion(self, buf: Any, size: Any) -> None:
        with self.store.read() as state:
            version = state.gpus[0].model.release.version if state.gpus else DRIVER_VERSION
        _put_string(buf, size, version)

    # ---- devices --------------------------------------------------------------------------------

    def _nvmlDeviceGetCount_v2(self, count: Any) -> None:
        with self.store.read() as state:
            _out(count).value = len(state.gpus)

    def _nvmlDeviceGetHandleByIndex_v2(self, index: Any, out: Any) -> None:
        with self.store.read() as state:
            i = _int(index)
            if not 0 <= i < len(state.gpus):
                raise NvmlFault(codes.INVALID_ARGUMENT, f"GPU index {i}")
            _put_handle(out, self.gpu_addr(state.gpus[i]))

    def _nvmlDeviceGetHandleByUUID(self, uuid: Any, out: Any) -> None:
        text = _text(uuid)
        legacy = _LEGACY_MIG_ID.match(text)
        with self.store.read() as state:
            if legacy:
                return self._legacy_mig_handle(
                    state, legacy.group(1), int(legacy.group(2)), int(legacy.group(3)), out
                )
            for gpu in state.gpus:
                if gpu.uuid == text:
                    return _put_handle(out, self.gpu_addr(gpu))
                for gi, ci in driver.mig_devices(gpu, time.time()):
                    if ci.uuid == text:
                        return _put_handle(out, self.mig_addr(gpu, gi, ci))
        raise NvmlFault(codes.NOT_FOUND, f"no device {text}")

    def _legacy_mig_handle(self, state: State, gpu_uuid: str, gi_id: int, ci_id: int, out: Any) -> None:
        gpu = state.gpu(gpu_uuid)
        for gi, ci in driver.mig_devices(gpu, time.time()) if gpu else []:
            if (gi.gi_id, ci.ci_id) == (gi_id, ci_id):
                return _put_handle(out, self.mig_addr(gpu, gi, ci))
        raise NvmlFault(codes.NOT_FOUND, f"no MIG device {gpu_uuid}/{gi_id}/{ci_id}")

    def _nvmlDeviceGetUUID(self, handle: Any, buf: Any, size: Any) -> None:
        with self.store.read() as state:
            gpu, _, ci = self._device(state, handle)
            _put_string(buf, size, ci.uuid if ci else gpu.uuid)

    def _nvmlDeviceGetName(self, handle: Any, buf: Any, size: Any) -> None:
        with self.store.read() as state:
            gpu, gi, ci = self._device(state, handle)
            name = gpu.model.nvml_name
            if gi is not None:
                name = f"{name} {driver.ci_profile_by_id(gpu, gi, ci.profile_id).name}"
            _put_string(buf, size, name)

    def _nvmlDeviceGetIndex(self, handle: Any, out: Any) -> None:
        with self.store.read() as state:
            _out(out).value = self._parent(state, handle).index

    def _nvmlDeviceGetMinorNumber(self, handle: Any, out: Any) -> None:
        with self.store.read() as state:
            _out(out).value = self._parent(state, handle).index

    def _nvmlDeviceGetMemoryInfo(self, handle: Any, out: Any) -> None:
        self._memory(handle, _out(out))

    def _nvmlDeviceGetMemoryInfo_v2(self, handle: Any, out: Any) -> None:
        mem = _out(out)
        if mem.version != MEMORY_V2:
            raise NvmlFault(codes.ARGUMENT_VERSION_MISMATCH, "nvmlMemory_v2 version")
        self._memory(handle, mem)

    def _memory(self, handle: Any, mem: Any) -> None:
        with self.store.read() as state:
            gpu, gi, ci = self._device(state, handle)
            total = (driver.gi_spec(gpu, gi).memory_mib if gi else gpu.model.memory_mib) * MIB
            used = sum(p.used_mib for p in driver.processes_of(gpu, gi, ci)) * MIB
            mem.total, mem.used, mem.free = total, min(used, total), max(0, total - used)

    def _nvmlDeviceGetComputeRunningProcesses_v3(self, handle: Any, count: Any, infos: Any) -> int:
        with self.store.read() as state:
            gpu, gi, ci = self._device(state, handle)
            procs = driver.processes_of(gpu, gi, ci)
            return _fill_array(
                count, infos, len(procs), lambda i, item: _set_process(item, procs[i]), probe=False
            )

    _nvmlDeviceGetComputeRunningProcesses_v2 = _nvmlDeviceGetComputeRunningProcesses_v3

    def _nvmlDeviceGetGraphicsRunningProcesses_v3(self, handle: Any, count: Any, infos: Any) -> int:
        """The simulated node runs compute work only: no graphics processes."""
        with self.store.read() as state:
            self._device(state, handle)
            return _fill_array(count, infos, 0, lambda i, item: None, probe=False)

    _nvmlDeviceGetGraphicsRunningProcesses_v2 = _nvmlDeviceGetGraphicsRunningProcesses_v3

    # ---- MIG mode and MIG devices ---------------------------------------------------------------

    def _nvmlDeviceGetMigMode(self, handle: Any, current: Any, pending: Any) -> None:
        with self.store.read() as state:
            gpu = self._parent(state, handle)
            _out(current).value, _out(pending).value = gpu.mig_current, gpu.mig_pending

    def _nvmlDeviceSetMigMode(self, handle: Any, mode: Any, status: Any) -> None:
        with self.store.mutate() as state:
            gpu = self._parent(state, handle)
            _out(status).value = driver.set_mig_mode(state, gpu, _int(mode))

    def _nvmlDeviceGetMaxMigDeviceCount(self, handle: Any, out: Any) -> None:
        with self.store.read() as state:
            gpu = self._parent(state, handle)
            enabled = gpu.mig_current == codes.MIG_ENABLE
            _out(out).value = gpu.model.max_mig_devices if enabled else 0

    def _nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: Any, out: Any) -> None:
        with self.store.read() as state:
            gpu = self._parent(state, handle)
            driver.require_mig(gpu)
            i = _int(index)
            if not 0 <= i < gpu.model.max_mig_devices:
                raise NvmlFault(codes.INVALID_ARGUMENT, f"MIG device index {i}")
            devices = driver.mig_devices(gpu, time.time())
            if i >= len(devices):
                raise NvmlFault(codes.NOT_FOUND, f"no MIG device at index {i}")
            _put_handle(out, self.mig_addr(gpu, *devices[i]))

    def _nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: Any, out: Any) -> None:
        with self.store.read() as state:
            gpu, gi, _ = self._device(state, handle)
            if gi is None:
                raise NvmlFault(codes.INVALID_ARGUMENT, "not a MIG device handle")
            _put_handle(out, self.gpu_addr(gpu))

    def _nvmlDeviceIsMigDeviceHandle(self, handle: Any, out: Any) -> None:
        with self.store.read() as state:
            _, gi, _ = self._device(state, handle)
            _out(out).value = 1 if gi is not None else 0

    def _nvmlDeviceGetGpuInstanceId(self, handle: Any, out: Any) -> None:
        with self.store.read() as state:
            _, gi, _ = self._device(state, handle)
            if gi is None:
                raise NvmlFault(codes.NOT_SUPPORTED, "not a MIG device")
            _out(out).value = gi.gi_id

    def _nvmlDeviceGetComputeInstanceId(self, handle: Any, out: Any) -> None:
        with self.store.read() as state:
            _, _, ci = self._device(state, handle)
            if ci is None:
                raise NvmlFault(codes.NOT_SUPPORTED, "not a MIG device")
            _out(out).value = ci.ci_id

    # ---- GPU-instance profiles ------------------------------------------------------------------

    def _nvmlDeviceGetGpuInstanceProfileInfo(self, handle: Any, profile: Any, out: Any) -> None:
        with self.store.read() as state:
            gpu = self._parent(state, handle)
            _fill_gi_profile(_out(out), gpu.model, driver.gi_profile_by_enum(gpu, _int(profile)))

    def _nvmlDeviceGetGpuInstanceProfileInfoV(self, handle: Any, profile: Any, out: Any) -> None:
        info = _versioned(out, GI_PROFILE_INFO_V2)
        with self.store.read() as state:
            gpu = self._parent(state, handle)
            _fill_gi_profile(info, gpu.model, driver.gi_profile_by_enum(gpu, _int(profile)))

    def _nvmlDeviceGetGpuInstanceProfileInfoByIdV(self, handle: Any, profile_id: Any, out: Any) -> None:
        info = _versioned(out, GI_PROFILE_INFO_V2)
        with self.store.read() as state:
            gpu = self._parent(state, handle)
            driver.require_mig(gpu)
            _fill_gi_profile(info, gpu.model, driver.gi_profile_by_id(gpu, _int(profile_id)))

    def _nvmlDeviceGetGpuInstanceRemainingCapacity(self, handle: Any, profile_id: Any, out: Any) -> None:
        with self.store.read() as state:
            gpu = self._parent(state, handle)
            _out(out).value = driver.remaining_capacity(gpu, _int(profile_id))

    def _nvmlDeviceGetGpuInstancePossiblePlacements_v2(
        self, handle: Any, profile_id: Any, arr: Any, count: Any
    ) -> int:
        with self.store.read() as state:
            gpu = self._parent(state, handle)
            places = driver.possible_placements(gpu, _int(profile_id))
            return _fill_array(count, arr, len(places), lambda i, item: _set_placement(item, places[i]))

    # ---- GPU instances --------------------------------------------------------------------------

    def _nvmlDeviceCreateGpuInstance(self, handle: Any, profile_id: Any, out: Any) -> None:
        # Why: creating a GI claims memory slices on the GPU until it is destroyed.
        def create(state: State) -> None:
            gpu = self._parent(state, handle)
            gi = driver.create_gi(state, gpu, _int(profile_id), None)
            _put_handle(out, self.gi_addr(gpu, gi))

        self._timed("create_gi", handle, create)

    def _nvmlDeviceCreateGpuInstanceWithPlacement(
        self, handle: Any, profile_id: Any, placement: Any, out: Any
    ) -> None:
        wanted = self._placement_arg(placement, "nvmlDeviceCreateGpuInstanceWithPlacement")

        def create(state: State) -> None:
            gpu = self._parent(state, handle)
            gi = driver.create_gi(state, gpu, _int(profile_id), wanted)
            _put_handle(out, self.gi_addr(gpu, gi))

        self._timed("create_gi", handle, create)

    def _nvmlDeviceGetGpuInstances(self, handle: Any, profile_id: Any, arr: Any, count: Any) -> int:
        with self.store.read() as state:
            gpu = self._parent(state, handle)
            gis = driver.list_gis(gpu, _int(profile_id))
            addrs = [self.gi_addr(gpu, gi) for gi in gis]
            return _fill_handles(arr, count, addrs)

    def _nvmlDeviceGetGpuInstanceById(self, handle: Any, gi_id: Any, out: Any) -> None:
        with self.store.read() as state:
            gpu = self._parent(state, handle)
            _put_handle(out, self.gi_addr(gpu, driver.gi_by_id(gpu, _int(gi_id))))

    def _nvmlGpuInstanceGetInfo(self, handle: Any, out: Any) -> None:
        with self.store.read() as state:
            gpu, gi = self._gi(state, handle)
            info = _out(out)
            _set_pointer_field(info, "device", self.gpu_addr(gpu))
            info.id, info.profileId = gi.gi_id, gi.profile_id
            _set_placement(info.placement, gi.placement)

    def _nvmlGpuInstanceDestroy(self, handle: Any) -> None:
        with self.store.read() as state:
            delay = state.faults.destroy_delay_s
        if delay:
            time.sleep(delay)

        # Why: destroying a GI frees its slices; the driver refuses while CIs or processes live.
        def destroy(state: State) -> None:
            gpu, gi = self._gi(state, handle)
            driver.destroy_gi(state, gpu, gi)

        self._timed("destroy_gi", handle, destroy)

    # ---- compute instances ----------------------------------------------------------------------

    def _nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, handle: Any, profile: Any, eng: Any, out: Any
    ) -> None:
        with self.store.read() as state:
            gpu, gi = self._gi(state, handle)
            _fill_ci_profile(_out(out), gpu, gi, driver.ci_profile_by_enum(gpu, gi, _int(profile), _int(eng)))

    def _nvmlGpuInstanceGetComputeInstanceProfileInfoV(
        self, handle: Any, profile: Any, eng: Any, out: Any
    ) -> None:
        info = _versioned(out, CI_PROFILE_INFO_V2)
        with self.store.read() as state:
            gpu, gi = self._gi(state, handle)
            _fill_ci_profile(info, gpu, gi, driver.ci_profile_by_enum(gpu, gi, _int(profile), _int(eng)))

    def _nvmlGpuInstanceGetComputeInstanceRemainingCapacity(
        self, handle: Any, profile_id: Any, out: Any
    ) -> None:
        with self.store.read() as state:
            gpu, gi = self._gi(state, handle)
            _out(out).value = driver.ci_remaining_capacity(gpu, gi, _int(profile_id))

    def _nvmlGpuInstanceGetComputeInstancePossiblePlacements(
        self, handle: Any, profile_id: Any, arr: Any, count: Any
    ) -> int:
        with self.store.read() as state:
            gpu, gi = self._gi(state, handle)
            places = driver.ci_profile_by_id(gpu, gi, _int(profile_id)).placements
            return _fill_array(count, arr, len(places), lambda i, item: _set_placement(item, places[i]))

    def _nvmlGpuInstanceCreateComputeInstance(self, handle: Any, profile_id: Any, out: Any) -> None:
        self._create_ci(handle, profile_id, None, out)

    def _nvmlGpuInstanceCreateComputeInstanceWithPlacement(
        self, handle: Any, profile_id: Any, placement: Any, out: Any
    ) -> None:
        wanted = self._placement_arg(placement, "nvmlGpuInstanceCreateComputeInstanceWithPlacement")
        self._create_ci(handle, profile_id, wanted, out)

    def _create_ci(self, handle: Any, profile_id: Any, wanted: Placement | None, out: Any) -> None:
        def create(state: State) -> None:
            gpu, gi = self._gi(state, handle)
            ci = driver.create_ci(state, gpu, gi, _int(profile_id), wanted)
            lag = _listing_lag(state, gpu)
            if lag:
                ci.visible_at = time.time() + lag  # NVML's MIG device list shows it only then
            _put_handle(out, self.ci_addr(gpu, gi, ci))

        self._timed("create_ci", handle, create)

    def _nvmlGpuInstanceGetComputeInstances(self, handle: Any, profile_id: Any, arr: Any, count: Any) -> int:
        with self.store.read() as state:
            gpu, gi = self._gi(state, handle)
            addrs = [self.ci_addr(gpu, gi, ci) for ci in driver.list_cis(gpu, gi, _int(profile_id))]
            return _fill_handles(arr, count, addrs)

    def _nvmlGpuInstanceGetComputeInstanceById(self, handle: Any, ci_id: Any, out: Any) -> None:
        with self.store.read() as state:
            gpu, gi = self._gi(state, handle)
            _put_handle(out, self.ci_addr(gpu, gi, driver.ci_by_id(gi, _int(ci_id))))

    def _nvmlComputeInstanceGetInfo_v2(self, handle: Any, out: Any) -> None:
        with self.store.read() as state:
            gpu, gi, ci = self._ci(state, handle)
            info = _out(out)
            # `device` is the MIG device of this CI (NVIDIA's DRA driver reads the MIG UUID from it).
            _set_pointer_field(info, "device", self.mig_addr(gpu, gi, ci))
            _set_pointer_field(info, "gpuInstance", self.gi_addr(gpu, gi))
            info.id, info.profileId = ci.ci_id, ci.profile_id
            _set_placement(info.placement, Placement(ci.start, ci.size))

    def _nvmlComputeInstanceDestroy(self, handle: Any) -> None:
        def destroy(state: State) -> None:
            gpu, gi, ci = self._ci(state, handle)
            driver.destroy_ci(state, gpu, gi, ci)

        self._timed("destroy_ci", handle, destroy)

    def _timed(self, call: str, handle: Any, mutate: Callable[[State], None]) -> None:
        """Run a MIG mutation as the timing model says: instantly (timing "zero"), or holding its
        serialization scope (the GPU, or the node) for the model's seconds for `call`. The change
        lands when the call starts, the caller gets control back when the seconds are over; a call
        the driver refuses returns at once."""
        with self.store.read() as state:
            _, gpu, _, _ = self._resolve(state, handle)
            seconds, scope = _latency(state, gpu, call)
        if not seconds:
            with self.store.mutate() as state:
                mutate(state)
            return
        with self.store.serial(scope):
            with self.store.mutate() as state:
                mutate(state)
            time.sleep(seconds)

    def _placement_arg(self, placement: Any, symbol: str) -> Placement:
        if placement is None:
            raise NvmlFault(codes.INVALID_ARGUMENT, "placement is NULL")
        if isinstance(placement, ctypes.Structure):
            # pynvml sets no argtypes: a bare Structure is passed BY VALUE, and the C function
            # would read its bytes as a pointer. Refuse it loudly instead of guessing.
            self.misuse.append(f"{symbol}: placement passed by value; use ctypes.byref(placement)")
            raise NvmlFault(codes.INVALID_ARGUMENT, "placement passed by value")
        target = _out(placement)
        return Placement(int(target.start), int(target.size))


_EXPORTS = [name[1:] for name in vars(SimulatedLibrary) if name.startswith("_nvml")]


# ---- the timing model ---------------------------------------------------------------------------


def _latency(state: State, gpu: Gpu, call: str) -> tuple[float, str]:
    """(seconds, serialization scope) of one MIG mutation on `gpu` under the state's timing."""
    if state.timing.mode != TIMED:
        return 0.0, ""
    timing = gpu.model.timing
    serialization = state.timing.serialization
    if serialization == "model":
        serialization = timing.serialization
    return timing.seconds(call), "node" if serialization == "node" else f"gpu-{gpu.uuid}"


def _listing_lag(state: State, gpu: Gpu) -> float:
    if state.timing.listing_lag_s is not None:
        return state.timing.listing_lag_s
    return gpu.model.timing.listing_lag_s if state.timing.mode == TIMED else 0.0


# ---- ctypes helpers -----------------------------------------------------------------------------


def _int(value: Any) -> int:
    return int(getattr(value, "value", value))


def _text(value: Any) -> str:
    raw = getattr(value, "value", value)
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def _out(arg: Any) -> Any:
    """The object behind an out-parameter: byref() -> ._obj, pointer() -> .contents."""
    if arg is None:
        raise NvmlFault(codes.INVALID_ARGUMENT, "NULL out-parameter")
    if hasattr(arg, "_obj"):
        return arg._obj
    if isinstance(arg, ctypes._Pointer):
        return arg.contents
    return arg


def _address_of(handle: Any) -> int:
    if handle is None:
        return 0
    if isinstance(handle, int):
        return handle
    return ctypes.cast(handle, ctypes.c_void_p).value or 0


def _put_handle(out: Any, addr: int) -> None:
    ctypes.c_void_p.from_buffer(_out(out)).value = addr


def _set_pointer_field(struct: Any, field: str, addr: int) -> None:
    offset = getattr(type(struct), field).offset
    ctypes.c_void_p.from_buffer(struct, offset).value = addr


def _put_string(buf: Any, size: Any, text: str) -> None:
    data = text.encode()
    if len(data) + 1 > _int(size):
        raise NvmlFault(codes.INSUFFICIENT_SIZE, f"buffer of {_int(size)} bytes for {len(data) + 1}")
    buf.value = data


def _versioned(out: Any, version: int) -> Any:
    info = _out(out)
    if getattr(info, "version", None) != version:
        raise NvmlFault(codes.ARGUMENT_VERSION_MISMATCH, f"struct version must be 0x{version:08x}")
    return info


def _array_capacity(arr: Any, count: Any) -> int:
    """How many elements the caller says it allocated (count in), bounded by a ctypes array's length."""
    declared = _int(_out(count))
    return min(declared, len(arr)) if isinstance(arr, ctypes.Array) else declared


def _fill_array(count: Any, arr: Any, n: int, put: Callable[[int, Any], None], *, probe: bool = True) -> int:
    """Caller-allocated arrays with an in/out count.

    probe=True (placements): a NULL array asks for the count and succeeds. probe=False (process
    lists): the count in is the capacity, so count 0 succeeds only when there is nothing to return
    and otherwise gives INSUFFICIENT_SIZE with the count needed - what pynvml's first call relies on.
    """
    target = _out(count)
    if arr is None and probe:
        target.value = n
        return codes.SUCCESS
    capacity = 0 if arr is None else _array_capacity(arr, count)
    if capacity < n:
        target.value = n
        return codes.INSUFFICIENT_SIZE
    items = _elements(arr) if n else None
    for i in range(n):
        put(i, items[i])
    target.value = n
    return codes.SUCCESS


def _elements(arr: Any) -> Any:
    if isinstance(arr, ctypes.Array):
        return arr
    if hasattr(arr, "_obj"):
        return _elements(arr._obj)
    return arr  # a typed pointer indexes like an array


def _fill_handles(arr: Any, count: Any, addrs: list[int]) -> int:
    """GetGpuInstances / GetComputeInstances: the caller sizes the array (to instanceCount)."""
    if arr is None:
        raise NvmlFault(codes.INVALID_ARGUMENT, "instances array is NULL")
    if isinstance(arr, ctypes.Array) and len(arr) < len(addrs):
        _out(count).value = len(addrs)
        return codes.INSUFFICIENT_SIZE
    base = ctypes.addressof(_elements(arr)) if isinstance(_elements(arr), ctypes.Array) else _address_of(arr)
    slots = (ctypes.c_void_p * max(1, len(addrs))).from_address(base)
    for i, addr in enumerate(addrs):
        slots[i] = addr
    _out(count).value = len(addrs)
    return codes.SUCCESS


def _set_placement(item: Any, placement: Placement) -> None:
    item.start, item.size = placement.start, placement.size


def _set_process(item: Any, proc: Any) -> None:
    item.pid = proc.pid
    item.usedGpuMemory = proc.used_mib * MIB
    item.gpuInstanceId = codes.VALUE_NOT_AVAILABLE_UINT if proc.gi_id is None else proc.gi_id
    item.computeInstanceId = codes.VALUE_NOT_AVAILABLE_UINT if proc.ci_id is None else proc.ci_id


def _fill_gi_profile(info: Any, model: GpuModel, spec: Any) -> None:
    values = {
        "id": spec.profile_id,
        "isP2pSupported": 0,
        "sliceCount": spec.slice_count,
        "instanceCount": spec.instance_count,
        "multiprocessorCount": spec.sm_count,
        "copyEngineCount": spec.engines.copy,
        "decoderCount": spec.engines.decoder,
        "encoderCount": spec.engines.encoder,
        "jpegCount": spec.engines.jpeg,
        "ofaCount": spec.engines.ofa,
        "memorySizeMB": spec.memory_mib,
        "name": f"MIG {spec.name}".encode(),
    }
    _assign(info, values)


def _fill_ci_profile(info: Any, gpu: Gpu, gi: GpuInstance, profile: driver.CiProfile) -> None:
    spec = driver.gi_spec(gpu, gi)
    values = {
        "id": profile.profile_id,
        "sliceCount": profile.slice_count,
        "instanceCount": profile.instance_count,
        "multiprocessorCount": profile.sm_count,
        "sharedCopyEngineCount": spec.engines.copy,
        "sharedDecoderCount": spec.engines.decoder,
        "sharedEncoderCount": spec.engines.encoder,
        "sharedJpegCount": spec.engines.jpeg,
        "sharedOfaCount": spec.engines.ofa,
        "name": profile.name.encode(),
    }
    _assign(info, values)


def _assign(struct: Any, values: dict[str, Any]) -> None:
    fields = {f[0] for f in type(struct)._fields_}
    for name, value in values.items():
        if name in fields:
            setattr(struct, name, value)
