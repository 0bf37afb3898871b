"""`SimulatedNvml`: a simulated node's GPUs, installed under nvidia-ml-py's `pynvml`.

    sim = SimulatedNvml({"gpus": [{"model": "A100-SXM4-40GB", "count": 2}]})
    with sim:                      # pynvml.nvmlLib -> the simulated library
        pynvml.nvmlInit()
        ...                        # production code runs unchanged
    sim.gpus()                     # what the "hardware" now holds

Shared between processes: `SimulatedNvml(spec, state_path=path)` creates the state file if it is
missing; `SimulatedNvml(state_path=path)` (or `SimulatedNvml(path)`) opens an existing one.
"""

from __future__ import annotations

import os
from typing import Any, Self

from sim.nvml import codes, driver, views
from sim.nvml.library import _EXPORTS, _VERSION_SUFFIX, SimulatedLibrary
from sim.nvml.spec import build_state, shuffle, timing_config
from sim.nvml.state import CreateFailure, Gpu, Process, TimingConfig
from sim.nvml.store import FileStore, MemoryStore

_ALIASES = {"nvmlInit": "nvmlInitWithFlags"}


class SimulatedNvml:
    def __init__(
        self,
        spec: dict[str, Any] | str | os.PathLike[str] | None = None,
        *,
        state_path: str | os.PathLike[str] | None = None,
        shuffle_gi_ids: int | None = None,
    ) -> None:
        if isinstance(spec, (str, os.PathLike)):
            spec, state_path = None, spec
        if spec is None and state_path is None:
            raise ValueError("SimulatedNvml needs a node spec, a state_path, or both")
        if spec is not None and shuffle_gi_ids is not None:
            spec = {**spec, "shuffle_gi_ids": shuffle_gi_ids}
        initial = build_state(spec) if spec is not None else None
        self.store: MemoryStore | FileStore
        self.store = FileStore(state_path, initial) if state_path is not None else MemoryStore(initial)
        self.state_path = state_path
        self.library = SimulatedLibrary(self.store)
        self._saved: tuple[Any, dict[str, Any]] | None = None

    # ---- installing under pynvml ----------------------------------------------------------------

    def install(self) -> SimulatedNvml:
        """Point `pynvml.nvmlLib` at the simulated library and clear pynvml's symbol cache."""
        import pynvml

        if self._saved is None:
            self._saved = (pynvml.nvmlLib, dict(pynvml._nvmlGetFunctionPointer_cache))
        pynvml.nvmlLib = self.library
        pynvml._nvmlGetFunctionPointer_cache.clear()
        return self

    def uninstall(self) -> None:
        import pynvml

        if self._saved is None:
            return
        lib, cache = self._saved
        self._saved = None
        if pynvml.nvmlLib is self.library:
            pynvml.nvmlLib = lib
            pynvml._nvmlGetFunctionPointer_cache.clear()
            pynvml._nvmlGetFunctionPointer_cache.update(cache)

    def __enter__(self) -> Self:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    # ---- fault injection (stored in the state, so it works across processes) -------------------

    def inject_error(self, function: str, code: int, times: int = 1) -> None:
        """The next `times` calls of `function` return `code` without doing anything.

        `function` is a C symbol (`nvmlDeviceGetComputeRunningProcesses_v3`) or the pynvml
        wrapper's name (`nvmlDeviceGetComputeRunningProcesses`, `nvmlDeviceGetGpuInstanceProfileInfo`),
        which matches its versioned symbols too.
        """
        name = _ALIASES.get(function, function)
        if name not in _EXPORTS and not any(_base(s) == name for s in _EXPORTS):
            raise ValueError(f"inject_error: the simulated NVML has no function {function!r}")
        if times < 1:
            raise ValueError("inject_error: times must be >= 1")
        with self.store.mutate() as state:
            state.faults.errors.setdefault(name, []).append([int(code), int(times)])

    def fail_nth_create(self, n: int, code: int = codes.INSUFFICIENT_RESOURCES, kind: str = "gi") -> None:
        """The n-th GPU-instance (kind="gi") or compute-instance ("ci") create from now fails."""
        if kind not in ("gi", "ci") or n < 1:
            raise ValueError('fail_nth_create: n >= 1 and kind "gi" or "ci"')
        with self.store.mutate() as state:
            state.faults.create_failures.append(CreateFailure(kind, n, int(code)))

    def set_destroy_delay(self, seconds: float) -> None:
        """Make every nvmlGpuInstanceDestroy take this long (real GIs take about a second)."""
        with self.store.mutate() as state:
            state.faults.destroy_delay_s = float(seconds)

    def set_timing(self, mode: str, serialization: str = "model", listing_lag_s: float | None = None) -> None:
        """The timing model from now on: mode "zero" (instant) or "driver" (drivers/*.yaml's
        latencies), serialization "model", "gpu" or "node", and the MIG device list's lag after a
        create (None: the model's). The same checks as a node spec's fields."""
        config = timing_config(
            {"timing": mode, "timing_serialization": serialization, "listing_lag_s": listing_lag_s}
        )
        with self.store.mutate() as state:
            state.timing = config

    @property
    def timing(self) -> TimingConfig:
        with self.store.read() as state:
            return TimingConfig(**vars(state.timing))

    def clear_faults(self) -> None:
        with self.store.mutate() as state:
            state.faults.errors.clear()
            state.faults.create_failures.clear()
            state.faults.destroy_delay_s = 0.0

    def set_busy(
        self,
        gpu_uuid: str,
        pids: tuple[int, ...] | list[int] = (4242,),
        *,
        gi_id: int | None = None,
        ci_id: int | None = None,
        used_mib: int = 1024,
    ) -> None:
        """Processes appear on the GPU: on the whole GPU (gi_id None), on a GI, or on one CI."""
        with self.store.mutate() as state:
            gpu = self._gpu(state, gpu_uuid)
            if gi_id is not None:
                gi = gpu.gi(gi_id)
                if gi is None or (ci_id is not None and gi.ci(ci_id) is None):
                    raise ValueError(f"set_busy: {gpu_uuid} has no GI {gi_id} / CI {ci_id}")
            gpu.processes.extend(Process(pid, used_mib, gi_id, ci_id) for pid in pids)

    def clear_busy(self, gpu_uuid: str, pids: tuple[int, ...] | list[int] | None = None) -> None:
        with self.store.mutate() as state:
            gpu = self._gpu(state, gpu_uuid)
            gpu.processes = [p for p in gpu.processes if pids is not None and p.pid not in pids]

    def set_mig_pending(self, gpu_uuid: str, mode: int = codes.MIG_ENABLE) -> None:
        """A MIG mode change that waits for a GPU reset: GetMigMode shows [current, mode] and
        SetMigMode reports RESET_REQUIRED until `reset_gpu`."""
        with self.store.mutate() as state:
            gpu = self._gpu(state, gpu_uuid)
            gpu.mig_pending, gpu.needs_reset = mode, True

    def reset_gpu(self, gpu_uuid: str) -> None:
        """What `nvidia-smi -r` does: the pending mode applies; instances and processes are gone."""
        with self.store.mutate() as state:
            driver.reset_gpu(state, self._gpu(state, gpu_uuid))

    def shuffle_gi_ids(self, seed: int | None) -> None:
        """Opaque GI IDs (a seeded permutation per GPU), or the driver numbering again with None.
        Only while the GPUs hold no instances."""
        with self.store.mutate() as state:
            shuffle(state, seed)

    # ---- observing ------------------------------------------------------------------------------

    def gpus(self) -> list[views.SimGpu]:
        with self.store.read() as state:
            return views.gpu_views(state)

    def gpu(self, uuid_or_index: str | int) -> views.SimGpu:
        for gpu in self.gpus():
            if uuid_or_index in (gpu.uuid, gpu.index):
                return gpu
        raise KeyError(f"no simulated GPU {uuid_or_index!r}")

    @property
    def gpu_uuids(self) -> list[str]:
        return [g.uuid for g in self.gpus()]

    def snapshot(self) -> dict[str, Any]:
        """The raw state as JSON-able data (what the state file holds)."""
        with self.store.read() as state:
            return state.to_json()

    def events(self) -> list[dict[str, Any]]:
        """Mutations so far (create_gi, destroy_gi, create_ci, destroy_ci, set_mig_mode, reset)."""
        with self.store.read() as state:
            return [dict(e) for e in state.events]

    def nvidia_smi_L(self) -> str:
        with self.store.read() as state:
            return views.nvidia_smi_list(state)

    @property
    def calls(self) -> list[str]:
        """C symbols called through this process's library, oldest first."""
        return list(self.library.calls)

    @property
    def misuse(self) -> list[str]:
        """C-ABI mistakes seen (e.g. a placement passed by value instead of byref)."""
        return list(self.library.misuse)

    @staticmethod
    def _gpu(state: Any, uuid: str) -> Gpu:
        gpu = state.gpu(uuid)
        if gpu is None:
            raise KeyError(f"no simulated GPU {uuid!r}; known: {[g.uuid for g in state.gpus]}")
        return gpu


def _base(symbol: str) -> str:
    return _VERSION_SUFFIX.sub("", symbol)
