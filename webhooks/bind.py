"""Extender bind: node lock, then the Binding carrying `hami.io/bind-phase: allocating` and bind-time.

Two API writes on the critical path, in HAMi's order: the node lock (`hami.io/mutex.lock`), then
the Binding, which carries the bind-phase annotations (the API server sets them in the same update
as spec.nodeName). The filter's reservation write, still in flight when kube-scheduler binds at
once, overlaps the lock write; the Binding waits for it.

A failed bind releases what it took (the node lock, the pod's in-memory reservation) and says why
in a `BindingFailed` event; the pod's recorded reservation is replaced when kube-scheduler filters
it again, and dropped if the pod goes away.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mig.allowlist import ResourceNames
from mig.annotations import BIND_PHASE, BIND_PHASE_ALLOCATING, BIND_TIME
from webhooks.cache import ClusterCache
from webhooks.extender import BadArgs, ExtenderBindingArgs, WireError, bind_result
from webhooks.filter import pod_request, replan_problem, typed_pod
from webhooks.fleet import Fleet
from webhooks.kube import EventRecorder, Kube
from webhooks.metrics import Metrics
from webhooks.nodelock import LockValue, NodeLock
from webhooks.pending import PendingBinds

log = logging.getLogger(__name__)
_NOT_AGAIN = "dynmig does not bind it again"
_NOT_THEIRS = "dynmig binds only the pod the cluster has"


@dataclass
class Binder:
    fleet: Fleet
    cache: ClusterCache | None
    kube: Kube
    lock: NodeLock
    resources: Callable[[], ResourceNames]
    events: EventRecorder
    metrics: Metrics
    pending: PendingBinds  # shared with the filter: its reservation write of this pod, the held node

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        started = time.perf_counter()
        try:
            args = ExtenderBindingArgs.parse(body)
        except WireError:
            self.metrics.bind_latency.labels("error").observe(time.perf_counter() - started)
            raise  # not binding args at all: HTTP 400
        except BadArgs as error:
            self.metrics.bind_latency.labels("error").observe(time.perf_counter() - started)
            return bind_result(str(error))
        failure = self._bind(args)
        if not failure.endswith((_NOT_AGAIN, _NOT_THEIRS)):
            self.pending.done(args.pod_uid or "", args.node)
        self.metrics.bind_latency.labels("error" if failure else "bound").observe(
            time.perf_counter() - started
        )
        return bind_result(failure)

    def _pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        pod = self.cache.pod(namespace, name) if self.cache else None
        # the watch may lag the scheduler's own by a moment
        return pod if pod is not None else self.kube.pod_or_none(namespace, name)

    def _owner_exists(self, namespace: str, name: str) -> bool:
        try:
            return self._pod(namespace, name) is not None
        except Exception:  # noqa: BLE001 - unsure whether the owner exists: treat the lock as held
            return True  # unsure: treat the lock as held

    def _bind(self, args: ExtenderBindingArgs) -> str:
        ns, name, node = args.pod_namespace, args.pod_name, args.node
        try:
            pod = self._pod(ns, name)
        except Exception as error:  # noqa: BLE001 - API down, timeouts, TLS: answered in Error
            return f"bind {ns}/{name}: cannot read the pod: {str(error)[:300]}"
        if pod is None:
            return f"bind {ns}/{name}: pod not found"
        uid = (pod.get("metadata") or {}).get("uid") or ""
        if args.pod_uid != uid:
            return (
                f"bind {ns}/{name}: the request names uid {args.pod_uid!r}, the cluster's pod has {uid!r}; "
                f"{_NOT_THEIRS}"
            )
        locked = False
        try:
            gpu = pod_request(pod, self.resources()) is not None
            problem = replan_problem(typed_pod(pod)) if gpu else ""
            if problem:
                return f"bind {ns}/{name}: pod {problem}; {_NOT_AGAIN}"
            phase = None
            if gpu:
                # the node lock first: its write overlaps the filter's reservation write, which may
                # still be in flight; both land before the Binding, the only write the device plugin
                # acts on (a failed reservation releases the lock below)
                self.lock.acquire(
                    node, ns, name, self._owner_exists, self.cache.node(node) if self.cache else None
                )
                locked = True
                if self.cache is not None:
                    self.cache.note_lock(node, LockValue(self.lock.clock(), ns, name))
                phase = {BIND_PHASE: BIND_PHASE_ALLOCATING, BIND_TIME: str(int(time.time()))}
            recorded = self.pending.wait_recorded(uid)
            if recorded:
                raise RuntimeError(recorded)
            # bind-phase and bind-time ride on the Binding: the API server writes them onto the pod in
            # the same update that sets spec.nodeName, so the device plugin never sees the pod on
            # the node without them (HAMi patches them first, one more pod write and watch event).
            self.kube.bind(ns, name, uid, node, phase)
        except Exception as error:  # noqa: BLE001 - any failure must release what the bind took
            message = f"binding {ns}/{name} to {node} failed: {error}"
            log.warning("%s", message)
            if locked:
                try:
                    self.lock.release(node, ns, name)
                except Exception as release_error:  # noqa: BLE001 - best effort; the lock expires
                    log.warning("could not release node lock on %s: %s", node, release_error)
            self.fleet.release(uid)
            self.events.record(pod, "Warning", "BindingFailed", message)
            return message
        self.events.record(
            pod, "Normal", "BindingSucceed", f"Successfully binding node [{node}] to {ns}/{name}"
        )
        return ""
