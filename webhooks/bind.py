"""Extender bind: node lock, then the Binding carrying the pod's whole reservation.

Two API writes on the critical path, in HAMi's order: the node lock (`hami.io/mutex.lock`), then
the Binding. The Binding carries HAMi's filter-time annotations (`hami.io/vgpu-node`,
`vgpu-devices-to-allocate`, ..., kept in memory since the filter: webhooks/pending.py) and
`hami.io/bind-phase: allocating` with bind-time; the API server copies a Binding's annotations onto
the pod in the same update that sets spec.nodeName (pods/binding storage,
setPodHostAndAnnotations), so the device plugin never sees the pod on its node without them, and
no other pod write is needed (HAMi writes the reservation at filter and bind-phase before the
Binding: two more pod writes and watch events per pod).

Bind refuses, and kube-scheduler filters the pod again, when the reservation it would record is
no longer the fleet's (expired, replaced by a later filter, lost in a restart) or names another
node. A failed bind releases what it took (the node lock, the pod's in-memory reservation) and
says why in a `BindingFailed` event. A successful one posts no event of ours: kube-scheduler posts
`Scheduled`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mig.allowlist import ResourceNames
from mig.annotations import BIND_PHASE, BIND_PHASE_ALLOCATING, BIND_TIME, AnnotationError
from mig.pods import PodReservation
from webhooks.cache import ClusterCache
from webhooks.extender import BadArgs, ExtenderBindingArgs, WireError, bind_result
from webhooks.filter import PodReadings, replan_problem
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
    pending: PendingBinds  # shared with the filter: the pod's reservation, the held node
    readings: PodReadings = field(default_factory=PodReadings)  # shared with the filter

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
            typed, request = self.readings.read(pod, self.resources(), "Pod")
            gpu = request is not None
            problem = replan_problem(typed) if gpu else ""
            if problem:
                return f"bind {ns}/{name}: pod {problem}; {_NOT_AGAIN}"
            annotations = self._reservation(pod, uid, node) if gpu else None
            if gpu:
                # the node lock before the Binding: the device plugin finds the pod it allocates for
                # through the lock (a failed Binding releases it below)
                self.lock.acquire(
                    node, ns, name, self._owner_exists, self.cache.node(node) if self.cache else None
                )
                locked = True
                if self.cache is not None:
                    self.cache.note_lock(node, LockValue(self.lock.clock(), ns, name))
            self.kube.bind(ns, name, uid, node, annotations)
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
        return ""

    def _reservation(self, pod: dict[str, Any], uid: str, node: str) -> dict[str, str]:
        """The annotations to bind a GPU pod with: its filter's reservation and bind-phase allocating.

        RuntimeError (the bind fails, kube-scheduler filters again) unless the reservation is still
        the fleet's for this node: bind never records slices the fleet may have handed to another pod."""
        phase = {BIND_PHASE: BIND_PHASE_ALLOCATING, BIND_TIME: str(int(time.time()))}
        reservation = self.pending.reservation(uid)
        if reservation is None:
            if self._recorded_on_pod(pod, uid, node):
                return phase  # written onto the pod by an earlier dynmig: the fleet counts it as held
            raise RuntimeError(
                "this scheduler holds no MIG reservation for the pod (it expired, or the scheduler "
                "restarted since the filter); kube-scheduler filters the pod again"
            )
        if reservation.node != node:
            raise RuntimeError(
                f"the pod's MIG reservation is on node {reservation.node}, not {node}; "
                "kube-scheduler filters the pod again"
            )
        if self.fleet.in_flight(uid) != reservation.usage:
            raise RuntimeError(
                "the pod's MIG reservation was replaced or expired since the filter; "
                "kube-scheduler filters the pod again"
            )
        return {**reservation.annotations, **phase}

    def _recorded_on_pod(self, pod: dict[str, Any], uid: str, node: str) -> bool:
        try:
            recorded = PodReservation((pod.get("metadata") or {}).get("annotations") or {}).node
        except AnnotationError:
            return False
        held = self.fleet.held(uid)
        return recorded == node and held is not None and held.node == node
