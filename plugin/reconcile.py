"""Reclaim: destroy every managed instance no longer backed by an active pod's reservation.

The desired set is computed purely from the pods bound to this node. Destruction is irreversible, so
the pass refuses to destroy anything unless it fully understood the node: an API error, a partial
list, a malformed annotation (including a partial runtime identity) or a reservation on a GPU this
node does not have skips every destroy of the pass, with a log line and a metric naming the reason.

Ownership is per pod: an instance created (or adopted) for one pod is reclaimed when that pod is no
longer active, even if another active pod now holds a reservation at the same placement (the
journal's proof lets a restarted plugin do this on a busy GPU). A destroy that keeps failing (IN_USE:
a process still runs) backs off exponentially up to `BACKOFF_CAP` seconds, posts a warning Event
naming the instance and its pod, and shows in `dynmig_plugin_reclaims_stuck` — except while its pod
is still terminating (its containers have a grace period): that is retried each pass, quietly.
Allocate passes `urgent` for instances in its way: those are tried whatever their back-off.

A pass handles each GPU's unbacked instances in series (under the GPU's lock) and the GPUs at once:
a destroy takes about a second on the hardware (drivers/ampere.yaml of the simulator lists the
public reports), so a wave of pods ending together on an 8-GPU node frees its slices in one GPU's
destroys, not in all of them one after another (Allocate waits for the pass, and the scheduler
sees those slices occupied until then).

With idle reuse on (plugin/idle.py), an unbacked instance whose pod is terminal or gone and that runs
no process is kept idle instead of destroyed (journaled first), within the per-GPU cap; an idle one
goes when its TTL is over, when it is urgent (in Allocate's way) or when a process shows on it. An
instance whose pod is still terminating waits for the pod to end (never handed over meanwhile) and is
then parked, so a graceful delete does not cost the reuse.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from mig.annotations import AnnotationError, MigAllocation
from mig.pods import is_terminal
from plugin.idle import IdlePolicy
from plugin.instances import InstanceError, InstanceKey, InstanceManager, ManagedInstance
from plugin.journal import Owner
from plugin.kube import Kube, KubeError, PodView
from plugin.metrics import PluginMetrics
from plugin.nvml import NvmlError

PARKED, WAITING = (
    "parked",
    "waiting",
)  # what idle reuse keeps of an instance no active pod holds (Reconciler._keep)
log = logging.getLogger("dynmig.plugin.reconcile")

BACKOFF_BASE = 2.0  # seconds before the first retry of a failed reclaim
CLEAR_POLL_S = 0.2  # clear_for: how often a destroy in a pod's way is tried again
BACKOFF_CAP = 300.0
STUCK_EVENT = "MigInstanceReclaimStuck"
MAX_GPU_WORKERS = 16  # GPUs whose reclaims run at once in one pass (a node has at most 16 GPUs)


@dataclass(frozen=True)
class Reservation:
    pod: PodView
    allocation: MigAllocation

    @property
    def key(self) -> InstanceKey:
        return InstanceKey.of(self.allocation)


@dataclass(frozen=True)
class NodeReservations:
    """Reservations of the active pods on a node, and every reason not to trust them fully."""

    reservations: tuple[Reservation, ...] = ()
    problems: tuple[tuple[str, str], ...] = ()  # (reason label, detail)

    @property
    def keys(self) -> frozenset[InstanceKey]:
        return frozenset(r.key for r in self.reservations)

    @property
    def skip_reason(self) -> str:
        return self.problems[0][0] if self.problems else ""

    @property
    def gpus(self) -> frozenset[str]:
        return frozenset(r.allocation.gpuUUID for r in self.reservations)

    @property
    def holders(self) -> dict[InstanceKey, frozenset[str]]:
        """Instance key -> UIDs of the active pods that hold a reservation there."""
        out: dict[InstanceKey, set[str]] = {}
        for r in self.reservations:
            out.setdefault(r.key, set()).add(r.pod.uid)
        return {k: frozenset(v) for k, v in out.items()}


def active_reservations(pods: list[PodView], node_gpus: frozenset[str] | set[str]) -> NodeReservations:
    """Decode the reservations of every active pod (pure)."""
    found: list[Reservation] = []
    problems: list[tuple[str, str]] = []
    for pod in pods:
        if not pod.active:
            continue
        try:
            allocations = pod.reservation.allocations
        except AnnotationError as error:
            problems.append(("malformed-annotation", f"{pod.ref}: {error}"))
            continue
        for allocation in allocations:
            if allocation.gpuUUID not in node_gpus:
                problems.append(
                    (
                        "unknown-gpu",
                        (f"{pod.ref}: reservation on {allocation.gpuUUID}, which is not a GPU of this node"),
                    )
                )
            found.append(Reservation(pod, allocation))
    return NodeReservations(tuple(found), tuple(problems))


def plan_reclaim(
    managed: list[ManagedInstance],
    desired: frozenset[InstanceKey],
    holders: Mapping[InstanceKey, frozenset[str]] | None = None,
) -> list[ManagedInstance]:
    """The managed instances no active reservation of their own pod backs (pure), in a stable order.

    Without `holders` (or for an instance whose pod is not known) the key alone decides."""

    def backed(m: ManagedInstance) -> bool:
        if m.key not in desired or not m.has_ci:  # a GI a crash left without its CI is recreated whole
            return False
        if holders is None or m.owner is None or m.key not in holders:
            return True
        return m.owner.pod_uid in holders[m.key]

    return sorted((m for m in managed if not backed(m)), key=lambda m: m.key)


def by_gpu(plan: list[ManagedInstance]) -> list[list[ManagedInstance]]:
    """A reclaim plan split per GPU (pure), each group and the groups in the plan's order."""
    groups: dict[str, list[ManagedInstance]] = {}
    for instance in plan:
        groups.setdefault(instance.key.gpu_uuid, []).append(instance)
    return list(groups.values())


@dataclass
class Retry:
    attempts: int
    not_before: float
    delay: float


class ReclaimBackoff:
    """Exponential, capped back-off per instance whose destroy failed (the caller's clock); a pass's
    GPUs update it at once."""

    def __init__(self, base: float = BACKOFF_BASE, cap: float = BACKOFF_CAP):
        self.base, self.cap = base, cap
        self.retries: dict[InstanceKey, Retry] = {}
        self._lock = threading.Lock()

    def due(self, key: InstanceKey, now: float) -> bool:
        with self._lock:
            retry = self.retries.get(key)
        return retry is None or now >= retry.not_before

    def failed(self, key: InstanceKey, now: float) -> Retry:
        with self._lock:
            attempts = self.retries[key].attempts + 1 if key in self.retries else 1
            delay = min(self.base * 2 ** (attempts - 1), self.cap)
            retry = self.retries[key] = Retry(attempts, now + delay, delay)
        return retry

    def clear(self, key: InstanceKey) -> None:
        with self._lock:
            self.retries.pop(key, None)

    def prune(self, keep: set[InstanceKey]) -> None:
        with self._lock:
            for key in [k for k in self.retries if k not in keep]:
                del self.retries[key]


@dataclass
class PassResult:
    skipped: str = ""  # reason label when destroys were skipped
    destroyed: list[InstanceKey] = field(default_factory=list)
    failed: list[tuple[InstanceKey, str]] = field(default_factory=list)
    deferred: list[InstanceKey] = field(default_factory=list)  # backing off after failed destroys
    waiting: list[InstanceKey] = field(
        default_factory=list
    )  # kept until their terminating pod is gone, then idle
    kept_idle: list[InstanceKey] = field(default_factory=list)  # idle for reuse after this pass
    pods: list[PodView] | None = None
    reservations: NodeReservations | None = None  # set when the pass fully understood the node

    def absorb(self, part: PassResult) -> None:
        """Add one GPU's outcome (`Reconciler._reclaim_gpu`) to the pass's."""
        for name in ("destroyed", "failed", "deferred", "waiting", "kept_idle"):
            getattr(self, name).extend(getattr(part, name))


class InTheWay:
    """Which managed instances stand in the way of one pod's reservations (`Reconciler.clear_for`),
    and per reservation key why an idle instance there could not serve it (for the metrics)."""

    def __init__(self, idle: IdlePolicy, pod: PodView, reservations: list[MigAllocation]):
        self.wanted = [(r.gpuUUID, r.placement_value, InstanceKey.of(r)) for r in reservations]
        self.idle = idle
        self.pod = pod
        self.owner = Owner(pod.uid, pod.namespace, pod.name)
        self.misses: dict[InstanceKey, str] = {}
        # the first pass spares an ended pod's instance at an exact key: it may be parked and serve
        self.strict = False

    def __call__(self, m: ManagedInstance) -> bool:
        for gpu, placement, key in self.wanted:
            if m.key.gpu_uuid != gpu or not m.key.placement.overlaps(placement):
                continue
            if self.idle.serves(m, key, self.pod.namespace):
                return False
            if (
                not self.strict
                and not m.idle
                and self.idle.serves(replace(m, idle_since=0.0), key, self.pod.namespace)
            ):
                return False
            if m.idle:
                self.misses[key] = self.idle.why_not(m, self.owner, key) or "none"
            return True
        return False


class Reconciler:
    """Runs reconcile passes; `lock` serializes a pass against Allocate's creates and startup."""

    def __init__(
        self,
        kube: Kube,
        manager: InstanceManager,
        metrics: PluginMetrics,
        clock: Callable[[], float] = time.monotonic,
        idle: IdlePolicy | None = None,
    ):
        self.kube = kube
        self.manager = manager
        self.metrics = metrics
        self.clock = clock
        self.idle = idle or IdlePolicy()
        self.backoff = ReclaimBackoff()
        self.lock = threading.RLock()

    def run_once(self, urgent: Callable[[ManagedInstance], bool] | None = None) -> PassResult:
        with self.lock:
            return self._pass(urgent)

    def _pass(self, urgent: Callable[[ManagedInstance], bool] | None = None) -> PassResult:
        self.metrics.reconcile_passes.inc()
        managed = self.manager.managed()  # snapshot first: only instances known before the list may go
        try:
            pods = self.kube.list_node_pods()
        except KubeError as error:
            return self._skip("api-error", str(error), None)
        node = active_reservations(pods, frozenset(g.uuid for g in self.manager.inventory.gpus))
        if node.problems:
            detail = "; ".join(d for _, d in node.problems[:3])
            return self._skip(node.skip_reason, detail, pods)
        result = PassResult(pods=pods, reservations=node)
        now = self.clock()
        by_uid = {p.uid: p for p in pods}
        parked = Counter(m.key.gpu_uuid for m in managed if m.idle)
        groups = by_gpu(plan_reclaim(managed, node.keys, node.holders))
        for part in self._across_gpus(
            lambda group: self._reclaim_gpu(group, by_uid, urgent, parked.get(group[0].key.gpu_uuid, 0), now),
            groups,
        ):
            result.absorb(part)
        self.backoff.prune({m.key for m in self.manager.managed()})
        self.metrics.reclaims_stuck.set(len(self.backoff.retries))
        return result

    def _across_gpus(
        self, work: Callable[[list[ManagedInstance]], PassResult], groups: list[list[ManagedInstance]]
    ) -> list[PassResult]:
        """`work` on each GPU's group, the GPUs at once (each GPU's calls stay in series under its
        lock, so a wave of ended pods costs the longest GPU's destroys, not their sum); results in
        GPU order."""
        if len(groups) <= 1:
            return [work(g) for g in groups]
        with ThreadPoolExecutor(
            min(len(groups), MAX_GPU_WORKERS), thread_name_prefix="dynmig-reclaim"
        ) as pool:
            return list(pool.map(work, groups))

    def _reclaim_gpu(
        self,
        group: list[ManagedInstance],
        by_uid: Mapping[str, PodView],
        urgent: Callable[[ManagedInstance], bool] | None,
        parked_here: int,
        now: float,
    ) -> PassResult:
        """Destroy, park or keep each unbacked instance of one GPU, in key order."""
        part = PassResult()
        parked = {group[0].key.gpu_uuid: parked_here}
        for instance in group:
            self._reclaim_one(instance, part, by_uid, urgent, parked, now)
        return part

    def _reclaim_one(
        self,
        instance: ManagedInstance,
        part: PassResult,
        by_uid: Mapping[str, PodView],
        urgent: Callable[[ManagedInstance], bool] | None,
        parked: dict[str, int],
        now: float,
    ) -> None:
        cause = "reclaim"
        if instance.idle:
            keep, cause = self._still_idle(instance, urgent)
            if keep:
                part.kept_idle.append(instance.key)
                return
        else:
            kept = self._keep(instance, by_uid, urgent, parked)
            if kept:
                (part.kept_idle if kept == PARKED else part.waiting).append(instance.key)
                return
        forced = not self.backoff.due(instance.key, now)
        if forced and not (urgent and urgent(instance)):
            part.deferred.append(instance.key)
            return
        try:
            self.manager.release(instance.key, cause=cause)
        except InstanceError as error:
            part.failed.append((instance.key, error.reason))
            owner = by_uid.get(instance.owner.pod_uid) if instance.owner else None
            if (
                error.reason == "in-use"
                and owner is not None
                and owner.deleting
                and not is_terminal(owner.phase)
            ):
                log.info("reclaim of %s waits for pod %s's containers to stop", instance.key, owner.ref)
            elif forced:
                log.info("reclaim of %s (in Allocate's way) still fails: %s", instance.key, error)
            else:
                self._stuck(instance, error, now)
            return
        self.backoff.clear(instance.key)
        part.destroyed.append(instance.key)
        if instance.journaled:
            self.metrics.journal_reclaims.inc()

    def clear_for(
        self, pod: PodView, reservations: list[MigAllocation], busy_wait: float
    ) -> dict[InstanceKey, str]:
        """Clear the way for a pod's reservations before its instances are created: a reconcile pass
        with the instances in the way urgent, so an ended pod's instance overlapping a reserved
        placement is destroyed now whatever its back-off (the pass destroys only what the manager
        manages, whose pod has no active reservation of its own, and only when it fully understood the
        node; NVML refuses a destroy while a process runs). While such a destroy fails (its last
        processes are exiting), it is retried for up to `busy_wait` seconds; whatever still blocks
        then makes the create fail, never shared. An idle instance is spared only when it will serve
        the reservation at its exact key (the idle policy's match and namespace rule); one that
        overlaps otherwise is destroyed first. Returns, per reservation key, why an idle instance in
        its way could not serve it (for the metrics)."""
        in_way = InTheWay(self.idle, pod, reservations)
        deadline = time.monotonic() + busy_wait
        while True:
            result = self.run_once(urgent=in_way)
            if not in_way.strict:
                in_way.strict = True
                # what the pass neither parked nor destroyed at an exact key is in the way now
                if any(
                    in_way(m) and m.owner is not None and m.owner.pod_uid != pod.uid
                    for m in self.manager.managed()
                ):
                    continue
            blocking = {m.key for m in self.manager.managed() if in_way(m)}
            if not any(key in blocking for key, _ in result.failed) or time.monotonic() >= deadline:
                return in_way.misses
            time.sleep(CLEAR_POLL_S)

    def _still_idle(
        self, instance: ManagedInstance, urgent: Callable[[ManagedInstance], bool] | None
    ) -> tuple[bool, str]:
        """(keep it idle, else the destroy's cause) for an idle instance no active pod holds."""
        if urgent is not None and urgent(instance):
            return False, "idle-evicted"
        if not self.idle.enabled or self.idle.expired(instance):
            return False, "idle-expired"
        if self._busy(instance):
            log.warning("a process runs on idle MIG instance %s; it is no longer idle", instance.key)
            self.manager.unpark(instance)
            return False, "reclaim"
        return True, ""

    def _keep(
        self,
        instance: ManagedInstance,
        by_uid: Mapping[str, PodView],
        urgent: Callable[[ManagedInstance], bool] | None,
        parked: dict[str, int],
    ) -> str:
        """What idle reuse keeps of an instance no active pod holds: PARKED (idle now), WAITING (its pod is
        terminating: its containers may still run, so it is never handed over now, and once the pod has
        ended it is parked, so a graceful delete does not cost the reuse), or "" (destroyed as without
        reuse: reuse off, never delivered, its slices needed now, its GPU's cap of idle ones reached,
        a process on it)."""
        if not self.idle.enabled or instance.owner is None or not instance.has_ci or not instance.mig_uuid:
            return ""
        if not instance.delivered:
            return ""  # pre-created for a pod that never got it: destroyed, never handed to another
        if urgent is not None and urgent(instance):
            return ""
        gpu = instance.key.gpu_uuid
        if not self.idle.room(parked.get(gpu, 0)):
            return ""
        owner = by_uid.get(instance.owner.pod_uid)
        if owner is not None and not is_terminal(owner.phase):
            return WAITING if owner.deleting else ""
        if self._busy(instance) or not self.manager.park(instance, self.idle.clock()):
            return ""
        parked[gpu] = parked.get(gpu, 0) + 1
        return PARKED

    def _busy(self, instance: ManagedInstance) -> bool:
        try:
            return bool(self.manager.instance_processes(instance))
        except NvmlError:
            return True  # NVML cannot tell: never idle

    def _stuck(self, instance: ManagedInstance, error: InstanceError, now: float) -> None:
        retry = self.backoff.failed(instance.key, now)
        owner = _owner_text(instance.owner)
        message = (
            f"MIG instance {instance.key} (GI {instance.gi_id}, {instance.mig_uuid or 'no MIG device'}) "
            f"of pod {owner} could not be destroyed ({error.reason}: {error}); attempt {retry.attempts}, "
            f"next in {retry.delay:.0f}s; its placement stays published as occupied"
        )
        log.error("reclaim: %s", message)
        try:
            self.kube.node_event(STUCK_EVENT, message)
        except KubeError as failure:
            log.warning("could not post the %s event: %s", STUCK_EVENT, failure)

    def _skip(self, reason: str, detail: str, pods: list[PodView] | None) -> PassResult:
        self.metrics.skip(reason)
        log.warning("reconcile: skipping every destroy this pass (%s): %s", reason, detail)
        return PassResult(skipped=reason, pods=pods)


def _owner_text(owner: Owner | None) -> str:
    return f"{owner.ref} (uid {owner.pod_uid})" if owner is not None else "(unknown)"
