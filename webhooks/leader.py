"""One leadership for the scheduler pod: `dynmig serve` leads exactly while the kube-scheduler in its
own pod holds the scheduler's Lease.

kube-scheduler elects itself on a coordination.k8s.io/v1 Lease (holderIdentity `<hostname>_<uuid>`,
and a pod's hostname is its name) and calls only the extender on its own pod's 127.0.0.1. So serve
never competes for a lease of its own: it reads kube-scheduler's and answers filter and bind only
while the holder is a process of its own pod, because in-memory reservations of two schedulers
would not see each other. Every replica answers admission and keeps its cache warm, so a new
leader starts from the reservations recorded in pod annotations.

Why it cannot overlap: the holder's kube-scheduler writes `renewTime` with this pod's own clock, and
serve stops leading at renewTime + 2/3 of leaseDurationSeconds (10 s of kube-scheduler's default
15 s, its renewDeadline). Another candidate may take the Lease only after it has seen the same
record unchanged for the whole leaseDuration on its own clock, so the old leader has stopped first,
whatever the skew between nodes.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from webhooks.kube import Kube

log = logging.getLogger(__name__)

LEADING_SHARE = 2 / 3  # of leaseDurationSeconds: kube-scheduler's renewDeadline / leaseDuration (10 s / 15 s)
DEFAULT_LEASE_SECONDS = 15  # kube-scheduler's leaseDuration


class AlwaysLeader:
    """Leader election switched off (one replica, the lab, tests)."""

    def is_leader(self) -> bool:
        return True

    def refresh(self) -> bool:
        return True

    def start(self) -> AlwaysLeader:
        return self

    def stop(self) -> None:
        pass


def holder_pod(holder: Any) -> str:
    """The hostname part of a client-go holderIdentity `<hostname>_<uuid>` ('' if none)."""
    if not isinstance(holder, str) or not holder:
        return ""
    return holder.rsplit("_", 1)[0]


def leading_until(spec: Any, identity: str, now: float) -> float:
    """Until when (epoch seconds) `identity`'s pod leads by this Lease spec; 0 when it does not hold it."""
    if not isinstance(spec, dict) or holder_pod(spec.get("holderIdentity")) != identity:
        return 0.0
    renewed = _parse(spec.get("renewTime")) or _parse(spec.get("acquireTime"))
    if renewed is None:
        return 0.0
    duration = spec.get("leaseDurationSeconds")
    if not isinstance(duration, int) or isinstance(duration, bool) or duration <= 0:
        duration = DEFAULT_LEASE_SECONDS
    window = duration * LEADING_SHARE
    # never beyond a window from now: a renewTime in the future is not a reason to lead longer
    return min(renewed.timestamp() + window, now + window)


class LeaseFollower:
    """Follows Lease `namespace/name` (kube-scheduler's) and leads while `identity`'s pod holds it.

    The Lease is read every `poll` seconds and, when a caller asks `refresh()` while not leading, at
    once (at most every `min_refresh` seconds): a kube-scheduler that has just won the Lease finds
    its extender leading on its first call. A failed read changes nothing: the known lease runs out.
    """

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        name: str,
        identity: str,
        poll: float = 1.0,
        min_refresh: float = 0.2,
        clock: Callable[[], float] = time.time,
        on_change: Callable[[bool], None] = lambda leader: None,
    ):
        self.kube, self.namespace, self.name, self.identity = kube, namespace, name, identity
        self.poll, self.min_refresh, self.clock, self.on_change = poll, min_refresh, clock, on_change
        self._until = 0.0
        self._read_at = 0.0
        self._was = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dynmig-leader", daemon=True)

    def is_leader(self) -> bool:
        return self.clock() < self._until

    def refresh(self) -> bool:
        """Read the Lease now unless it was read moments ago; then whether this pod leads."""
        if time.monotonic() - self._read_at >= self.min_refresh:
            self._read()
        return self.is_leader()

    def start(self) -> LeaseFollower:
        self._read()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self.poll):
            self._read()

    def _read(self) -> None:
        with self._lock:
            self._read_at = time.monotonic()
            try:
                body = self.kube.lease_or_none(self.namespace, self.name)
                spec = body.get("spec") if isinstance(body, dict) else None
                self._until = leading_until(spec, self.identity, self.clock()) if body is not None else 0.0
            except Exception as error:  # noqa: BLE001 - API unreachable or a garbled body: the lease runs out
                log.warning("leader election: reading Lease %s/%s: %s", self.namespace, self.name, error)
            now = self.is_leader()
            changed, self._was = now != self._was, now
        if changed:
            log.info(
                "leader election: pod %s is %s (Lease %s/%s)",
                self.identity,
                "the leader" if now else "a follower",
                self.namespace,
                self.name,
            )
            self.on_change(now)


def _parse(value: Any) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=dt.UTC)
