"""Faults a test can switch on: failing requests, latency, cut watches, and the API going away.

Verbs are Kubernetes verbs (get, list, watch, create, update, patch, delete, deletecollection);
resources are plural names, with a subresource as `pods/binding` or `pods/status`. None matches any.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from sim.apiserver.errors import ApiError


@dataclass
class _Failure:
    remaining: int
    code: int
    message: str
    verb: str | None
    resource: str | None
    namespace: str | None


@dataclass
class _Latency:
    seconds: float
    verb: str | None
    resource: str | None


def _matches(want: str | None, got: str) -> bool:
    return want is None or want == got


class Faults:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failures: list[_Failure] = []
        self._latencies: list[_Latency] = []
        self.watch_generation = 0  # bumped to cut every open watch

    def fail_next(
        self,
        n: int = 1,
        *,
        verb: str | None = None,
        resource: str | None = None,
        code: int = 500,
        message: str = "",
        namespace: str | None = None,
    ) -> None:
        """Answer the next `n` matching requests with HTTP `code` (a Status with that code)."""
        with self._lock:
            self._failures.append(
                _Failure(n, code, message or f"injected fault: HTTP {code}", verb, resource, namespace)
            )

    def add_latency(self, seconds: float, *, verb: str | None = None, resource: str | None = None) -> None:
        """Delay every matching request by `seconds` before it is served."""
        with self._lock:
            self._latencies.append(_Latency(seconds, verb, resource))

    def clear(self) -> None:
        with self._lock:
            self._failures.clear()
            self._latencies.clear()

    def cut_watches(self) -> None:
        """End every open watch stream now (clients see the stream close and must re-watch)."""
        with self._lock:
            self.watch_generation += 1

    def check(self, verb: str, resource: str, namespace: str) -> None:
        """Called for each request before it is served: sleeps and/or raises the injected error."""
        delay = 0.0
        failure = None
        with self._lock:
            for lat in self._latencies:
                if _matches(lat.verb, verb) and _matches(lat.resource, resource):
                    delay += lat.seconds
            for f in self._failures:
                if (
                    f.remaining > 0
                    and _matches(f.verb, verb)
                    and _matches(f.resource, resource)
                    and _matches(f.namespace, namespace)
                ):
                    f.remaining -= 1
                    failure = f
                    break
            self._failures = [f for f in self._failures if f.remaining > 0]
        if delay:
            time.sleep(delay)
        if failure:
            raise ApiError(failure.code, failure.message)
