"""A lab pod whose container is a real dynmig process: the simulated kubelet runs, signals and
restarts it through this object, so the pod's lifecycle in the API drives the process."""

from __future__ import annotations

import os
from collections.abc import Callable

from dynmig.lab.supervisor import Child, Supervisor


class ProcessContainers:
    """The pod's one container as a child process of the lab. `spawn()` starts a fresh process
    (the same argv every time, as a container restarts from its image)."""

    restartable = True  # DaemonSet and Deployment pods have restartPolicy Always

    def __init__(self, supervisor: Supervisor, spawn: Callable[[], Child],
                 on_start: Callable[[Child], None] | None = None) -> None:
        self.supervisor = supervisor
        self._spawn = spawn
        self._on_start = on_start or (lambda child: None)
        self.child = self._start()

    def _start(self) -> Child:
        child = self._spawn()
        self._on_start(child)
        return child

    def signal(self, sig: int) -> None:
        if self.child.process.poll() is None:
            try:
                os.killpg(self.child.process.pid, sig)
            except ProcessLookupError:
                pass

    def exit_code(self) -> int | None:
        return self.child.process.poll()

    def ready(self) -> bool:
        return self.child.process.poll() is None and self.child.is_ready()

    def restart(self) -> None:
        self.supervisor.stop(self.child)  # already exited: reaps it and forgets it
        self.child = self._start()

    def logs(self) -> str:
        try:
            return self.child.log_path.read_text(errors="replace")
        except OSError:
            return ""
