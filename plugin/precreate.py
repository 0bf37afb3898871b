"""Creation as soon as the node knows: pre-create a bound pod's reserved instances before Allocate.

The extender's Binding carries the pod's whole reservation, and the API server copies it onto the
pod in the same update that sets spec.nodeName (webhooks/bind.py), so a pod bound to this node
already names its GPU, profile and exact placement before kubelet admits it. The pre-creator lists
this node's pods, and for every active pod in bind-phase `allocating` whose reservation has no
runtime identity yet, asks the instance manager to create each reserved instance **for that pod**
(`InstanceManager.ensure(key, owner)`): one worker per GPU, so GPUs create in parallel and each
GPU's creates stay in series (the manager's per-GPU lock, as NVML wants). Every create is journaled
before its first NVML call, as every create is (plugin/instances.py).

Allocate then calls `ensure` with the same key and owner and gets the instance (or waits, under the
GPU lock, for the create in flight): it waits only for what is left. Nothing on the wire changes:
the runtime identity is written by Allocate, as before.

Safety:
- an instance is created only for the pod (UID) whose reservation names its exact key, and the
  manager never hands an instance of one pod UID to another (`owned-by-another-pod`);
- a pre-created instance no active pod of its own UID backs (the pod was deleted, ended, or bound
  again elsewhere or at another placement: a new UID or a changed key) is destroyed by the next
  reconcile pass (`plan_reclaim` checks the owner's UID): it is ours, journaled and never given to a
  container, so that destroy is not a guess; it is never parked as idle (`delivered` is False until
  Allocate hands it over), so it cannot go to another pod through idle reuse either;
- nothing is pre-created before startup recovery is complete (it may reset GPUs).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from base.logs import about
from mig.annotations import BIND_PHASE_ALLOCATING, AnnotationError
from plugin.instances import InstanceError, InstanceKey, InstanceManager
from plugin.journal import Owner
from plugin.kube import Kube, KubeError, PodView

log = logging.getLogger("dynmig.plugin.precreate")

POLL_S = 0.2  # how often the node's pods are listed for new reservations while some are allocating
IDLE_POLL_S = 0.5  # ... and while none is (fewer lists of a full node's pods)
RETRY_S = 2.0  # a failed pre-create (slices still held by an ended pod) is tried again after this


def wanted(pods: list[PodView], node_name: str) -> list[tuple[InstanceKey, Owner]]:
    """(key, owner) of every reservation a bound, active, allocating pod of this node still needs
    (pure): no runtime identity yet. A pod with an unreadable reservation is left to Allocate."""
    out: list[tuple[InstanceKey, Owner]] = []
    for pod in pods:
        if not pod.active or pod.phase != "Pending" or pod.node_name != node_name:
            continue
        try:
            if pod.reservation.node != node_name or pod.reservation.bind_phase != BIND_PHASE_ALLOCATING:
                continue
            allocations = pod.reservation.allocations
        except AnnotationError:
            continue
        for a in allocations:
            if a.runtime_ready or a.runtime_partial:
                continue  # realized already (or being recorded): adoption and Allocate own it
            owner = Owner(pod.uid, pod.namespace, pod.name, a.containerIndex, a.deviceIndex)
            out.append((InstanceKey.of(a), owner))
    return out


class Precreator:
    def __init__(
        self,
        kube: Kube,
        manager: InstanceManager,
        ready: Callable[[], bool],
        poll: float = POLL_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.kube = kube
        self.manager = manager
        self.ready = ready  # startup recovery complete
        self.poll = poll
        self.clock = clock
        self._workers: dict[str, ThreadPoolExecutor] = {}
        self._inflight: dict[InstanceKey, Future[None]] = {}
        self._failed: dict[tuple[InstanceKey, str], float] = {}  # (key, pod uid) -> when it may retry
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.created = 0  # instances this pre-creator created (for tests and the bench)
        self._busy = False  # the last scan saw a pod of this node still allocating

    def start(self) -> Precreator:
        self._thread = threading.Thread(target=self._run, name="dynmig-precreate", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        for worker in list(self._workers.values()):
            worker.shutdown(wait=True, cancel_futures=True)

    def _run(self) -> None:
        wait = self.poll
        while not self._stop.wait(wait):
            try:
                wait = self.poll if self.scan() or self._busy else max(self.poll, IDLE_POLL_S)
            except Exception:
                log.exception("pre-create scan failed")

    def scan(self) -> int:
        """One look at the node's pods; submits the creates still wanted. Returns how many."""
        if not self.ready():
            return 0
        try:
            pods = self.kube.list_node_pods()
        except KubeError as error:
            log.debug("pre-create: cannot list the node's pods: %s", error)
            return 0
        now = self.clock()
        submitted = 0
        todo = wanted(pods, self.kube.node_name)
        self._busy = bool(todo)
        with self._lock:
            for key, owner in todo:
                if key in self._inflight or self.manager.get(key) is not None:
                    continue
                if self._failed.get((key, owner.pod_uid), 0.0) > now:
                    continue
                if self.manager.inventory.gpu(key.gpu_uuid) is None:
                    continue  # not a GPU of this node: Allocate reports it
                worker = self._workers.get(key.gpu_uuid)
                if worker is None:
                    worker = self._workers[key.gpu_uuid] = ThreadPoolExecutor(
                        max_workers=1, thread_name_prefix=f"dynmig-precreate-{key.gpu_uuid[-8:]}"
                    )
                self._inflight[key] = worker.submit(self._create, key, owner)
                submitted += 1
        return submitted

    def wait(self, timeout: float = 30.0) -> None:
        """Until no pre-create is in flight (tests)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                pending = list(self._inflight.values())
            if not pending:
                return
            for future in pending:
                future.exception(timeout=max(deadline - time.monotonic(), 0.01))

    def _still_wanted(self, key: InstanceKey, owner: Owner) -> bool:
        """The pod (same UID) still waits for exactly this reservation: read again just before the
        create, since the scan that queued it may be seconds old (a GPU's creates go in series) and
        an instance made for a pod that went meanwhile would hold slices the scheduler sees free."""
        try:
            pod = self.kube.get_pod(owner.namespace, owner.name)
        except KubeError as error:
            log.debug("pre-create: cannot read %s again: %s", owner.ref, error)
            return False  # Allocate creates it if the pod is still there
        return (
            pod is not None
            and pod.uid == owner.pod_uid
            and (key, owner) in wanted([pod], self.kube.node_name)
        )

    def _create(self, key: InstanceKey, owner: Owner) -> None:
        try:
            if not self._still_wanted(key, owner):
                log.debug("pre-create of %s: pod %s no longer waits for it", key, owner.ref)
                return
            # creating here is what Allocate would do for this very pod (same key, same owner UID):
            # the manager journals the intent before its first NVML call, creates at exactly the
            # reserved placement, and rolls back only what this call created if a step fails
            _, created = self.manager.ensure(key, owner, delivered=False)
            if created:
                self.created += 1
                self.manager.metrics.precreates.inc()
        except InstanceError as error:
            with self._lock:
                self._failed[(key, owner.pod_uid)] = self.clock() + RETRY_S
            log.info(
                "pre-create of %s for %s failed (%s): %s; Allocate will try",
                key,
                owner.ref,
                error.reason,
                error,
                extra=about(pod=owner.ref),
            )
        finally:
            with self._lock:
                self._inflight.pop(key, None)
                if len(self._failed) > 4096:
                    now = self.clock()
                    self._failed = {k: t for k, t in self._failed.items() if t > now}
