"""Child processes of the lab: started in their own process group, stopped with nothing left over."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path


class ChildFailed(RuntimeError):
    pass


@dataclass
class Child:
    name: str
    process: subprocess.Popen[str]
    log_path: Path
    lines: deque[str] = field(default_factory=lambda: deque(maxlen=400))
    _ready: threading.Event = field(default_factory=threading.Event)

    def is_ready(self) -> bool:
        return self._ready.is_set()

    def tail(self, n: int = 30) -> str:
        return "\n".join(list(self.lines)[-n:])


class Supervisor:
    """Starts processes, waits for a readiness line, and stops them all (TERM, then KILL)."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.children: list[Child] = []

    def start(
        self,
        name: str,
        argv: list[str],
        env: dict[str, str] | None = None,
        ready_text: str | None = None,
        timeout: float = 30.0,
        wait: bool = True,
        tee: Path | None = None,
    ) -> Child:
        """Start `argv`; with `ready_text`, wait for that line unless `wait` is False (then call
        `wait_ready` later, e.g. after starting several children at once). Its output goes to
        `<log_dir>/<name>.log` and, with `tee`, is appended to that file too (a pod's container log)."""
        log_path = self.log_dir / f"{name}.log"
        process = subprocess.Popen(
            _die_with_parent(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
        child = Child(name, process, log_path)
        self.children.append(child)
        threading.Thread(
            target=self._pump, args=(child, ready_text, tee), daemon=True, name=f"log-{name}"
        ).start()
        if ready_text is not None and wait:
            self.wait_ready(child, timeout)
        return child

    def _pump(self, child: Child, ready_text: str | None, tee: Path | None) -> None:
        stdout = child.process.stdout
        assert stdout is not None, "children are started with stdout=PIPE"
        with child.log_path.open("a") as log, (tee or Path(os.devnull)).open("a") as copy:
            for line in stdout:
                for out in (log, copy):
                    out.write(line)
                    out.flush()
                child.lines.append(line.rstrip("\n"))
                if ready_text is not None and ready_text in line:
                    child._ready.set()

    def wait_ready(self, child: Child, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not child._ready.wait(0.05):
            if child.process.poll() is not None:
                raise ChildFailed(f"{child.name} exited with {child.process.returncode}:\n{child.tail()}")
            if time.monotonic() > deadline:
                raise ChildFailed(f"{child.name} not ready after {timeout:.0f}s:\n{child.tail()}")

    def stop(self, child: Child, timeout: float = 8.0) -> int | None:
        if child.process.poll() is None:
            _signal_group(child.process, signal.SIGTERM)
            try:
                child.process.wait(timeout)
            except subprocess.TimeoutExpired:
                _signal_group(child.process, signal.SIGKILL)
                child.process.wait(5)
        if child in self.children:
            self.children.remove(child)
        return child.process.returncode

    def stop_all(self) -> None:
        for child in reversed(list(self.children)):
            self.stop(child)


_GUARD = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None).prctl(1, signal.SIGTERM)\n"  # PR_SET_PDEATHSIG; kept across execv
    "sys.exit(1) if os.getppid() != int(sys.argv[1]) else os.execv(sys.argv[2], sys.argv[2:])\n"
)


def _die_with_parent(argv: list[str]) -> list[str]:
    """Wrap argv so the child gets SIGTERM if the lab dies without stopping it (kill -9): no orphan
    keeps a port or a GPU state file. A tiny exec wrapper, not preexec_fn, which is unsafe in a
    threaded parent. The signal follows the thread that started the child, so start children from a
    thread that lives as long as the lab (the lab uses its main thread). Linux only."""
    if sys.platform != "linux" or not argv or not os.path.isabs(argv[0]):
        return argv
    return [sys.executable, "-c", _GUARD, str(os.getpid()), *argv]


def _signal_group(process: subprocess.Popen[str], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)


def python_argv(*args: str) -> list[str]:
    return [sys.executable, *args]
