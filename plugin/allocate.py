"""kubelet's Allocate, realized: reservation -> MIG instance -> answer -> runtime identity on the pod.

For one container: find the pod, take its next entry of `hami.io/vgpu-devices-to-allocate`, match
the reservations of that containerIndex, reconcile first, ensure each instance at exactly its
reserved placement, answer kubelet with the MIG devices, then write `migUUID`, `gpuInstanceID` and
`computeInstanceID` into the reservation (optimistic concurrency: re-read and retry on 409), erase
the entry, and set bind-phase `success` once no entry is left (or `failed` on any error) and release
the node lock if this pod holds it. A failure part-way destroys only what this call created.

An existing instance (adopted, or kept from an earlier call) is handed over only when NVML shows no
compute process on its MIG device: otherwise Allocate waits up to `BUSY_WAIT_S` for the previous
owner's processes to end, then fails with `instance-busy` (kubelet retries). Never shared.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from base.logs import about
from mig.annotations import (
    BIND_PHASE,
    BIND_PHASE_FAILED,
    BIND_PHASE_SUCCESS,
    DEVICES_TO_ALLOCATE,
    MIG_ALLOCATIONS,
    NODE_LOCK,
    AnnotationError,
    ContainerDevice,
    MigAllocation,
    encode_allocations,
)
from plugin.instances import InstanceError, InstanceKey, InstanceManager, ManagedInstance
from plugin.journal import Owner
from plugin.kube import Conflict, Kube, KubeError, PodView
from plugin.metrics import PluginMetrics
from plugin.migspecs import cdi_name
from plugin.nvml import NvmlError
from plugin.podfinder import PodFinder, PodNotFound, lock_owner, next_container
from plugin.podresources import KubeletPods
from plugin.reconcile import Reconciler

log = logging.getLogger("dynmig.plugin.allocate")

CDI_KIND = "nvidia.com/gpu"
CDI_ANNOTATION_PREFIX = "cdi.k8s.io/dynmig-device-plugin_"
PATCH_ATTEMPTS = 5
BUSY_WAIT_S = 3.0  # how long Allocate waits for a previous owner's processes to leave an instance
BUSY_POLL_S = 0.2
# a create refused because an instance still holds (part of) the reserved placement
IN_THE_WAY = ("create-gi", "owned-by-another-pod")


class AllocateError(RuntimeError):
    def __init__(self, reason: str, message: str):
        self.reason = reason
        super().__init__(message)


@dataclass(frozen=True)
class ContainerAnswer:
    """What kubelet gets for one container (converted to the gRPC message by the server)."""

    envs: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    cdi_devices: tuple[str, ...] = ()
    mig_uuids: tuple[str, ...] = ()


# ---------------------------------------------------------------- pure parts


def container_reservations(
    allocations: tuple[MigAllocation, ...], container_index: int, devices: list[ContainerDevice]
) -> list[MigAllocation]:
    """This container's reservations by deviceIndex, checked against its device entry."""
    mine = sorted(
        (a for a in allocations if a.containerIndex == container_index), key=lambda a: a.deviceIndex
    )
    if len(mine) != len(devices):
        raise AllocateError(
            "reservation-mismatch",
            f"container {container_index} has {len(devices)} device(s) to allocate but "
            f"{len(mine)} reservation(s) in {MIG_ALLOCATIONS}",
        )
    for allocation, device in zip(mine, devices, strict=False):
        if allocation.gpuUUID != device.uuid:
            raise AllocateError(
                "reservation-mismatch",
                f"container {container_index} device {allocation.deviceIndex}: reservation is on "
                f"{allocation.gpuUUID} but {DEVICES_TO_ALLOCATE} says {device.uuid}",
            )
    return mine


def answer(strategy: str, mig_uuids: list[str], pod_uid: str) -> ContainerAnswer:
    """The kubelet answer per device-list strategy (envvar, cdi, cdi-cri or cdi-annotations)."""
    uuids = tuple(mig_uuids)
    if strategy == "cdi":  # dynmig's own spec per instance (plugin/migspecs.py)
        return ContainerAnswer(cdi_devices=tuple(cdi_name(u) for u in uuids), mig_uuids=uuids)
    names = tuple(f"{CDI_KIND}={u}" for u in uuids)
    if strategy == "cdi-cri":
        return ContainerAnswer(cdi_devices=names, mig_uuids=uuids)
    if strategy == "cdi-annotations":
        return ContainerAnswer(
            annotations={f"{CDI_ANNOTATION_PREFIX}{pod_uid}": ",".join(names)}, mig_uuids=uuids
        )
    return ContainerAnswer(envs={"NVIDIA_VISIBLE_DEVICES": ",".join(uuids)}, mig_uuids=uuids)


def with_runtime(
    allocations: tuple[MigAllocation, ...], realized: dict[InstanceKey, ManagedInstance], container_index: int
) -> tuple[MigAllocation, ...]:
    """The reservations with this container's runtime identities filled in."""
    out = []
    for allocation in allocations:
        instance = realized.get(InstanceKey.of(allocation))
        if allocation.containerIndex == container_index and instance is not None:
            allocation = allocation.with_runtime(instance.mig_uuid, instance.gi_id, instance.ci_id)
        out.append(allocation)
    return tuple(out)


def physical_id(device_id: str) -> str:
    """The GPU UUID of a kubelet replica ID (`GPU-…-3` or `…::3`); other IDs unchanged."""
    if "::" in device_id:
        return device_id.split("::", 1)[0]
    if device_id.startswith("GPU-") and device_id.count("-") == 6:
        return device_id.rsplit("-", 1)[0]
    return device_id


def preferred(available: list[str], must_include: list[str], size: int, reserved: list[str]) -> list[str]:
    """Replica IDs for kubelet: must-includes, then one replica of each reserved GPU in order, then any."""
    chosen = list(must_include)[:size]
    pool = [d for d in available if d not in chosen]
    for uuid in reserved:
        if len(chosen) >= size:
            break
        pick = next((d for d in pool if physical_id(d) == uuid), None)
        if pick is not None:
            chosen.append(pick)
            pool.remove(pick)
    chosen.extend(pool[: max(size - len(chosen), 0)])
    return chosen


# ---------------------------------------------------------------- the Allocate path


class Allocator:
    def __init__(
        self,
        kube: Kube,
        manager: InstanceManager,
        reconciler: Reconciler,
        metrics: PluginMetrics,
        strategy: str = "envvar",
        busy_wait: float = BUSY_WAIT_S,
        kubelet_pods: KubeletPods | None = None,
    ):
        self.busy_wait = busy_wait
        self.kube = kube
        self.finder = PodFinder(kube, kubelet_pods)
        self.manager = manager
        self.reconciler = reconciler
        self.metrics = metrics
        self.strategy = strategy
        self.lock = threading.Lock()  # kubelet's Allocate calls are serialized plugin-wide
        # told the profiles of every Allocate served (the warm pool's demand, plugin/warm.py)
        self.served: Callable[[list[str]], None] = lambda profiles: None
        # told the instances about to be handed to a container, before kubelet hears of them (their
        # CDI specs are written, plugin/migspecs.py); an AllocateError fails this Allocate
        self.handing_over: Callable[[list[ManagedInstance]], None] = lambda instances: None

    def reserved_gpus(self) -> list[str]:
        """Physical GPUs of the next container to allocate (for GetPreferredAllocation); [] if unknown."""
        try:
            found = next_container(self.finder.find())
        except (KubeError, PodNotFound, AnnotationError):
            return []
        return [d.uuid for d in found[1]] if found else []

    def allocate(self, device_ids: list[str]) -> ContainerAnswer:
        started = time.perf_counter()
        result = "error"
        try:
            with self.lock:
                out = self._allocate(device_ids)
            result = "success"
            return out
        finally:
            self.metrics.allocate_seconds.labels(result=result).observe(time.perf_counter() - started)

    def _allocate(self, device_ids: list[str]) -> ContainerAnswer:
        try:
            pod = self.finder.find()
        except (KubeError, PodNotFound) as error:
            self.metrics.fail("allocate", "pod-not-found" if isinstance(error, PodNotFound) else "api-error")
            raise AllocateError("pod-not-found", str(error)) from None
        try:
            return self._realize(pod, device_ids)
        except AllocateError as error:
            self.metrics.fail("allocate", error.reason)
            log.error(
                "Allocate for %s failed (%s): %s", pod.ref, error.reason, error, extra=about(pod=pod.ref)
            )
            self.manager.events.refused(pod, error.reason, str(error))
            self._mark_failed(pod)
            raise

    def _realize(self, pod: PodView, device_ids: list[str]) -> ContainerAnswer:
        try:
            found = pod.reservation.next_container()
            allocations = pod.reservation.allocations
        except AnnotationError as error:
            raise AllocateError("malformed-annotation", f"{pod.ref}: {error}") from None
        if found is None:
            raise AllocateError("nothing-to-allocate", f"{pod.ref}: no entry left in {DEVICES_TO_ALLOCATE}")
        container_index, devices = found
        if len(devices) != len(device_ids):
            raise AllocateError(
                "device-count",
                f"{pod.ref}: device number not matched: kubelet asks for "
                f"{len(device_ids)}, container {container_index} has {len(devices)}",
            )
        reservations = container_reservations(allocations, container_index, devices)
        with self.reconciler.lock:
            # every reserved instance already exists for this very pod (pre-created) or is an idle
            # one the idle policy hands to it: nothing is created, so nothing can be in the way
            # (NVML holds no overlapping instance beside them); the reconcile loop reclaims the
            # rest on its own period
            ready = all(self._ready_for(pod, r) for r in reservations)
            misses = {} if ready else self.reconciler.clear_for(pod, reservations, self.busy_wait)
            try:
                realized, created = self._ensure_all(pod, reservations)
            except AllocateError as error:
                if error.reason not in IN_THE_WAY or not self._held_by_another(pod, reservations):
                    raise
                # something reached the GPU between the reconcile pass and the create (a pre-create
                # for a pod that went meanwhile): now it is managed, the pass proves it unused
                # (journal, no process, no active pod of its own) or leaves it, and we try once more
                log.info("Allocate for %s: %s; clearing the way again", pod.ref, error)
                misses = self.reconciler.clear_for(pod, reservations, self.busy_wait)
                realized, created = self._ensure_all(pod, reservations)
        if self.reconciler.idle.enabled:
            for key in created:
                self.metrics.idle_reuse_misses.labels(reason=misses.get(key, "none")).inc()
        try:
            self.handing_over([realized[InstanceKey.of(r)] for r in reservations])
            self._record(pod, container_index, reservations, realized)
        except AllocateError:
            self._rollback(created)
            raise
        self.served([r.profile for r in reservations])
        return answer(self.strategy, [realized[InstanceKey.of(r)].mig_uuid for r in reservations], pod.uid)

    def _held_by_another(self, pod: PodView, reservations: list[MigAllocation]) -> bool:
        """An instance this plugin manages for another pod (or none) overlaps a reserved placement."""
        return any(
            m.key.gpu_uuid == r.gpuUUID
            and m.key.placement.overlaps(r.placement_value)
            and (m.owner is None or m.owner.pod_uid != pod.uid)
            for m in self.manager.managed()
            for r in reservations
        )

    def _ready_for(self, pod: PodView, reservation: MigAllocation) -> bool:
        """The reserved instance exists for this pod, or is idle, may be handed to it and runs no
        process now (the hand-over checks NVML again under the GPU's lock; one with a process goes
        the slow way, whose reconcile pass ends its idleness)."""
        key = InstanceKey.of(reservation)
        existing = self.manager.get(key)
        if existing is not None and self.reconciler.idle.serves(existing, key, pod.namespace):
            try:
                busy = bool(self.manager.instance_processes(existing))
            except NvmlError:
                busy = True
            return existing.has_ci and bool(existing.mig_uuid) and not busy
        return (
            existing is not None
            and not existing.idle
            and existing.has_ci
            and existing.owner is not None
            and existing.owner.pod_uid == pod.uid
        )

    def _ensure_all(
        self, pod: PodView, reservations: list[MigAllocation]
    ) -> tuple[dict[InstanceKey, ManagedInstance], list[InstanceKey]]:
        realized: dict[InstanceKey, ManagedInstance] = {}
        created: list[InstanceKey] = []
        for reservation in reservations:
            key = InstanceKey.of(reservation)
            owner = Owner(
                pod.uid, pod.namespace, pod.name, reservation.containerIndex, reservation.deviceIndex
            )
            try:
                instance, new = self.manager.ensure(key, owner)
                if not new:
                    self._wait_idle(instance)
            except (InstanceError, AllocateError) as error:
                self._rollback(created)
                if isinstance(error, AllocateError):
                    raise
                raise AllocateError(error.reason, str(error)) from None
            realized[key] = instance
            if new:
                created.append(key)
        return realized, created

    def _wait_idle(self, instance: ManagedInstance) -> None:
        """Return once NVML shows no compute process on the existing instance; else instance-busy."""
        deadline = time.monotonic() + self.busy_wait
        while True:
            try:
                pids = self.manager.instance_processes(instance)
            except NvmlError as error:
                self.metrics.busy_handovers.inc()
                raise AllocateError(
                    "instance-busy",
                    f"{instance.key} ({instance.mig_uuid}): NVML cannot tell whether "
                    f"a process still uses it ({error}); not handing it over",
                ) from None
            if not pids:
                return
            if time.monotonic() >= deadline:
                self.metrics.busy_handovers.inc()
                raise AllocateError(
                    "instance-busy",
                    f"{instance.key} ({instance.mig_uuid}) still runs process(es) "
                    f"{', '.join(map(str, pids[:8]))} of a previous owner after {self.busy_wait:.0f}s; "
                    "dynmig never shares a MIG instance, kubelet will retry",
                )
            time.sleep(BUSY_POLL_S)

    def _rollback(self, created: list[InstanceKey]) -> None:
        """Destroy, newest first, only the instances this call created (adopted/earlier ones stay)."""
        for key in reversed(created):
            try:
                self.manager.release(key, cause="rollback")
            except InstanceError as error:
                log.error("rollback of %s failed: %s", key, error)

    # ---- pod annotations

    def _record(
        self,
        pod: PodView,
        container_index: int,
        reservations: list[MigAllocation],
        realized: dict[InstanceKey, ManagedInstance],
    ) -> None:
        """Patch runtime identity + erased entry (+ bind-phase success) with the pod's resourceVersion."""
        current: PodView | None = pod
        for _ in range(PATCH_ATTEMPTS):
            if current is None:
                raise AllocateError("pod-gone", f"{pod.ref} disappeared during Allocate")
            patch = self._runtime_patch(current, container_index, reservations, realized)
            try:
                self.kube.patch_pod_annotations(current, patch, current.resource_version)
            except Conflict:
                log.info(
                    "runtime identity patch of %s conflicted; re-reading", pod.ref, extra=about(pod=pod.ref)
                )
                current = self._reread(pod)
                continue
            except KubeError as error:
                raise AllocateError("api-error", f"patch {pod.ref}: {error}") from None
            if patch.get(BIND_PHASE) == BIND_PHASE_SUCCESS:
                self._release_lock(pod)
            return
        raise AllocateError("conflict", f"patch {pod.ref}: still conflicting after {PATCH_ATTEMPTS} attempts")

    def _reread(self, pod: PodView) -> PodView | None:
        try:
            return self.kube.get_pod(pod.namespace, pod.name)
        except KubeError as error:
            raise AllocateError("api-error", f"re-read {pod.ref}: {error}") from None

    def _runtime_patch(
        self,
        pod: PodView,
        container_index: int,
        reservations: list[MigAllocation],
        realized: dict[InstanceKey, ManagedInstance],
    ) -> dict[str, str | None]:
        try:
            allocations = pod.reservation.allocations
            remaining = pod.reservation.drained(container_index)
            left = pod.reservation.left_after(container_index)
        except AnnotationError as error:
            raise AllocateError("malformed-annotation", f"{pod.ref}: {error}") from None
        now = sorted(InstanceKey.of(a) for a in allocations if a.containerIndex == container_index)
        if now != sorted(InstanceKey.of(r) for r in reservations):
            raise AllocateError(
                "reservation-changed",
                f"{pod.ref}: the reservation of container {container_index} changed during Allocate",
            )
        encoded = encode_allocations(with_runtime(allocations, realized, container_index))
        patch: dict[str, str | None] = {MIG_ALLOCATIONS: encoded, DEVICES_TO_ALLOCATE: remaining}
        if not left:
            patch[BIND_PHASE] = BIND_PHASE_SUCCESS
        return patch

    def _mark_failed(self, pod: PodView) -> None:
        try:
            self.kube.patch_pod_annotations(pod, {BIND_PHASE: BIND_PHASE_FAILED})
        except KubeError as error:
            log.error("could not set bind-phase failed on %s: %s", pod.ref, error, extra=about(pod=pod.ref))
        self._release_lock(pod)

    def _release_lock(self, pod: PodView) -> None:
        """Remove the node lock only if this pod holds it (compare-and-delete by resourceVersion)."""
        try:
            node = self.kube.get_node()
            if lock_owner(node.annotations) != (pod.namespace, pod.name):
                return
            self.kube.patch_node_annotations({NODE_LOCK: None}, node.resource_version)
        except KubeError as error:
            log.warning(
                "could not release the node lock held by %s: %s", pod.ref, error, extra=about(pod=pod.ref)
            )
