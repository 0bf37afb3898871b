"""Where the simulated node's state lives: in memory, or in a JSON file shared by processes.

File mode: every mutation holds an exclusive `flock` on `<state>.lock`, reloads the file, changes
it and writes it back atomically (temp file + rename); every read reloads the file when it
changed. So the device plugin and a test or lab observer in another process see one node.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from sim.nvml.state import State


class MemoryStore:
    """State held in this process only (the default for in-process tests)."""

    def __init__(self, state: State) -> None:
        self._state = state
        self._lock = threading.RLock()
        self._serial: dict[str, threading.Lock] = {}

    @contextlib.contextmanager
    def serial(self, scope: str) -> Iterator[None]:
        """Calls of one serialization scope (a GPU, or the node) wait for each other."""
        with self._lock:
            lock = self._serial.setdefault(scope, threading.Lock())
        with lock:
            yield

    @contextlib.contextmanager
    def read(self) -> Iterator[State]:
        with self._lock:
            yield self._state

    @contextlib.contextmanager
    def mutate(self) -> Iterator[State]:
        with self._lock:
            yield self._state


class FileStore:
    """State in a JSON file, locked around every mutation and reloaded before every read."""

    def __init__(self, path: str | os.PathLike[str], initial: State | None = None) -> None:
        self.path = Path(path)
        self._lock_path = self.path.with_name(self.path.name + ".lock")
        self._thread_lock = threading.RLock()
        self._cached: State | None = None
        self._cached_key: bytes | None = None  # the file's text the cached state was read from
        if initial is not None:
            with self._file_lock():
                if not self.path.exists():
                    self._write(initial)
        elif not self.path.exists():
            raise FileNotFoundError(
                f"NVML state file {self.path} does not exist; pass a node spec to create it"
            )

    @contextlib.contextmanager
    def read(self) -> Iterator[State]:
        with self._thread_lock:
            yield self._load()

    @contextlib.contextmanager
    def mutate(self) -> Iterator[State]:
        with self._thread_lock, self._file_lock():
            state = self._load()
            before = json.dumps(state.to_json(), sort_keys=True)
            try:
                yield state
            finally:
                # Driver calls that fail part-way leave state as the driver would (nothing
                # changed, or a consumed fault): write whatever is there now.
                if json.dumps(state.to_json(), sort_keys=True) != before:
                    self._write(state)

    def _load(self) -> State:
        # the cache is keyed by the file's bytes, never by (inode, mtime, size): a rename-replaced
        # file reuses the inode freed two writes before, and two writes within one coarse clock tick
        # share their mtime, so another process's same-sized writes could read as "unchanged" and a
        # mutate would write back a stale state, undoing what the other process did (a created
        # instance gone, a destroyed one back, a process that ended running again)
        data = self.path.read_bytes()
        if self._cached is None or data != self._cached_key:
            self._cached = State.from_json(json.loads(data))
            self._cached_key = data
        return self._cached

    def _write(self, state: State) -> None:
        fd, tmp = tempfile.mkstemp(prefix=self.path.name + ".", dir=self.path.parent)
        with os.fdopen(fd, "w") as handle:
            json.dump(state.to_json(), handle, indent=1, sort_keys=True)
        os.replace(tmp, self.path)
        self._cached = None

    @contextlib.contextmanager
    def serial(self, scope: str) -> Iterator[None]:
        """Calls of one serialization scope (a GPU, or the node) wait for each other, across every
        process that shares the state file (an flock per scope; flock excludes threads too, since
        each call opens its own file description)."""
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in scope)[:80]
        path = self.path.with_name(f"{self.path.name}.serial-{safe}.lock")
        with open(path, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def _file_lock(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self._lock_path, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
