"""Garbage collection for a long-running server whose caches hold most of its objects.

CPython's cyclic collector walks every object it tracks on a full collection. `dynmig serve`'s caches
(every node's published GPUs, every pod) grow with the fleet to hundreds of thousands of such
objects, and a full collection over them, every few hundred pods, held the filter's answers behind it
(kube-scheduler waits for each one before it schedules the next pod). None of it is garbage: the
caches change one object at a time, and reference counting frees what they drop.

`HeapKeeper` moves what the process holds once its caches have synced out of the collector's view
(`gc.freeze`), and lets young collections run less often (`YOUNG_THRESHOLD` allocations instead of
700). Frozen objects are still freed by reference counting; only a reference cycle among them would
stay. So every `interval` it collects everything once (`gc.unfreeze`, a full collection, `gc.freeze`
again): memory stays bounded, and the full pause comes once per interval instead of every few hundred
pods. For the process's entry point only: freezing is process-wide (tests start servers in-process).
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("base.heap")

YOUNG_THRESHOLD = 10_000  # allocations between young collections (CPython's default: 700)
SETTLE_INTERVAL = 600.0  # seconds between full collections of everything, frozen objects included


def settle() -> float:
    """Collect everything once, then freeze what survived; the seconds it took."""
    started = time.perf_counter()
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    return time.perf_counter() - started


class HeapKeeper:
    """Once `synced()` holds, settle the heap (`settle`), then again every `interval` seconds."""

    def __init__(
        self, synced: Callable[[], bool], interval: float = SETTLE_INTERVAL, poll: float = 0.2
    ) -> None:
        if interval <= 0 or poll <= 0:
            raise ValueError(f"interval ({interval}) and poll ({poll}) must be positive seconds")
        self._synced, self._interval, self._poll = synced, interval, poll
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heap-keeper", daemon=True)
        self.settled = 0  # how many times the heap was settled

    def start(self) -> HeapKeeper:
        gc.set_threshold(YOUNG_THRESHOLD, *gc.get_threshold()[1:])
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._synced():
            if self._stopping.wait(self._poll):
                return
        while not self._stopping.is_set():
            took = settle()
            self.settled += 1
            log.debug("heap settled in %.3f s: %d objects frozen", took, gc.get_freeze_count())
            self._stopping.wait(self._interval)
