"""A graceful stop with a deadline, inside the pod's termination grace period.

kubelet sends SIGTERM, waits `terminationGracePeriodSeconds` (30 by default), then SIGKILL. A stop
that blocks (a watch on an API server that is gone, a join that never returns) must not spend the
whole period: after the deadline the process exits on its own and says so.
"""

from __future__ import annotations

import logging
import os
import threading

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
