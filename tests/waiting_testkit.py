"""Waiting for what happens in the background (caches, watches, controllers, other processes).

One generous bound for every test: a condition that holds returns at once, so the bound costs only
a failing test, while a loaded CI machine (2 cores, two test workers, subprocesses) gets the time a
quiet laptop does not need.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
WAIT = 30.0  # seconds
POLL = 0.02


def eventually(check: Callable[[], T], timeout: float = WAIT, interval: float = POLL) -> T:
    """check()'s first truthy value within `timeout` seconds, else its last (falsy) one, so that
    `assert eventually(...)` shows what was last seen."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def wait_for(check: Callable[[], T], what: str = "condition", timeout: float = WAIT) -> T:
    """check()'s first truthy value within `timeout` seconds; AssertionError naming `what` if none."""
    value = eventually(check, timeout)
    if not value:
        raise AssertionError(f"{what} not reached within {timeout:.0f}s")
    return value
