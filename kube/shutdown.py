"""A graceful stop with a deadline, inside the pod's termination grace period.

kubelet sends SIGTERM, waits `terminationGracePeriodSeconds` (30 by default), then SIGKILL. A stop
that blocks (a watch on an API server that is gone, a join that never returns) must not spend the
whole period: after the deadline the process exits on its own and says so.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

STOP_DEADLINE = 15.0  # seconds, half of the default terminationGracePeriodSeconds of 30


def exit_if_stop_hangs(seconds: float = STOP_DEADLINE) -> threading.Timer:
    """Arm a daemon timer that ends the process with status 1 after `seconds` (call it just before
    a graceful stop; the timer dies with the process when the stop finishes in time)."""

    def give_up() -> None:
        log.error("graceful stop took longer than %.0fs; exiting", seconds)
        os._exit(1)

    timer = threading.Timer(seconds, give_up)
    timer.daemon = True
    timer.start()
    return timer


def on_stop_signal() -> list[int]:
    """Note SIGTERM and SIGINT in the returned list (install before starting, so a stop during
    startup is graceful too). The handler only appends: Event.set would take a lock the interrupted
    main thread may hold inside Event.wait, and the process would never stop."""
    received: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: received.append(signum))
    return received


def run_until_signalled(received: list[int], stop: Callable[[], None], poll: float = 0.2) -> None:
    """Wait for a signal noted by `on_stop_signal`, then `stop()` within STOP_DEADLINE."""
    while not received:
        time.sleep(poll)
    exit_if_stop_hangs(STOP_DEADLINE)
    stop()
