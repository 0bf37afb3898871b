"""A kubelet loop that runs one step every `interval` seconds on its own thread until stopped (the
node status sync, the Lease renewal). A step that fails (an unavailable API) is tried again at the
next tick, as kubelet's loops do."""

from __future__ import annotations

import logging
import threading
from typing import Self

log = logging.getLogger(__name__)


class Periodic:
    def __init__(self, name: str, interval: float) -> None:
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def tick(self) -> None:
        raise NotImplementedError

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.tick()
            except Exception as error:  # noqa: BLE001 - an unavailable API: the next tick tries again
                log.debug("%s: %s", self._thread.name, error)
