"""NodePrepareResources and NodeUnprepareResources: create exactly the allocated GPU instance,
destroy exactly it, and adopt what a previous process of this plugin left.

Safety, in the order it is applied:
- a device is created only at the placement its name denotes on its GPU (`mig.dra.devices.by_name`
  over this node's GPUs; a name we would never publish refuses the claim), only for an allowed
  profile, and only when no live GI overlaps it (someone else's instance is never shared);
- the ownership journal (`plugin.journal`, its own file in this plugin's state dir) gets the intent
  (GPU, profile, placement, claim UID) durably *before* the create, and the runtime identity after:
  an instance this plugin created is always provable, a kill -9 at any point leaves at most an
  intent whose GI is found at that exact placement and profile;
- a destroy happens only for an instance the journal proves is this claim's, at the journal's
  placement, with no process on it (NVML asked; "cannot tell" counts as busy), CI before GI;
- prepare is idempotent (a prepared claim returns the same devices); unprepare of a claim we do not
  know succeeds (kubelet retries after restarts and must not wait forever for nothing).
One lock serialises every create and destroy of the node (NVML serialises them per GPU anyway).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mig.dra.devices import Gpu, MigDevice, by_name
from mig.types import Placement
from plugin.cdi import CdiError
from plugin.cdi import MigDevice as CdiDevice
from plugin.dra.cdi import CdiSpecs
from plugin.dra.claims import ClaimError, ClaimRef, Result, allocated
from plugin.dra.gpus import NodeGpu
from plugin.dra.status import DeviceReport
from plugin.journal import Entry, Journal, JournalError, Key, Owner
from plugin.nvml import GiRecord, Nvml, NvmlError

log = logging.getLogger("dynmig.dra.prepare")

# (namespace, name) -> the claim object, or None when the API says it does not exist; raises
# ClaimError when the API cannot be asked (then nothing is decided)
ClaimReader = Callable[[str, str], Mapping[str, Any] | None]


class PrepareError(RuntimeError):
    """A claim that cannot be prepared or unprepared now; the message is kubelet's per-claim error."""


@dataclass(frozen=True)
class Prepared:
    request: str
    pool: str
    device: str
    cdi_ids: tuple[str, ...]


def _key(d: MigDevice) -> Key:
    return (d.gpu_uuid, d.profile, d.placement.start, d.placement.size)


def _overlaps(a: Placement, b: Placement) -> bool:
    return a.start < b.start + b.size and b.start < a.start + a.size


class Preparer:
    def __init__(
        self,
        nvml: Nvml,
        journal: Journal,
        gpus: list[NodeGpu],
        cdi: CdiSpecs,
        driver: str,
        pool: str,
        read_claim: ClaimReader,
        changed: Callable[[], None] = lambda: None,
        reported: Callable[[ClaimRef, list[DeviceReport]], None] = lambda ref, reports: None,
        released: Callable[[ClaimRef, Entry], None] = lambda ref, entry: None,
    ):
        self.nvml, self.journal, self.cdi = nvml, journal, cdi
        self.driver, self.pool = driver, pool
        self.read_claim = read_claim
        self.changed = changed  # occupancy changed: republish
        self.reported = reported  # the prepared devices, for the claim's status.devices
        self.released = released  # an instance of the claim was destroyed
        self.lock = threading.Lock()
        self.gpus = {g.uuid: g for g in gpus}
        self.devices = by_name(Gpu(g.minor, g.uuid, g.model, g.allowed) for g in gpus)
        self.undecided: set[str] = set()  # journaled claims adoption could not settle yet

    # ---- prepare

    def prepare(self, ref: ClaimRef) -> list[Prepared]:
        claim = self.read_claim(ref.namespace, ref.name)
        if claim is None:
            raise PrepareError(f"claim {ref}: not found")
        try:
            results = allocated(claim, ref, self.driver, self.pool)
        except ClaimError as error:
            raise PrepareError(str(error)) from None
        devices = [(r, self._device(ref, r)) for r in results]
        with self.lock:
            made = [self._ensure(ref, i, r, d) for i, (r, d) in enumerate(devices)]
        try:
            ids = self.cdi.write(
                ref.uid, [self._cdi_device(ref.uid, r.device, self.journal.get(_key(d))) for r, d in devices]
            )
        except CdiError as error:
            raise PrepareError(f"claim {ref}: {error}") from None
        self.changed()
        self.reported(ref, [self._report(r, d) for r, d in devices])
        return [
            Prepared(r.request, self.pool, r.device, (cdi_id,))
            for (r, _), cdi_id in zip(made, ids, strict=True)
        ]

    def _report(self, r: Result, d: MigDevice) -> DeviceReport:
        entry = self.journal.get(_key(d))
        assert entry is not None and entry.migUUID, "a prepared device is journaled with its identity"
        return DeviceReport(
            self.pool,
            r.device,
            d.profile,
            d.placement.start,
            d.gpu_uuid,
            entry.migUUID,
            entry.gpuInstanceID or 0,
            entry.computeInstanceID or 0,
        )

    def _device(self, ref: ClaimRef, r: Result) -> MigDevice:
        found = self.devices.get(r.device)
        if found is None:
            raise PrepareError(f"claim {ref}: device {r.device} is not a MIG device of this node")
        gpu, device = found
        if device.profile not in {s.name for s in gpu.specs()}:
            raise PrepareError(
                f"claim {ref}: device {r.device}: profile {device.profile} is not allowed here"
            )
        return device

    def _ensure(self, ref: ClaimRef, index: int, r: Result, d: MigDevice) -> tuple[Result, str]:
        """The MIG UUID of the claim's instance for `d`, created if it is not there yet."""
        entry = self.journal.get(_key(d))
        if entry is not None and entry.podUID != ref.uid:
            raise PrepareError(
                f"claim {ref}: device {r.device} is prepared for claim {entry.namespace}/{entry.name}"
            )
        gpu = self.gpus[d.gpu_uuid]
        if entry is not None and entry.created and entry.migUUID:
            if self.nvml.gi_by_id(gpu.handle, entry.gpuInstanceID or 0) is not None:
                return r, entry.migUUID  # prepared before: the same device again
            self.journal.remove([entry.key])  # its GI is gone (a reset): create it anew
            entry = None
        # an intent of ours whose create was cut short: its GI, if the create got that far
        gi = self._own_gi(gpu, d) if entry is not None else None
        if entry is None or gi is None:
            self._check_free(ref, gpu, d)
            entry = Entry.intent(_key(d), Owner(ref.uid, ref.namespace, ref.name, 0, index))
            try:
                self.journal.record(entry)  # durable before the create: the create is provably ours
            except JournalError as error:
                raise PrepareError(f"claim {ref}: the ownership journal cannot be written: {error}") from None
            gi = self._create_gi(ref, gpu, d)
        return r, self._finish(ref, gpu, d, entry, gi)

    def _own_gi(self, gpu: NodeGpu, d: MigDevice) -> GiRecord | None:
        profile = gpu.profile(d.profile)
        for gi in self.nvml.list_gis(gpu.handle, list(gpu.profiles)):
            if gi.placement == d.placement and profile is not None and gi.profile_id == profile.id:
                return gi
        return None

    def _check_free(self, ref: ClaimRef, gpu: NodeGpu, d: MigDevice) -> None:
        for gi in self.nvml.list_gis(gpu.handle, list(gpu.profiles)):
            if _overlaps(gi.placement, d.placement):
                raise PrepareError(
                    f"claim {ref}: slices {d.placement.start}-{d.placement.end - 1} of GPU {gpu.uuid} are held "
                    f"by GPU instance {gi.gi_id}, which is not this claim's"
                )

    def _create_gi(self, ref: ClaimRef, gpu: NodeGpu, d: MigDevice) -> GiRecord:
        profile = gpu.profile(d.profile)
        if profile is None or d.placement not in profile.placements:
            self.journal.remove([_key(d)])
            raise PrepareError(
                f"claim {ref}: NVML offers no {d.profile} at {d.placement.start} on GPU {gpu.uuid}"
            )
        try:
            # why: the allocated device is exactly this profile at this placement on this GPU
            return self.nvml.create_gi(gpu.handle, profile.id, d.placement)
        except NvmlError as error:
            self.journal.remove([_key(d)])  # nothing was created
            raise PrepareError(f"claim {ref}: creating the GPU instance failed: {error}") from None

    def _finish(self, ref: ClaimRef, gpu: NodeGpu, d: MigDevice, entry: Entry, gi: GiRecord) -> str:
        profile = gpu.profile(d.profile)
        assert profile is not None, "a GI of ours has a profile this GPU reports"
        try:
            cis = self.nvml.list_cis(gi.handle)
            # why: a GI is usable by a container only through its compute instance
            ci = cis[0] if cis else self.nvml.create_ci(gi.handle, profile.slice_count)
            uuid = self.nvml.mig_uuid(gpu.handle, gi.gi_id, ci.ci_id)
            if uuid is None:
                raise NvmlError("nvmlDeviceGetUUID", 0, "no MIG device for the new instance")
        except NvmlError as error:
            self._destroy(gpu, gi)  # we created it a moment ago: not a guess
            self.journal.remove([entry.key])
            raise PrepareError(f"claim {ref}: creating the compute instance failed: {error}") from None
        self.journal.record(entry.with_runtime(gi.gi_id, ci.ci_id, uuid), durable=False)
        log.info(
            "claim %s: created %s at %s on GPU %s (%s)", ref, d.profile, d.placement.start, gpu.uuid, uuid
        )
        return uuid

    # ---- unprepare

    def unprepare(self, ref: ClaimRef) -> None:
        with self.lock:
            mine = [e for e in self.journal.entries() if e.podUID == ref.uid]
            for entry in mine:
                self._release(ref, entry)
        self.cdi.remove(ref.uid)
        if mine:
            self.changed()

    def _release(self, ref: ClaimRef, entry: Entry) -> None:
        gpu = self.gpus.get(entry.gpuUUID)
        if gpu is None:
            raise PrepareError(
                f"claim {ref}: GPU {entry.gpuUUID} is not on this node any more; left as it is"
            )
        gi = self._entry_gi(gpu, entry)
        if gi is not None:
            if self._busy(gpu, gi):
                raise PrepareError(
                    f"claim {ref}: processes still run on its MIG device {entry.migUUID}; retry later"
                )
            self._destroy(gpu, gi)
        self.journal.remove([entry.key])
        log.info("claim %s: destroyed %s at %s on GPU %s", ref, entry.profile, entry.start, gpu.uuid)
        if gi is not None:
            self.released(ref, entry)

    def _entry_gi(self, gpu: NodeGpu, entry: Entry) -> GiRecord | None:
        """The live GI the entry proves is ours: by its ID at its placement, or for an intent the GI at
        exactly its placement and profile; None when there is none."""
        placement = Placement(entry.start, entry.size)
        if entry.gpuInstanceID is not None:
            gi = self.nvml.gi_by_id(gpu.handle, entry.gpuInstanceID)
            return gi if gi is not None and gi.placement == placement else None
        profile = gpu.profile(entry.profile)
        for gi in self.nvml.list_gis(gpu.handle, list(gpu.profiles)):
            if gi.placement == placement and profile is not None and gi.profile_id == profile.id:
                return gi
        return None

    def _busy(self, gpu: NodeGpu, gi: GiRecord) -> bool:
        try:
            return any(
                self.nvml.mig_processes(gpu.handle, gi.gi_id, ci.ci_id)
                for ci in self.nvml.list_cis(gi.handle)
            )
        except NvmlError:
            return True  # NVML cannot tell: count it as busy

    def _destroy(self, gpu: NodeGpu, gi: GiRecord) -> None:
        try:
            for ci in self.nvml.list_cis(gi.handle):
                # why: the claim's instance is being released; a GI cannot go while its CI exists
                self.nvml.destroy_ci(ci.handle)
            # why: the journal proves this GI is the released claim's, and no process runs on it
            self.nvml.destroy_gi(gi.handle)
        except NvmlError as error:
            raise PrepareError(
                f"destroying GPU instance {gi.gi_id} on GPU {gpu.uuid} failed: {error}"
            ) from None

    # ---- adoption

    def adopt(self, only: set[str] | None = None) -> tuple[int, int]:
        """After a restart: keep the instances of claims that still exist; release (with the busy
        check) those of claims the API says are gone. Returns (kept, released). An API that cannot
        be asked, or a gone claim's instance that is still busy, decides nothing: it is kept, and
        its claim UID stays in `undecided` for the next call (`only`: just those) to settle."""
        kept = released = 0
        undecided: set[str] = set()
        by_claim: dict[str, list[Entry]] = {}
        for e in self.journal.entries():
            if only is None or e.podUID in only:
                by_claim.setdefault(e.podUID, []).append(e)
        for uid, entries in by_claim.items():
            ref = ClaimRef(entries[0].namespace, uid, entries[0].name)
            try:
                claim = self.read_claim(ref.namespace, ref.name)
            except ClaimError as error:
                log.warning("claim %s: cannot be read (%s); its instances are kept", ref, error)
                kept += len(entries)
                undecided.add(uid)
                continue
            if claim is not None and _allocated_here(claim, ref, self.driver, self.pool):
                kept += len(entries)
                self._rewrite_cdi(ref, entries)
                continue
            try:
                self.unprepare(ref)
                released += len(entries)
            except (PrepareError, NvmlError) as error:
                log.warning("claim %s is gone but its instances stay: %s", ref, error)
                kept += len(entries)
                undecided.add(uid)
        self.undecided = undecided
        return kept, released

    def _cdi_device(self, claim_uid: str, device: str, entry: Entry | None) -> CdiDevice:
        assert entry is not None and entry.migUUID, "a prepared device has its journal entry"
        return CdiDevice(
            self.cdi.device_name(claim_uid, device),
            entry.migUUID,
            self.gpus[entry.gpuUUID].minor,
            entry.gpuInstanceID or 0,
            entry.computeInstanceID or 0,
        )

    def _rewrite_cdi(self, ref: ClaimRef, entries: list[Entry]) -> None:
        names = {_key(d): name for name, (_, d) in self.devices.items()}
        devices = [
            self._cdi_device(ref.uid, names[e.key], e)
            for e in entries
            if e.created and e.migUUID and e.key in names
        ]
        if devices:
            self.cdi.write(ref.uid, devices)


def _allocated_here(claim: Mapping[str, Any], ref: ClaimRef, driver: str, pool: str) -> bool:
    try:
        return bool(allocated(claim, ref, driver, pool))
    except ClaimError:
        return False
