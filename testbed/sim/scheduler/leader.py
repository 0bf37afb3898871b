"""kube-scheduler's leader election, as client-go's leaderelection package does it on a Lease.

Identity `<hostname>_<uuid>`. Acquire: every retryPeriod (jittered by up to 1.2x) read the Lease;
take it when it is absent, free (holderIdentity ""), ours, or when the record has not changed for
leaseDuration as observed on this process's own clock (never by comparing renewTime with our
clock). Renew every retryPeriod; when no renew succeeded within renewDeadline, leadership is lost
(kube-scheduler then exits). On a graceful stop the Lease is released (ReleaseOnCancel: holder "",
leaseDurationSeconds 1), so a successor need not wait. Writes carry the Lease's resourceVersion,
so two candidates cannot both win.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from kubernetes import client

from sim.scheduler.config import LeaderElection

log = logging.getLogger("sim.scheduler.leader")
JITTER = 1.2  # client-go's JitterFactor


def _micro(now: dt.datetime) -> str:
    """metav1.MicroTime: RFC 3339 with microseconds."""
    return now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        api_client: Any,
        cfg: LeaderElection,
        hostname: str,
        on_started: Callable[[], None],
        on_lost: Callable[[], None],
    ):
        self.api = client.CoordinationV1Api(api_client)
        self.cfg = cfg
        self.identity = f"{hostname}_{uuid.uuid4()}"
        self.on_started, self.on_lost = on_started, on_lost
        self.leading = threading.Event()
        self.lost = False
        self._observed: str | None = None  # the raw spec last seen
        self._observed_at = 0.0  # time.monotonic() when it last changed
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sched-leader", daemon=True)

    def start(self) -> LeaderElector:
        self._thread.start()
        return self

    def stop(self, release: bool = True) -> None:
        """Stop campaigning; `release=False` is a process killed without a chance to let go."""
        self._stopping.set()
        self._thread.join(timeout=max(5.0, self.cfg.renew_deadline))
        if release and self.leading.is_set():
            self._release()
        self.leading.clear()

    # ---- the loop ------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stopping.is_set():  # acquire
            if self._try():
                break
            self._stopping.wait(self.cfg.retry_period * (1 + random.random() * JITTER))
        else:
            return
        log.info(
            "%s acquired Lease %s/%s", self.identity, self.cfg.resource_namespace, self.cfg.resource_name
        )
        self.leading.set()
        self.on_started()
        while not self._stopping.wait(self.cfg.retry_period):  # renew
            deadline = time.monotonic() + self.cfg.renew_deadline
            while not self._try():
                if time.monotonic() >= deadline or self._stopping.wait(self.cfg.retry_period / 4):
                    break
            else:
                continue
            if self._stopping.is_set():
                return
            log.error(
                "%s: leaderelection lost (no renew within %.1fs)", self.identity, self.cfg.renew_deadline
            )
            self.leading.clear()
            self.lost = True
            self.on_lost()
            return

    def _try(self) -> bool:
        try:
            return self._try_acquire_or_renew()
        except Exception as exc:  # noqa: BLE001 - an unreachable API is a failed attempt
            log.info("%s: lease attempt failed: %s", self.identity, exc)
            return False

    def _try_acquire_or_renew(self) -> bool:
        ns, name = self.cfg.resource_namespace, self.cfg.resource_name
        now = dt.datetime.now(dt.UTC)
        record = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.cfg.lease_duration),
            "acquireTime": _micro(now),
            "renewTime": _micro(now),
            "leaseTransitions": 0,
        }
        try:
            body = json.loads(self.api.read_namespaced_lease(name, ns, _preload_content=False).data)
        except client.ApiException as exc:
            if exc.status != 404:
                raise
            lease = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": name, "namespace": ns},
                "spec": record,
            }
            self._drain(self.api.create_namespaced_lease(ns, lease, _preload_content=False))
            self._seen(json.dumps(record, sort_keys=True))
            return True
        spec = body.get("spec") or {}
        raw = json.dumps(spec, sort_keys=True)
        if raw != self._observed:
            self._seen(raw)
        holder = spec.get("holderIdentity") or ""
        duration = float(spec.get("leaseDurationSeconds") or self.cfg.lease_duration)
        if holder and holder != self.identity and time.monotonic() < self._observed_at + duration:
            return False  # held by someone else, renewed within the lease duration as we saw it
        if holder == self.identity:
            record["acquireTime"] = spec.get("acquireTime") or record["acquireTime"]
            record["leaseTransitions"] = int(spec.get("leaseTransitions") or 0)
        else:
            record["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        body["spec"] = record
        try:
            self._drain(self.api.replace_namespaced_lease(name, ns, body, _preload_content=False))
        except client.ApiException as exc:
            if exc.status == 409:  # someone else wrote first
                return False
            raise
        self._seen(json.dumps(record, sort_keys=True))
        return True

    def _release(self) -> None:
        ns, name = self.cfg.resource_namespace, self.cfg.resource_name
        try:
            body = json.loads(self.api.read_namespaced_lease(name, ns, _preload_content=False).data)
            spec = body.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return
            now = _micro(dt.datetime.now(dt.UTC))
            body["spec"] = {
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": int(spec.get("leaseTransitions") or 0),
            }
            self._drain(self.api.replace_namespaced_lease(name, ns, body, _preload_content=False))
            log.info("%s released Lease %s/%s", self.identity, ns, name)
        except Exception as exc:  # noqa: BLE001 - best effort, as client-go's release
            log.info("%s: releasing the lease failed: %s", self.identity, exc)

    def _seen(self, raw: str) -> None:
        self._observed, self._observed_at = raw, time.monotonic()

    @staticmethod
    def _drain(resp: Any) -> None:
        _ = resp.data
