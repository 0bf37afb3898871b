"""The instance manager: the one writer of MIG instances on this node.

It keeps the managed set, keyed by (GPU UUID, full profile name, placement start, size), and holds
one lock per physical GPU around every create, destroy and adopt, so two callers never race on a
GPU's slices. `ensure` is idempotent per key and creates only at exactly the reserved placement;
if any step fails it destroys only what that call created. Nothing here infers a placement from a
GI ID: placements are always read back from NVML.

Every create is journaled (plugin/journal.py): the intent before the GI exists, the runtime identity
after; the entry goes only once NVML confirmed the destroy. Each managed instance knows the pod it
was created (or adopted) for, so an instance is never handed to another pod.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from base.logs import about
from mig.annotations import MigAllocation
from mig.types import Placement
from plugin.discovery import GpuInventory, Inventory
from plugin.events import PodEvents
from plugin.journal import UNKNOWN, Entry, Journal, JournalError, Owner
from plugin.metrics import PluginMetrics
from plugin.nvml import IN_USE, MIG_ENABLE, GiProfile, GiRecord, Nvml, NvmlError

log = logging.getLogger("dynmig.plugin.instances")

GPU_LOCKS = "gpus"  # beside the device plugin's journal: the per-GPU lock files (the DRA plugin's too)
LISTING_WAIT_S = 3.0  # how long a new MIG device may take to show in NVML's list before a rollback
LISTING_POLL_S = 0.05


@dataclass(frozen=True, order=True)
class InstanceKey:
    gpu_uuid: str
    profile: str
    start: int
    size: int

    @property
    def placement(self) -> Placement:
        return Placement(self.start, self.size)

    @property
    def journal_key(self) -> tuple[str, str, int, int]:
        return (self.gpu_uuid, self.profile, self.start, self.size)

    @classmethod
    def of(cls, allocation: MigAllocation) -> InstanceKey:
        return cls(
            allocation.gpuUUID, allocation.profile, allocation.placement.start, allocation.placement.size
        )

    def __str__(self) -> str:
        return f"{self.profile}@{self.start}:{self.size} on {self.gpu_uuid}"


@dataclass(frozen=True)
class ManagedInstance:
    key: InstanceKey
    gi_id: int
    ci_id: int
    mig_uuid: str
    adopted: bool = False
    owner: Owner | None = None  # the pod it was created or adopted for (None: not known)
    journaled: bool = False  # managed again after a restart on the journal's proof alone
    idle_since: float | None = None  # Unix seconds since its pod ended and it was kept for reuse
    delivered: bool = True  # False: pre-created, not yet handed to kubelet (never parked as idle)

    @property
    def idle(self) -> bool:
        return self.idle_since is not None

    @property
    def has_ci(self) -> bool:
        return self.ci_id >= 0  # a GI left without its CI by a crash is recorded with ci_id -1


class FifoLock:
    """A lock taken in the order it was asked for. A GPU's pre-creator worker asks again at once
    after each create; with a plain lock the thread that releases usually takes it back, and an
    Allocate waiting on the same GPU could wait for the worker's whole queue instead of one create."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._next = 0  # the next ticket handed out
        self._serving = 0  # the ticket that holds the lock

    def __enter__(self) -> None:
        with self._cond:
            ticket = self._next
            self._next += 1
            while ticket != self._serving:
                self._cond.wait()

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self._serving += 1
            self._cond.notify_all()

    @property
    def queued(self) -> int:
        """Callers holding or waiting for the lock."""
        with self._cond:
            return self._next - self._serving


@contextmanager
def node_lock(lock_dir: Path | None, uuid: str) -> Iterator[None]:
    """The GPU's lock across the processes of the node: an exclusive `flock` on its file in
    `lock_dir`, which the device plugin and the DRA plugin share (the kernel drops it when a process
    dies, kill -9 included); no `lock_dir`: this process only."""
    if lock_dir is None:
        yield
        return
    path = lock_dir / ("gpu-" + "".join(c if c.isalnum() or c == "-" else "_" for c in uuid)[:200] + ".lock")
    fd: int | None = None
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as error:
        # a broken state directory: the journal write that follows fails too, and says so
        log.error(
            "cannot open the GPU's lock file %s (%s): locked in this process only", path, error.strerror
        )
    if fd is None:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor drops the flock


class InstanceError(RuntimeError):
    """A refused or failed instance operation; `reason` is the metric label."""

    def __init__(self, reason: str, message: str, leaked: bool = False):
        self.reason = reason
        self.leaked = leaked  # a GI this call created could not be rolled back
        self.gi_id = -1  # that GI's ID (set with `leaked`)
        self.held_by = -1  # a create refused: the ID of a GI that holds (part of) its placement
        super().__init__(message)


class InstanceManager:
    def __init__(
        self,
        nvml: Nvml,
        inventory: Inventory,
        metrics: PluginMetrics | None = None,
        journal: Journal | None = None,
        lock_dir: Path | None = None,
    ):
        """`lock_dir`: where the per-GPU lock files of the node live (`node_lock`); made here."""
        self.nvml = nvml
        self.inventory = inventory
        self.metrics = metrics or PluginMetrics()
        self.journal = journal or Journal(None, self.metrics)
        self.events = PodEvents(None)  # the app sets a posting one; tests and tools post nothing
        # told each instance it stops managing (destroyed or found gone): its CDI spec goes (plugin/migspecs.py)
        self.forgotten: Callable[[ManagedInstance], None] = lambda instance: None
        self._managed: dict[InstanceKey, ManagedInstance] = {}
        self._map_lock = threading.Lock()
        self._gpu_locks: dict[str, FifoLock] = {}
        self.lock_dir = lock_dir
        if lock_dir is not None:
            try:
                lock_dir.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                log.error(
                    "cannot make the per-GPU lock directory %s (%s): GPUs are locked in this process "
                    "only, so no other plugin process of the node may run beside this one",
                    lock_dir,
                    error.strerror,
                )
                self.lock_dir = None

    # ---- the managed set

    def managed(self) -> list[ManagedInstance]:
        with self._map_lock:
            return list(self._managed.values())

    def get(self, key: InstanceKey) -> ManagedInstance | None:
        with self._map_lock:
            return self._managed.get(key)

    def _remember(self, instance: ManagedInstance) -> None:
        with self._map_lock:
            self._managed[instance.key] = instance
            self.metrics.managed.set(len(self._managed))

    def _forget(self, key: InstanceKey) -> None:
        with self._map_lock:
            gone = self._managed.pop(key, None)
            self.metrics.managed.set(len(self._managed))
        if gone is not None:
            self.forgotten(gone)

    @contextmanager
    def gpu_lock(self, uuid: str) -> Iterator[None]:
        """One writer per GPU: every create, destroy and adopt on `uuid` runs under this lock, in this
        process (first come, first served) and across the node's processes (`node_lock`)."""
        with self._map_lock:
            lock = self._gpu_locks.setdefault(uuid, FifoLock())
        with lock, node_lock(self.lock_dir, uuid):
            yield

    def gpu_queue(self, uuid: str) -> int:
        """How many callers hold or wait for the GPU's lock (creates, destroys, adopts in line)."""
        with self._map_lock:
            lock = self._gpu_locks.get(uuid)
        return lock.queued if lock is not None else 0

    def _mutable_gpu(self, uuid: str) -> GpuInventory:
        gpu = self.inventory.gpu(uuid)
        if gpu is None:
            raise InstanceError("unknown-gpu", f"GPU {uuid} is not on this node")
        if gpu.excluded:
            raise InstanceError(
                "excluded-gpu", f"GPU {uuid} is excluded by filterdevices; dynmig never mutates it"
            )
        if not gpu.managed:
            raise InstanceError(
                "unmanaged-gpu", f"GPU {uuid} ({gpu.device.name}) has no allowlisted MIG profile"
            )
        return gpu

    def _profile(self, gpu: GpuInventory, name: str) -> GiProfile:
        profile = gpu.profile(name)
        if profile is None:
            raise InstanceError(
                "unsupported-profile",
                f"profile {name} is not an allowlisted NVML profile of {gpu.uuid} "
                f"(allowed: {', '.join(p.name for p in gpu.allowed)})",
            )
        return profile

    # ---- create

    def ensure(
        self, key: InstanceKey, owner: Owner | None = None, delivered: bool = True
    ) -> tuple[ManagedInstance, bool]:
        """The instance for `key`, creating it at exactly its placement if needed; (instance, created).

        An existing instance of another pod is never returned: InstanceError `owned-by-another-pod`.
        `delivered=False` (the pre-creator): the instance is not handed to kubelet yet; a later call
        with `delivered=True` (Allocate, for the same pod) marks it handed over."""
        existing = self.get(key)
        if existing is not None and not existing.idle:
            return self._delivered(self._mine(existing, owner), delivered), False
        gpu = self._mutable_gpu(key.gpu_uuid)
        profile = self._profile(gpu, key.profile)
        with self.gpu_lock(key.gpu_uuid):
            existing = self.get(key)
            if existing is not None and existing.idle:
                return self._hand_over(gpu, existing, owner), False
            if existing is not None:
                return self._delivered(self._mine(existing, owner), delivered), False
            intent = Entry.intent(key.journal_key, owner or Owner(UNKNOWN, UNKNOWN, UNKNOWN))
            try:
                self.journal.record(intent)  # before the GI exists: a crash from here on leaves proof
            except JournalError as error:
                self.metrics.fail("create", "journal-write")
                raise InstanceError("journal-write", f"create {key}: {error}; nothing was created") from None
            started = time.perf_counter()
            try:
                instance = self._create(gpu, profile, key)
            except InstanceError as error:
                self.metrics.fail("create", error.reason)
                if not error.leaked:
                    self._unjournal(key)
                else:
                    # its intent entry proves it ours: managed now (never delivered, no CI recorded),
                    # so the next reconcile pass destroys it instead of it holding slices until a restart
                    self._remember(ManagedInstance(key, error.gi_id, -1, "", owner=owner, delivered=False))
                raise
            self.metrics.create_seconds.observe(time.perf_counter() - started)
            instance = ManagedInstance(
                key, instance.gi_id, instance.ci_id, instance.mig_uuid, owner=owner, delivered=delivered
            )
            self._journal_created(intent, instance)
            # managed before the GPU lock goes: a caller waiting on it for the same key (Allocate
            # behind the pre-creator) must find this instance, never try a second create
            self._remember(instance)
        self.metrics.creates.inc()
        pod = owner.ref if owner is not None else "(unknown)"
        log.info(
            "created MIG instance %s for pod %s: GI %d CI %d %s",
            key,
            pod,
            instance.gi_id,
            instance.ci_id,
            instance.mig_uuid,
            extra=about(pod=owner.ref if owner is not None else None),
        )
        self.events.created(owner, str(key), instance.mig_uuid, instance.gi_id, instance.ci_id)
        return instance, True

    def _create(self, gpu: GpuInventory, profile: GiProfile, key: InstanceKey) -> ManagedInstance:
        handle = gpu.device.handle
        try:
            current, pending = self.nvml.mig_mode(handle)
            if current != MIG_ENABLE or pending != MIG_ENABLE:
                raise InstanceError(
                    "mig-mode",
                    f"MIG mode on {gpu.uuid} is current={current} pending={pending}; "
                    "a pending mode change needs a GPU reset",
                )
            possible = self.nvml.possible_placements(handle, profile.id)
        except NvmlError as error:
            raise InstanceError("nvml-query", f"cannot check {key}: {error}") from None
        if key.placement not in possible:
            raise InstanceError(
                "invalid-placement",
                f"placement {key.placement} is not a legal placement of "
                f"{key.profile} on {gpu.uuid} (legal: {', '.join(map(str, possible))})",
            )
        try:
            # why: the key's placement was reserved for this owner, the journal records the intent
            # first, and NVML refuses a GI that would overlap any existing one
            gi = self.nvml.create_gi(handle, profile.id, key.placement)
        except NvmlError as error:
            refused = InstanceError("create-gi", f"create GI {key}: {error}")
            refused.held_by = self._holder(gpu, key.placement)
            raise refused from None
        try:
            if gi.placement != key.placement or gi.profile_id != profile.id:
                raise InstanceError(
                    "gi-mismatch",
                    f"NVML created GI {gi.gi_id} at {gi.placement} profile {gi.profile_id}, not {key}",
                )
            try:
                ci = self.nvml.create_ci(gi.handle, profile.slice_count)
            except NvmlError as error:
                raise InstanceError("create-ci", f"create CI in GI {gi.gi_id} ({key}): {error}") from None
            try:
                mig_uuid = self._listed_mig_uuid(handle, gi.gi_id, ci.ci_id)
                if mig_uuid is None:
                    raise InstanceError("mig-uuid", f"no MIG device for GI {gi.gi_id} CI {ci.ci_id} ({key})")
            except (InstanceError, NvmlError) as error:
                self._undo_ci(ci.handle, key)
                if isinstance(error, NvmlError):
                    raise InstanceError("mig-uuid", f"find MIG UUID of {key}: {error}") from None
                raise
        except InstanceError as error:
            if not self._undo_gi(gi, key):
                error.leaked, error.gi_id = True, gi.gi_id  # the journal's intent entry stays
            raise
        return ManagedInstance(key, gi.gi_id, ci.ci_id, mig_uuid)

    def _holder(self, gpu: GpuInventory, placement: Placement) -> int:
        """The ID of a live GI overlapping `placement` (after a refused create); -1 when none or NVML
        cannot tell."""
        try:
            for gi in self.nvml.list_gis(gpu.device.handle, list(gpu.profiles)):
                if gi.placement.overlaps(placement):
                    return gi.gi_id
        except NvmlError:
            pass
        return -1

    def confirm(self, key: InstanceKey) -> None:
        """Forget the managed instance of `key` when NVML shows its GI gone, or its ID now naming
        another instance (a GPU reset behind our back), so the next `ensure` makes it anew; destroys
        nothing. InstanceError when NVML cannot tell."""
        instance = self.get(key)
        if instance is None:
            return
        gpu = self._mutable_gpu(key.gpu_uuid)
        with self.gpu_lock(key.gpu_uuid):
            try:
                gi = self.nvml.gi_by_id(gpu.device.handle, instance.gi_id)
            except NvmlError as error:
                raise InstanceError("nvml-query", f"look for {key}: {error}") from None
            profile = gpu.profile(key.profile)
            if (
                gi is not None
                and gi.placement == key.placement
                and (profile is None or gi.profile_id == profile.id)
            ):
                return
            log.info("MIG instance %s (GI %d) is gone; forgetting it", key, instance.gi_id)
            self._forget(key)
            self._unjournal(key)

    def _listed_mig_uuid(self, handle: object, gi_id: int, ci_id: int) -> str | None:
        """The new CI's MIG UUID, waiting up to LISTING_WAIT_S for NVML's MIG device list to show it
        (DCGM's view is known to lag a create by 1-2 s, NVIDIA/DCGM#230; NVML's may too)."""
        deadline = time.monotonic() + LISTING_WAIT_S
        while True:
            found = self.nvml.mig_uuid(handle, gi_id, ci_id)
            if found is not None or time.monotonic() >= deadline:
                return found
            time.sleep(LISTING_POLL_S)

    # ---- idle instances (kept after their pod ended, for a pod whose reservation matches)

    def idle_instances(self) -> list[ManagedInstance]:
        return [m for m in self.managed() if m.idle]

    def park(self, instance: ManagedInstance, since: float) -> bool:
        """Keep an ended pod's instance idle for reuse (journaled durably first); False when the
        journal cannot record it (then it is reclaimed as before)."""
        key = instance.key
        with self.gpu_lock(key.gpu_uuid):
            current = self.get(key)
            if current is None or current != instance:
                return False  # changed meanwhile: the next pass decides again
            entry = self.journal.get(key.journal_key)
            if entry is None or not entry.created:
                entry = Entry.intent(key.journal_key, instance.owner or Owner(UNKNOWN, UNKNOWN, UNKNOWN))
                entry = entry.with_runtime(instance.gi_id, instance.ci_id, instance.mig_uuid)
            try:
                self.journal.record(entry.idle(since))
            except JournalError as error:
                log.error("cannot journal %s as idle (%s); reclaiming it instead", key, error)
                return False
            self._remember(replace(instance, idle_since=float(int(since))))
        self._count_idle()
        log.info(
            "keeping MIG instance %s (GI %d, %s) of ended pod %s idle for reuse",
            key,
            instance.gi_id,
            instance.mig_uuid,
            instance.owner.ref if instance.owner else "?",
        )
        return True

    def unpark(self, instance: ManagedInstance) -> ManagedInstance:
        """No longer idle (a process showed on it): reclaimed, and published as a leftover, as any
        ended pod's instance. The journal keeps proving it ours."""
        key = instance.key
        with self.gpu_lock(key.gpu_uuid):
            current = replace(instance, idle_since=None)
            entry = self.journal.get(key.journal_key)
            if entry is not None and entry.idleSince is not None:
                try:
                    self.journal.record(entry.idle(None))
                except JournalError as error:
                    log.error("could not journal %s as no longer idle: %s", key, error)
            self._remember(current)
        self._count_idle()
        return current

    def _hand_over(self, gpu: GpuInventory, idle: ManagedInstance, owner: Owner | None) -> ManagedInstance:
        """Give an idle instance to `owner` (caller holds the GPU lock): NVML must still show it as
        recorded and show no process on it; the journal names the new owner before it is handed."""
        key = idle.key
        try:
            gi = self.nvml.gi_by_id(gpu.device.handle, idle.gi_id)
            same = (
                gi is not None
                and gi.placement == key.placement
                and self.nvml.ci_by_id(gi.handle, idle.ci_id) is not None
                and self.nvml.mig_uuid(gpu.device.handle, idle.gi_id, idle.ci_id) == idle.mig_uuid
            )
            pids = self.nvml.mig_processes(gpu.device.handle, idle.gi_id, idle.ci_id) if same else []
        except NvmlError as error:
            self.metrics.busy_handovers.inc()
            raise InstanceError(
                "instance-busy", f"{key}: NVML cannot tell whether the idle instance is free ({error})"
            ) from None
        if not same:
            self._forget(key)
            self._count_idle()
            self._unjournal(key)
            raise InstanceError("idle-gone", f"idle instance {key} is no longer as recorded; kubelet retries")
        if pids:
            self.metrics.busy_handovers.inc()
            raise InstanceError(
                "instance-busy",
                f"idle instance {key} ({idle.mig_uuid}) runs process(es) {', '.join(map(str, pids[:8]))}; "
                "dynmig never hands over an instance a process uses",
            )
        entry = self.journal.get(key.journal_key)
        if entry is None:
            entry = Entry.intent(key.journal_key, owner or Owner(UNKNOWN, UNKNOWN, UNKNOWN))
            entry = entry.with_runtime(idle.gi_id, idle.ci_id, idle.mig_uuid)
        try:
            self.journal.record(entry.for_owner(owner or Owner(UNKNOWN, UNKNOWN, UNKNOWN)))
        except JournalError as error:
            raise InstanceError("journal-write", f"hand over {key}: {error}; kept idle") from None
        instance = replace(idle, owner=owner, idle_since=None, adopted=False, journaled=False)
        self._remember(instance)
        self._count_idle()
        self.metrics.idle_reuse_hits.inc()
        log.info(
            "handed idle MIG instance %s (GI %d, %s) to pod %s: no create",
            key,
            idle.gi_id,
            idle.mig_uuid,
            owner.ref if owner else "?",
            extra=about(pod=owner.ref if owner is not None else None),
        )
        return instance

    def _count_idle(self) -> None:
        self.metrics.idle_instances.set(len(self.idle_instances()))

    def _delivered(self, instance: ManagedInstance, delivered: bool) -> ManagedInstance:
        """Mark a pre-created instance handed over (Allocate for its own pod is serving it)."""
        if not delivered or instance.delivered:
            return instance
        with self._map_lock:
            current = self._managed.get(instance.key)
            if current is None or current.gi_id != instance.gi_id or current.owner is None:
                return instance
            if instance.owner is None or current.owner.pod_uid != instance.owner.pod_uid:
                return instance
            instance = self._managed[instance.key] = replace(current, delivered=True)
        return instance

    def _mine(self, existing: ManagedInstance, owner: Owner | None) -> ManagedInstance:
        if existing.owner is not None and owner is not None and existing.owner.pod_uid != owner.pod_uid:
            self.metrics.fail("create", "owned-by-another-pod")
            raise InstanceError(
                "owned-by-another-pod",
                f"{existing.key} (GI {existing.gi_id}, {existing.mig_uuid or 'no MIG device'}) "
                f"still belongs to pod {existing.owner.ref} ({existing.owner.pod_uid}); it is "
                "reclaimed once that pod has ended, and kubelet retries",
            )
        return existing

    # ---- the journal

    def _journal_created(self, intent: Entry, instance: ManagedInstance) -> None:
        try:
            self.journal.record(
                intent.with_runtime(instance.gi_id, instance.ci_id, instance.mig_uuid), durable=False
            )
        except JournalError as error:
            # the intent entry stays: it still proves the instance at this placement is ours
            log.error("created %s but could not record its identity: %s", instance.key, error)

    def _unjournal(self, *keys: InstanceKey) -> None:
        """Forget journal entries whose instance NVML confirmed gone (or never created)."""
        try:
            self.journal.remove(k.journal_key for k in keys)
        except JournalError as error:
            # a stale entry is harmless: its GI is gone, so the next startup drops it
            log.error("could not remove %d journal entr(ies): %s", len(keys), error)

    def journal_adopted(self, instance: ManagedInstance) -> None:
        """Record an adopted instance (proved by its pod's annotation) so a later crash keeps the proof."""
        if instance.owner is None:
            return
        entry = Entry.intent(instance.key.journal_key, instance.owner)
        if instance.has_ci and instance.mig_uuid:
            entry = entry.with_runtime(instance.gi_id, instance.ci_id, instance.mig_uuid)
        if self.journal.get(entry.key) == entry:
            return
        try:
            self.journal.record(entry)
        except JournalError as error:
            log.error("could not journal adopted %s: %s", instance.key, error)

    def _undo_ci(self, ci: object, key: InstanceKey) -> bool:
        try:
            # why: roll back the compute instance this very call created; nothing else runs in it yet.
            self.nvml.destroy_ci(ci)
            return True
        except NvmlError as error:
            log.error("rollback of CI for %s failed: %s", key, error)
            return False

    def _undo_gi(self, gi: GiRecord, key: InstanceKey) -> bool:
        try:
            # why: roll back the GPU instance this very call created, so a failed Allocate leaves the
            # slices free for the retry at the same placement.
            self.nvml.destroy_gi(gi.handle)
            return True
        except NvmlError as error:
            log.error("rollback of GI %d for %s failed: %s", gi.gi_id, key, error)
            return False

    # ---- destroy

    def release(self, key: InstanceKey, cause: str = "reclaim", unused: bool = False) -> None:
        """Destroy the managed instance of `key` (CI, then GI) and forget it; gone already = done.
        `unused`: only when NVML shows no process on it ("cannot tell" counts as busy), checked
        under the GPU's lock; else InstanceError `in-use` and it stays."""
        instance = self.get(key)
        if instance is None:
            return
        gpu = self._mutable_gpu(key.gpu_uuid)
        with self.gpu_lock(key.gpu_uuid):
            started = time.perf_counter()
            try:
                if unused:
                    self._check_unused(instance)
                self._destroy(gpu, instance)
            except InstanceError as error:
                self.metrics.fail("destroy", error.reason)
                raise
            self.metrics.destroy_seconds.observe(time.perf_counter() - started)
            self._forget(key)
            self._unjournal(key)
        if instance.idle:
            self._count_idle()
        self.metrics.destroys.labels(cause=cause).inc()
        pod = instance.owner.ref if instance.owner is not None else "(unknown)"
        log.info(
            "destroyed MIG instance %s of pod %s (GI %d CI %d, %s): %s",
            key,
            pod,
            instance.gi_id,
            instance.ci_id,
            instance.mig_uuid,
            cause,
            extra=about(pod=instance.owner.ref if instance.owner is not None else None),
        )
        if cause == "reclaim":
            self.events.reclaimed(instance.owner, str(key), instance.mig_uuid)

    def _check_unused(self, instance: ManagedInstance) -> None:
        if not instance.has_ci:
            return  # a GI without its compute instance runs nothing
        try:
            pids = self.instance_processes(instance)
        except NvmlError as error:
            raise InstanceError(
                "in-use", f"{instance.key}: NVML cannot tell whether a process uses it ({error})"
            ) from None
        if pids:
            raise InstanceError(
                "in-use",
                f"{instance.key}: process(es) {', '.join(map(str, pids[:8]))} still run on "
                f"{instance.mig_uuid}",
            )

    def _destroy(self, gpu: GpuInventory, instance: ManagedInstance) -> None:
        handle, key = gpu.device.handle, instance.key
        try:
            gi = self.nvml.gi_by_id(handle, instance.gi_id)
            if gi is None:
                return
            profile = gpu.profile(key.profile)
            if gi.placement != key.placement or (profile is not None and gi.profile_id != profile.id):
                # GI IDs are reused by the driver: this ID now names someone else's instance.
                log.warning(
                    "GI %d on %s is now %s profile %d, not %s; ours is gone, leaving it alone",
                    instance.gi_id,
                    gpu.uuid,
                    gi.placement,
                    gi.profile_id,
                    key,
                )
                return
            ci = self.nvml.ci_by_id(gi.handle, instance.ci_id) if instance.has_ci else None
            if ci is not None:
                # why: the caller proved the instance ours and done with (its pod ended, its claim was
                # unprepared, or its slices are needed and nothing runs on it); CIs go first or the
                # GI is IN_USE.
                self.nvml.destroy_ci(ci.handle)
            # why: same proof; the GI was just checked to be ours by ID, profile and placement, and
            # destroying it returns the slices so the next reservation or claim fits.
            self.nvml.destroy_gi(gi.handle)
        except NvmlError as error:
            reason = "in-use" if error.code == IN_USE else "nvml"
            raise InstanceError(reason, f"destroy {key}: {error}") from None

    def reset_gpu(self, uuid: str) -> int:
        """Destroy every CI and GI on a GPU proven idle (startup); returns how many GIs went."""
        gpu = self._mutable_gpu(uuid)
        destroyed = 0
        with self.gpu_lock(uuid):
            try:
                for gi in self.nvml.list_gis(gpu.device.handle, list(gpu.profiles)):
                    for ci in self.nvml.list_cis(gi.handle):
                        # why: startup clean-up of a GPU proven idle (no active reservation, no process).
                        self.nvml.destroy_ci(ci.handle)
                    # why: same idle GPU; leaves it MIG-ready with every slice free.
                    self.nvml.destroy_gi(gi.handle)
                    destroyed += 1
            except NvmlError as error:
                self.metrics.fail("reset", "in-use" if error.code == IN_USE else "nvml")
                raise InstanceError("reset", f"clean {uuid}: {error}") from None
            with self._map_lock:
                for key in [k for k in self._managed if k.gpu_uuid == uuid]:
                    self.forgotten(self._managed.pop(key))
                self.metrics.managed.set(len(self._managed))
                self.metrics.idle_instances.set(sum(1 for m in self._managed.values() if m.idle))
            self._unjournal(*(InstanceKey(*e.key) for e in self.journal.entries() if e.gpuUUID == uuid))
        if destroyed:
            self.metrics.destroys.labels(cause="startup-clean").inc(destroyed)
        return destroyed

    # ---- adopt

    def verify(
        self, key: InstanceKey, gi_id: int, ci_id: int, mig_uuid: str, owner: Owner | None = None
    ) -> ManagedInstance:
        """Prove a recorded runtime identity against NVML: profile, placement, GI ID, CI ID, MIG UUID."""
        gpu = self._mutable_gpu(key.gpu_uuid)
        profile = self._profile(gpu, key.profile)
        handle = gpu.device.handle
        try:
            gi = self.nvml.gi_by_id(handle, gi_id)
            if gi is None:
                raise InstanceError("gi-missing", f"{key}: GI {gi_id} does not exist")
            if gi.profile_id != profile.id or gi.placement != key.placement:
                raise InstanceError(
                    "gi-mismatch", f"{key}: GI {gi_id} is profile {gi.profile_id} at {gi.placement}"
                )
            if self.nvml.ci_by_id(gi.handle, ci_id) is None:
                raise InstanceError("ci-missing", f"{key}: CI {ci_id} of GI {gi_id} does not exist")
            found = self.nvml.mig_uuid(handle, gi_id, ci_id)
        except NvmlError as error:
            raise InstanceError("nvml-query", f"verify {key}: {error}") from None
        if found != mig_uuid:
            raise InstanceError("uuid-mismatch", f"{key}: MIG UUID is {found}, the pod recorded {mig_uuid}")
        return ManagedInstance(key, gi_id, ci_id, mig_uuid, adopted=True, owner=owner)

    def find_at(self, key: InstanceKey, owner: Owner | None = None) -> ManagedInstance | None:
        """An existing instance of exactly this profile and placement with one CI and a MIG UUID."""
        gpu = self._mutable_gpu(key.gpu_uuid)
        profile = self._profile(gpu, key.profile)
        try:
            for gi in self.nvml.list_gis(gpu.device.handle, [profile]):
                if gi.placement != key.placement:
                    continue
                cis = self.nvml.list_cis(gi.handle)
                if len(cis) != 1:
                    return None
                mig_uuid = self.nvml.mig_uuid(gpu.device.handle, gi.gi_id, cis[0].ci_id)
                return (
                    ManagedInstance(key, gi.gi_id, cis[0].ci_id, mig_uuid, adopted=True, owner=owner)
                    if mig_uuid
                    else None
                )
        except NvmlError as error:
            raise InstanceError("nvml-query", f"look for {key}: {error}") from None
        return None

    def adopt(self, instance: ManagedInstance) -> None:
        with self.gpu_lock(instance.key.gpu_uuid):
            self._remember(instance)
            self.journal_adopted(instance)
        self.metrics.adoptions.inc()
        log.info(
            "adopted MIG instance %s: GI %d CI %d %s",
            instance.key,
            instance.gi_id,
            instance.ci_id,
            instance.mig_uuid,
        )

    # ---- instances the journal proves ours

    def claim(self, entry: Entry) -> ManagedInstance | None:
        """The instance a journal entry proves ours, as NVML shows it now; None when it is gone (the
        entry is then dropped). InstanceError when NVML cannot tell or the shape is not ours."""
        key = InstanceKey(*entry.key)
        gpu = self._mutable_gpu(key.gpu_uuid)
        profile = self._profile(gpu, key.profile)
        try:
            if entry.created:
                return self._claim_created(gpu, profile, key, entry)
            return self._claim_intent(gpu, profile, key, entry)
        except NvmlError as error:
            raise InstanceError("nvml-query", f"journal entry {key}: {error}") from None

    def _claim_created(
        self, gpu: GpuInventory, profile: GiProfile, key: InstanceKey, entry: Entry
    ) -> ManagedInstance | None:
        gi = self.nvml.gi_by_id(gpu.device.handle, entry.gpuInstanceID or 0)
        if gi is None or gi.placement != key.placement or gi.profile_id != profile.id:
            self._gone(key, "its GI is gone (or its ID now names another instance)")
            return None
        owner = entry.owner
        if self.nvml.ci_by_id(gi.handle, entry.computeInstanceID or 0) is None:
            return ManagedInstance(key, gi.gi_id, -1, "", adopted=True, owner=owner)  # the GI is still ours
        found = self.nvml.mig_uuid(gpu.device.handle, gi.gi_id, entry.computeInstanceID or 0)
        if found != entry.migUUID:
            self._gone(key, f"its MIG UUID is now {found}, not {entry.migUUID}")
            return None
        return ManagedInstance(
            key,
            gi.gi_id,
            entry.computeInstanceID or 0,
            found or "",
            adopted=True,
            owner=owner,
            idle_since=None if entry.idleSince is None else float(entry.idleSince),
        )

    def _claim_intent(
        self, gpu: GpuInventory, profile: GiProfile, key: InstanceKey, entry: Entry
    ) -> ManagedInstance | None:
        """A crash came between the intent and the record of the create: look at the placement."""
        gi = next(
            (g for g in self.nvml.list_gis(gpu.device.handle, [profile]) if g.placement == key.placement),
            None,
        )
        if gi is None:
            self._gone(key, "no GI was created")
            return None
        cis = self.nvml.list_cis(gi.handle)
        if not cis:
            return ManagedInstance(key, gi.gi_id, -1, "", adopted=True, owner=entry.owner)
        if len(cis) != 1:
            raise InstanceError(
                "not-our-shape", f"{key}: GI {gi.gi_id} has {len(cis)} compute instances; dynmig creates one"
            )
        mig_uuid = self.nvml.mig_uuid(gpu.device.handle, gi.gi_id, cis[0].ci_id) or ""
        return ManagedInstance(key, gi.gi_id, cis[0].ci_id, mig_uuid, adopted=True, owner=entry.owner)

    def _gone(self, key: InstanceKey, why: str) -> None:
        log.info("journal entry %s: %s; dropping the entry, touching nothing", key, why)
        self._unjournal(key)

    def take(self, instance: ManagedInstance) -> None:
        """Manage an instance the journal proved ours (reclaim decides, by its owner, whether it stays)."""
        instance = replace(instance, journaled=True)
        with self.gpu_lock(instance.key.gpu_uuid):
            self._remember(instance)
        if instance.idle:
            self._count_idle()
        log.info(
            "journal proves MIG instance %s ours (GI %d, pod %s)",
            instance.key,
            instance.gi_id,
            instance.owner.ref if instance.owner else "?",
        )

    def instance_processes(self, instance: ManagedInstance) -> list[int]:
        """PIDs of compute processes on the instance's MIG device; NvmlError when NVML cannot tell."""
        gpu = self.inventory.gpu(instance.key.gpu_uuid)
        if gpu is None:
            raise NvmlError(
                "nvmlDeviceGetComputeRunningProcesses", 6, f"GPU {instance.key.gpu_uuid} not found"
            )
        return self.nvml.mig_processes(gpu.device.handle, instance.gi_id, instance.ci_id)
