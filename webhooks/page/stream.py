"""Server-sent events for the page: one shared, rate-limited rendering, a bounded number of streams.

Every open stream asks the same `Feed` for the current fragment; the feed renders at most once per
`interval` however many streams ask, so N browsers cost one rendering per interval, not N. A stream
sends an event only when the fragment changed and a comment line as heartbeat otherwise; writing
the heartbeat is also how a client that vanished without closing its connection is noticed.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from starlette.concurrency import run_in_threadpool

RETRY_MS = 3000  # how long a browser waits before it reconnects a dropped stream
COST_SHARE = 5  # after a rendering that took t seconds, the next one waits at least COST_SHARE × t


class Feed:
    """The current fragment and its version; the version grows only when the fragment changes.

    Renderings are at least `interval` apart, and more when they are slow (`COST_SHARE`): however
    big the fleet, the page takes at most about a fifth of one core from the scheduler."""

    def __init__(
        self, render: Callable[[], str], interval: float = 1.0, clock: Callable[[], float] = time.monotonic
    ):
        self._render, self.interval, self._clock = render, interval, clock
        self._lock = threading.Lock()
        self._at = float("-inf")
        self._wait = interval
        self._text = ""
        self.version = 0
        self.renders = 0

    def current(self) -> tuple[int, str]:
        with self._lock:
            now = self._clock()
            if now - self._at >= self._wait:
                self._at = now
                text = self._render()
                self.renders += 1
                self._wait = max(self.interval, COST_SHARE * (self._clock() - now))
                if text != self._text or self.version == 0:
                    self._text, self.version = text, self.version + 1
            return self.version, self._text


class StreamLimit:
    """At most `limit` open streams; used from the event loop only (no lock needed)."""

    def __init__(self, limit: int):
        self.limit = limit
        self.open = 0

    def acquire(self) -> bool:
        if self.open >= self.limit:
            return False
        self.open += 1
        return True

    def release(self) -> None:
        self.open = max(0, self.open - 1)


def event(name: str, data: str) -> str:
    """One SSE event; every line of `data` gets its own `data:` field, as the format requires."""
    lines = data.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return f"event: {name}\n" + "".join(f"data: {line}\n" for line in lines) + "\n"


@dataclass(frozen=True)
class Timing:
    poll: float = 0.5  # how often a stream looks at the feed
    heartbeat: float = 15.0  # a comment after this long without an event


DEFAULT_TIMING = Timing()


async def events(feed: Feed, limit: StreamLimit, timing: Timing = DEFAULT_TIMING) -> AsyncIterator[str]:
    """The stream of one client, which already holds a slot of `limit`; the slot is given back when
    the stream ends for any reason (Starlette cancels it when the client disconnects)."""
    try:
        yield f"retry: {RETRY_MS}\n\n"
        sent, quiet_since = 0, time.monotonic()
        while True:
            version, text = await run_in_threadpool(feed.current)
            now = time.monotonic()
            if version != sent:
                sent, quiet_since = version, now
                yield event("fleet", text)
            elif now - quiet_since >= timing.heartbeat:
                quiet_since = now
                yield ": heartbeat\n\n"
            await asyncio.sleep(timing.poll)
    finally:
        limit.release()
