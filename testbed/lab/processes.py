"""A lab pod whose container is a real dynmig process: the simulated kubelet runs, signals and
restarts it through this object, so the pod's lifecycle in the API drives the process."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable

from lab.supervisor import Child, Supervisor


class ProcessContainers:
    """The pod's one container as a child process of the lab. `spawn()` starts a fresh process
    (the same argv every time, as a container restarts from its image)."""

    restartable = True  # kubelet restarts it as the pod's restartPolicy says

    def __init__(
        self,
        supervisor: Supervisor,
        container: str,
        spawn: Callable[[], Child],
        on_start: Callable[[Child], None] | None = None,
        probe: Callable[[], bool] | None = None,
        probe_period: float = 1.0,
        on_ready: Callable[[Child], None] | None = None,
    ) -> None:
        """probe: the readiness probe (else: the child printed its readiness line), run at most
        every `probe_period` seconds; on_ready: called once per process when it is first ready."""
        self.supervisor = supervisor
        self.container = container  # the pod's container this process is
        self._spawn = spawn
        self._on_start = on_start or (lambda child: None)
        self._probe = probe
        self._probe_period = probe_period
        self._probed = (0.0, False)
        self._on_ready = on_ready or (lambda child: None)
        self._announced: Child | None = None
        self.child = self._start()

    def _start(self) -> Child:
        child = self._spawn()
        self._on_start(child)
        return child

    def signal(self, sig: int) -> None:
        if self.child.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.child.process.pid, sig)

    def exit_code(self) -> int | None:
        return self.child.process.poll()

    def ready(self) -> bool:
        if self.child.process.poll() is not None:
            return False
        if self._probe is None:
            ready = self.child.is_ready()
        else:
            if time.monotonic() - self._probed[0] >= self._probe_period:
                self._probed = (time.monotonic(), self._probe())
            ready = self._probed[1]
        if ready and self._announced is not self.child:
            self._announced = self.child
            self._on_ready(self.child)
        return ready

    def restart(self) -> None:
        self.supervisor.stop(self.child)  # already exited: reaps it and forgets it
        self.child = self._start()

    def logs(self) -> str:
        try:
            return self.child.log_path.read_text(errors="replace")
        except OSError:
            return ""
