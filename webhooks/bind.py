"""Extender bind: node lock, then the Binding carrying the pod's whole reservation.

Two API writes on the critical path, in HAMi's order: the node lock (`hami.io/mutex.lock`), then
the Binding. The Binding carries HAMi's filter-time annotations (`hami.io/vgpu-node`,
`vgpu-devices-to-allocate`, ..., kept in the fleet's reservation since the filter: webhooks/fleet.py) and
`hami.io/bind-phase: allocating` with bind-time; the API server copies a Binding's annotations onto
the pod in the same update that sets spec.nodeName (pods/binding storage,
setPodHostAndAnnotations), so the device plugin never sees the pod on its node without them, and
no other pod write is needed (HAMi writes the reservation at filter and bind-phase before the
Binding: two more pod writes and watch events per pod).

Bind refuses, and kube-scheduler filters the pod again, when the fleet no longer holds a
reservation for the pod (it lapsed, a later filter replaced it, or a restart lost it) or holds one
on another node. Every answer is a `BindResult`: bound; retry (what the bind took and the pod's
reservation are released, and a `BindingFailed` event says why); not-theirs (the request names a
pod the cluster does not have); not-again (the pod is bound, ended or terminating: its reservation
is left as it is). A successful bind posts no event of ours: kube-scheduler posts `Scheduled`.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mig.allowlist import ResourceNames
from mig.annotations import BIND_PHASE, BIND_PHASE_ALLOCATING, BIND_TIME, AnnotationError
from mig.pods import PodRecord
from webhooks.cache import ClusterCache
from webhooks.extender import BadArgs, ExtenderBindingArgs, WireError, bind_result
from webhooks.filter import PodReadings, replan_problem
from webhooks.fleet import Fleet, Reservation
from webhooks.kube import EventRecorder, Kube
from webhooks.metrics import Metrics
from webhooks.nodelock import LockValue, NodeLock, lock_free

log = logging.getLogger(__name__)


class BindOutcome(enum.Enum):
    BOUND = "bound"
    RETRY = "retry"  # refused or failed: what it took is released; kube-scheduler filters again
    NOT_THEIRS = "not-theirs"  # the request's pod is not the cluster's (another UID): nothing touched
    NOT_AGAIN = "not-again"  # bound already, ended or terminating: its reservation stays as it is


@dataclass(frozen=True)
class BindResult:
    outcome: BindOutcome
    message: str = ""  # why, when not bound (kube-scheduler shows it)

    @staticmethod
    def retry(message: str) -> BindResult:
        return BindResult(BindOutcome.RETRY, message)


BOUND = BindResult(BindOutcome.BOUND)


class Refused(RuntimeError):
    """The fleet holds no reservation bind may carry out for this pod on this node."""


@dataclass
class Binder:
    fleet: Fleet
    cache: ClusterCache | None
    kube: Kube
    lock: NodeLock
    resources: Callable[[], ResourceNames]
    events: EventRecorder
    metrics: Metrics
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
        result = self.bind(args)
        self.metrics.bind_latency.labels("bound" if result.outcome is BindOutcome.BOUND else "error").observe(
            time.perf_counter() - started
        )
        return bind_result(result.message)

    def _pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        pod = self.cache.pod(namespace, name) if self.cache else None
        # the watch may lag the scheduler's own by a moment
        return pod if pod is not None else self.kube.pod_or_none(namespace, name)

    def _owner_exists(self, namespace: str, name: str) -> bool:
        try:
            return self._pod(namespace, name) is not None
        except Exception:  # noqa: BLE001 - unsure whether the owner exists: treat the lock as held
            return True  # unsure: treat the lock as held

    def bind(self, args: ExtenderBindingArgs) -> BindResult:
        """Bind the pod as the request says; a failure releases the pod's reservation, a success
        leaves it counted (its node no longer chosen) until the cache shows the bound pod."""
        result, reservation = self._bind(args)
        if result.outcome is BindOutcome.RETRY:
            self.fleet.release(args.pod_uid)
        elif reservation is not None:
            self.fleet.bound(reservation)
        return result

    def _bind(self, args: ExtenderBindingArgs) -> tuple[BindResult, Reservation | None]:
        ns, name, node = args.pod_namespace, args.pod_name, args.node
        try:
            pod = self._pod(ns, name)
        except Exception as error:  # noqa: BLE001 - API down, timeouts, TLS: answered in Error
            return BindResult.retry(f"bind {ns}/{name}: cannot read the pod: {str(error)[:300]}"), None
        if pod is None:
            return BindResult.retry(f"bind {ns}/{name}: pod not found"), None
        uid = (pod.get("metadata") or {}).get("uid") or ""
        if args.pod_uid != uid:
            why = (
                f"bind {ns}/{name}: the request names uid {args.pod_uid!r}, the cluster's pod has {uid!r}; "
                "dynmig binds only the pod the cluster has"
            )
            return BindResult(BindOutcome.NOT_THEIRS, why), None
        reservation: Reservation | None = None
        locked = False
        try:
            typed, request = self.readings.read(pod, self.resources(), "Pod")
            gpu = request is not None
            problem = replan_problem(typed) if gpu else ""
            if problem:
                why = f"bind {ns}/{name}: pod {problem}; dynmig does not bind it again"
                return BindResult(BindOutcome.NOT_AGAIN, why), None
            annotations = None
            if gpu:
                reservation = self._reservation(pod, uid, node)
                annotations = self._annotations(reservation)
                cached = self.cache.node(node) if self.cache else None
                if not lock_free(cached if cached is not None else self.kube.get_node(node)):
                    # the node lock before the Binding: the device plugin finds the pod it
                    # allocates for through the lock (a failed Binding releases it below). Only a
                    # node whose plugin finds the pod through kubelet's PodResources API goes
                    # without it (webhooks/nodelock.lock_free)
                    self.lock.acquire(node, ns, name, self._owner_exists, cached)
                    locked = True
                    if self.cache is not None:
                        self.cache.note_lock(node, LockValue(self.lock.clock(), ns, name))
            self.kube.bind(ns, name, uid, node, annotations)
        except Exception as error:  # noqa: BLE001 - any failure must release what the bind took
            message = f"binding {ns}/{name} to {node} failed: {error}"
            log.warning("%s", message)
            if locked:
                self._unlock(node, ns, name)
            self.events.record(pod, "Warning", "BindingFailed", message)
            return BindResult.retry(message), None
        return BOUND, reservation

    def _unlock(self, node: str, namespace: str, name: str) -> None:
        try:
            self.lock.release(node, namespace, name)
        except Exception as release_error:  # noqa: BLE001 - best effort; the lock expires
            log.warning("could not release node lock on %s: %s", node, release_error)

    def _reservation(self, pod: dict[str, Any], uid: str, node: str) -> Reservation | None:
        """The fleet's reservation for the pod on this node; None when an earlier dynmig already
        recorded it on the pod (the fleet counts it as held). Refused (the bind fails,
        kube-scheduler filters again) otherwise: bind never records slices the fleet may have handed
        to another pod."""
        reservation = self.fleet.reservation(uid)
        if reservation is None:
            if self._recorded_on_pod(pod, uid, node):
                return None
            raise Refused(
                "this scheduler holds no MIG reservation for the pod (it expired, or the scheduler "
                "restarted since the filter); kube-scheduler filters the pod again"
            )
        if reservation.node != node:
            raise Refused(
                f"the pod's MIG reservation is on node {reservation.node}, not {node}; "
                "kube-scheduler filters the pod again"
            )
        return reservation

    @staticmethod
    def _annotations(reservation: Reservation | None) -> dict[str, str]:
        """What the Binding carries: the reservation's annotations (if any) and bind-phase allocating."""
        phase = {BIND_PHASE: BIND_PHASE_ALLOCATING, BIND_TIME: str(int(time.time()))}
        return {**reservation.annotations, **phase} if reservation is not None else phase

    def _recorded_on_pod(self, pod: dict[str, Any], uid: str, node: str) -> bool:
        try:
            recorded = PodRecord((pod.get("metadata") or {}).get("annotations") or {}).node
        except AnnotationError:
            return False
        held = self.fleet.held(uid)
        return recorded == node and held is not None and held.node == node
