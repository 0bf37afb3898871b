"""Reclaim: destroy every managed instance no longer backed by an active pod's reservation.

The desired set is computed purely from the pods bound to this node. Destruction is irreversible, so
the pass refuses to destroy anything unless it fully understood the node: an API error, a partial
list, a malformed annotation (including a partial runtime identity) or a reservation on a GPU this
node does not have skips every destroy of the pass, with a log line and a metric naming the reason.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from mig.annotations import MIG_ALLOCATIONS, AnnotationError, MigAllocation, decode_allocations
from plugin.instances import InstanceError, InstanceKey, InstanceManager, ManagedInstance
from plugin.kube import Kube, KubeError, PodView
from plugin.metrics import PluginMetrics

log = logging.getLogger("dynmig.plugin.reconcile")


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


def active_reservations(pods: list[PodView], node_gpus: frozenset[str] | set[str]) -> NodeReservations:
    """Decode the reservations of every active pod (pure)."""
    found: list[Reservation] = []
    problems: list[tuple[str, str]] = []
    for pod in pods:
        if not pod.active:
            continue
        try:
            allocations = decode_allocations(pod.annotations.get(MIG_ALLOCATIONS))
        except AnnotationError as error:
            problems.append(("malformed-annotation", f"{pod.ref}: {error}"))
            continue
        for allocation in allocations:
            if allocation.gpuUUID not in node_gpus:
                problems.append(("unknown-gpu", (f"{pod.ref}: reservation on {allocation.gpuUUID}, "
                                                "which is not a GPU of this node")))
            found.append(Reservation(pod, allocation))
    return NodeReservations(tuple(found), tuple(problems))


def plan_reclaim(managed: list[ManagedInstance], desired: frozenset[InstanceKey]) -> list[ManagedInstance]:
    """The managed instances no active reservation backs (pure), in a stable order."""
    return sorted((m for m in managed if m.key not in desired), key=lambda m: m.key)


@dataclass
class PassResult:
    skipped: str = ""  # reason label when destroys were skipped
    destroyed: list[InstanceKey] = field(default_factory=list)
    failed: list[tuple[InstanceKey, str]] = field(default_factory=list)
    pods: list[PodView] | None = None


class Reconciler:
    """Runs reconcile passes; `lock` serializes a pass against Allocate's creates and startup."""

    def __init__(self, kube: Kube, manager: InstanceManager, metrics: PluginMetrics):
        self.kube = kube
        self.manager = manager
        self.metrics = metrics
        self.lock = threading.RLock()

    def run_once(self) -> PassResult:
        with self.lock:
            return self._pass()

    def _pass(self) -> PassResult:
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
        result = PassResult(pods=pods)
        for instance in plan_reclaim(managed, node.keys):
            try:
                self.manager.release(instance.key, cause="reclaim")
                result.destroyed.append(instance.key)
            except InstanceError as error:
                log.error("reclaim of %s failed (%s): %s", instance.key, error.reason, error)
                result.failed.append((instance.key, error.reason))
        return result

    def _skip(self, reason: str, detail: str, pods: list[PodView] | None) -> PassResult:
        self.metrics.skip(reason)
        log.warning("reconcile: skipping every destroy this pass (%s): %s", reason, detail)
        return PassResult(skipped=reason, pods=pods)
