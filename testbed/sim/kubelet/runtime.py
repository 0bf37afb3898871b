"""What kubelet runs for one pod, as the pod side of the simulated kubelet sees it: the pod's
containers, taken as one unit (signal them, see whether they still run, restart them).

Two kinds exist: `SimulatedWorkload` (a process on each MIG device the pod was given, in the
simulated NVML) and whatever a caller supplies through `SimulatedPods(runtime=...)`, e.g. the
lab's real `dynmig device-plugin` processes for the DaemonSet's pods.
"""

from __future__ import annotations

import itertools
import re
import signal
import threading
from collections.abc import Callable, Iterable
from typing import Any, Protocol

MIG_UUID = re.compile(r"MIG-[0-9A-Za-z][-0-9A-Za-z/]*")
_PIDS = itertools.count(31000)


class Containers(Protocol):
    """A pod's containers. `exit_code` is None while they run, else the exit status the way
    `subprocess` reports it (negative: killed by that signal)."""

    restartable: bool  # they can be restarted when they exit (kubelet does as restartPolicy says)

    def signal(self, sig: int) -> None: ...

    def exit_code(self) -> int | None: ...

    def ready(self) -> bool: ...

    def restart(self) -> None: ...

    def logs(self) -> str: ...


def describe_exit(code: int) -> str:
    if code < 0:
        return f"signal {-code}"
    if code > 128:
        return f"exit code {code}, signal {code - 128}"
    return f"exit code {code}"


def container_exit_code(code: int) -> int:
    """The exit code kubelet reports for a container: 128 + N for one killed by signal N."""
    return 128 - code if code < 0 else code


def mig_uuids(answers: Iterable[Any]) -> list[str]:
    """The MIG devices a container runtime would hand a container, read from the device plugin's
    Allocate answers (NVIDIA_VISIBLE_DEVICES, CDI device names or CDI annotations)."""
    found: list[str] = []
    for answer in answers:
        if answer is None:
            continue
        texts = [
            *dict(answer.envs).values(),
            *(d.name for d in answer.cdi_devices),
            *dict(answer.annotations).values(),
        ]
        for text in texts:
            found += [u for u in MIG_UUID.findall(text) if u not in found]
    return found


class SimulatedWorkload:
    """A pod's workload on the simulated NVML: one process on each MIG device of each container
    while it runs. It ends on SIGTERM (exit 0: it shuts down cleanly) unless it ignores SIGTERM, on
    SIGKILL (137), or when `finish(code)` says so. What each container prints goes to
    `sink(container, line)` (the kubelet's log files) and to `logs()`."""

    restartable = False

    def __init__(
        self,
        nvml: Any,
        devices: dict[str, list[str]],
        *,
        ignore_sigterm: bool = False,
        sink: Callable[[str, str], None] | None = None,
    ) -> None:
        self.nvml = nvml
        self.devices = devices  # container -> MIG UUIDs
        self.ignore_sigterm = ignore_sigterm
        self._sink = sink or (lambda container, line: None)
        self._code: int | None = None
        self._lock = threading.Lock()
        self._processes: list[tuple[str, int]] = []  # (GPU UUID, pid)
        self._log: list[str] = []
        self._start()

    @property
    def processes(self) -> list[tuple[str, int]]:
        return list(self._processes)

    def _say(self, line: str, container: str) -> None:
        self._log.append(line if len(self.devices) == 1 else f"{container}: {line}")
        self._sink(container, line)

    def _start(self) -> None:
        where = {
            ci.mig_uuid: (gpu.uuid, gi.gi_id, ci.ci_id)
            for gpu in self.nvml.gpus()
            for gi in gpu.gpu_instances
            for ci in gi.compute_instances
        }
        for container, devices in self.devices.items():
            for device in devices:
                if device not in where:
                    self._say(f"no MIG device {device} on this node", container)
                    continue
                gpu, gi, ci = where[device]
                pid = next(_PIDS)
                try:
                    self.nvml.set_busy(gpu, (pid,), gi_id=gi, ci_id=ci)
                except (KeyError, ValueError) as error:
                    self._say(f"could not start on {device}: {error}", container)
                    continue
                self._processes.append((gpu, pid))
                self._say(f"pid {pid} running on {device}", container)
            self._say(f"NVIDIA_VISIBLE_DEVICES={','.join(devices) or 'void'}; working", container)

    def _end(self, code: int, why: str) -> None:
        with self._lock:
            if self._code is not None:
                return
            for gpu, pid in self._processes:
                self.nvml.clear_busy(gpu, (pid,))
            self._processes.clear()
            self._code = code
        for container in self.devices:
            self._say(why, container)

    def signal(self, sig: int) -> None:
        if sig == signal.SIGKILL:
            self._end(-signal.SIGKILL, "killed (SIGKILL)")
        elif sig == signal.SIGTERM and not self.ignore_sigterm:
            self._end(0, "SIGTERM: shut down cleanly")
        elif sig == signal.SIGTERM:
            for container in self.devices:
                self._say("SIGTERM ignored", container)

    def finish(self, code: int) -> None:
        self._end(code, f"finished with exit code {code}")

    def exit_code(self) -> int | None:
        return self._code

    def ready(self) -> bool:
        return self._code is None

    def restart(self) -> None:
        raise RuntimeError("a simulated workload is not restarted")

    def logs(self) -> str:
        return "".join(line + "\n" for line in self._log)
