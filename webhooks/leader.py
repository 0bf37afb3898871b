"""Leader election on a coordination.k8s.io/v1 Lease, so exactly one replica filters and binds.

Every replica answers admission and keeps its cache warm; only the lease holder answers filter and
bind (the others reply with an `Error`), because in-memory reservations of two schedulers would not
see each other. Writes carry the Lease's resourceVersion, so two candidates cannot both win.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes.client.exceptions import ApiException

from webhooks.kube import CONFLICT, NOT_FOUND, Kube

log = logging.getLogger(__name__)


def _micro(now: dt.datetime) -> str:
    return now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(value)
    except ValueError:
        return None


class AlwaysLeader:
    """Leader election switched off (one replica, tests)."""

    def is_leader(self) -> bool:
        return True

    def start(self) -> AlwaysLeader:
        return self

    def stop(self) -> None:
        pass


class LeaseElector:
    def __init__(self, kube: Kube, namespace: str, name: str, identity: str, lease_seconds: int = 15,
                 renew_every: float = 2.0, clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
                 on_change: Callable[[bool], None] = lambda leader: None):
        self.kube, self.namespace, self.name, self.identity = kube, namespace, name, identity
        self.lease_seconds = lease_seconds
        self.renew_every = renew_every
        self.clock = clock
        self.on_change = on_change
        self._leader_until = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dynmig-leader", daemon=True)

    def is_leader(self) -> bool:
        # Stop acting as leader a little before the lease could be taken by someone else.
        return time.monotonic() < self._leader_until

    def start(self) -> LeaseElector:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        was = False
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                won = self.try_acquire_or_renew()
            except Exception as error:  # noqa: BLE001 - API down: stop leading when the lease runs out
                log.warning("leader election: %s", error)
                won = False
            if won:
                self._leader_until = started + self.lease_seconds * 2 / 3
            elif time.monotonic() >= self._leader_until:
                self._leader_until = 0.0
            if self.is_leader() != was:
                was = self.is_leader()
                log.info("leader election: %s is %s", self.identity, "the leader" if was else "a follower")
                self.on_change(was)
            self._stop.wait(self.renew_every)

    def try_acquire_or_renew(self) -> bool:
        api = self.kube.coordination
        now = self.clock()
        try:
            lease = api.read_namespaced_lease(self.name, self.namespace, _preload_content=False)
            body: dict[str, Any] | None = json.loads(lease.data)
        except ApiException as error:
            if error.status != NOT_FOUND:
                raise
            body = None
        spec_new = {"holderIdentity": self.identity, "leaseDurationSeconds": self.lease_seconds,
                    "renewTime": _micro(now)}
        if body is None:
            spec_new["acquireTime"] = _micro(now)
            spec_new["leaseTransitions"] = 0
            manifest = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                        "metadata": {"name": self.name, "namespace": self.namespace}, "spec": spec_new}
            try:
                _done(api.create_namespaced_lease(self.namespace, manifest, _preload_content=False))
                return True
            except ApiException as error:
                if error.status == CONFLICT:
                    return False
                raise
        spec = body.get("spec") or {}
        holder = spec.get("holderIdentity")
        renewed = _parse(spec.get("renewTime")) or _parse(spec.get("acquireTime"))
        duration = spec.get("leaseDurationSeconds") or self.lease_seconds
        expired = renewed is None or (now - renewed).total_seconds() > duration
        if holder and holder != self.identity and not expired:
            return False
        if holder != self.identity:
            spec_new["acquireTime"] = _micro(now)
            spec_new["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        else:
            spec_new["acquireTime"] = spec.get("acquireTime") or _micro(now)
            spec_new["leaseTransitions"] = int(spec.get("leaseTransitions") or 0)
        body["spec"] = spec_new
        try:
            _done(api.replace_namespaced_lease(self.name, self.namespace, body, _preload_content=False))
            return True
        except ApiException as error:
            if error.status == CONFLICT:
                return False
            raise


def _done(reply: Any) -> None:
    """Read and discard an unread reply so its connection goes back to the pool (else one leaks per call)."""
    reply.drain_conn()
    reply.release_conn()
