"""NodePrepareResources and NodeUnprepareResources: the allocated GPU instance is made, and released,
by the node's instance manager (`plugin.instances`), the one writer of MIG instances the device
plugin uses too; this module decides *which* instance a claim gets and never calls NVML to create or
destroy one itself.

Safety, in the order it is applied:
- a device is created only at the placement its name denotes on its GPU (`mig.dra.devices.by_name`
  over this node's GPUs; a name we would never publish refuses the claim), only for an allowed
  profile; NVML refuses a GI overlapping a live one, and the refusal names the holder (someone
  else's instance is never shared);
- the manager journals (`plugin.journal`) the intent (GPU, profile, placement, claim UID) durably
  *before* the create, and the runtime identity after, under the GPU's lock: an instance this plugin
  created is always provable, a kill -9 at any point leaves at most an intent whose GI is found at
  that exact placement and profile;
- a release destroys only an instance the journal proves is this claim's, checked against NVML by
  ID, profile and placement, with no process on it ("cannot tell" counts as busy), CI before GI;
- prepare is idempotent (a prepared claim returns the same devices); unprepare of a claim we do not
  know succeeds (kubelet retries after restarts and must not wait forever for nothing).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mig.dra.devices import Gpu, MigDevice, by_name
from plugin.cdi import CdiError
from plugin.cdi import MigDevice as CdiDevice
from plugin.dra.cdi import CdiSpecs
from plugin.dra.claims import ClaimError, ClaimRef, Result, allocated
from plugin.dra.gpus import NodeGpu
from plugin.dra.status import DeviceReport
from plugin.instances import InstanceError, InstanceKey, InstanceManager, ManagedInstance
from plugin.journal import Entry, Owner

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


def key_of(d: MigDevice) -> InstanceKey:
    """The instance a DRA device denotes, as the instance manager and its journal key it."""
    return InstanceKey(d.gpu_uuid, d.profile, d.placement.start, d.placement.size)


class Preparer:
    def __init__(
        self,
        manager: InstanceManager,
        gpus: list[NodeGpu],
        cdi: CdiSpecs,
        driver: str,
        pool: str,
        read_claim: ClaimReader,
        changed: Callable[[], None] = lambda: None,
        reported: Callable[[ClaimRef, list[DeviceReport]], None] = lambda ref, reports: None,
        released: Callable[[ClaimRef, ManagedInstance], None] = lambda ref, instance: None,
    ):
        self.manager, self.cdi = manager, cdi
        self.driver, self.pool = driver, pool
        self.read_claim = read_claim
        self.changed = changed  # occupancy changed: republish
        self.reported = reported  # the prepared devices, for the claim's status.devices
        self.released = released  # an instance of the claim was destroyed
        self.gpus = {g.uuid: g for g in gpus}
        self.devices = by_name(Gpu(g.minor, g.uuid, g.model, g.allowed) for g in gpus)
        self.names = {key_of(d): name for name, (_, d) in self.devices.items()}
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
        made = [self._ensure(ref, i, r, d) for i, (r, d) in enumerate(devices)]
        try:
            ids = self.cdi.write(ref.uid, [self._cdi_device(ref.uid, r.device, m) for r, m in made])
        except CdiError as error:
            raise PrepareError(f"claim {ref}: {error}") from None
        self.changed()
        self.reported(ref, [self._report(r, m) for r, m in made])
        return [
            Prepared(r.request, self.pool, r.device, (cdi_id,))
            for (r, _), cdi_id in zip(made, ids, strict=True)
        ]

    def _report(self, r: Result, m: ManagedInstance) -> DeviceReport:
        return DeviceReport(
            self.pool, r.device, m.key.profile, m.key.start, m.key.gpu_uuid, m.mig_uuid, m.gi_id, m.ci_id
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

    def _ensure(self, ref: ClaimRef, index: int, r: Result, d: MigDevice) -> tuple[Result, ManagedInstance]:
        """The claim's instance for `d`, made by the instance manager if it is not there yet."""
        key = key_of(d)
        recorded = self.manager.journal.get(key.journal_key)
        if recorded is not None and recorded.podUID != ref.uid:
            # journaled for another claim, even one adoption could not prove yet: never taken over
            raise PrepareError(
                f"claim {ref}: device {r.device} is prepared for claim {recorded.namespace}/{recorded.name}"
            )
        try:
            if recorded is not None:
                self.manager.confirm(key)  # prepared before: its GI may have gone with a GPU reset
            instance, created = self.manager.ensure(key, Owner(ref.uid, ref.namespace, ref.name, 0, index))
        except InstanceError as error:
            raise PrepareError(self._refusal(ref, r, d, error)) from None
        if created:
            log.info(
                "claim %s: created %s at %s on GPU %s (%s)",
                ref,
                d.profile,
                d.placement.start,
                d.gpu_uuid,
                instance.mig_uuid,
            )
        return r, instance

    def _refusal(self, ref: ClaimRef, r: Result, d: MigDevice, error: InstanceError) -> str:
        holder = self.manager.get(key_of(d))
        if error.reason == "owned-by-another-pod" and holder is not None and holder.owner is not None:
            return f"claim {ref}: device {r.device} is prepared for claim {holder.owner.ref}"
        if error.reason == "create-gi" and error.held_by >= 0:
            return (
                f"claim {ref}: slices {d.placement.start}-{d.placement.end - 1} of GPU {d.gpu_uuid} are "
                f"held by GPU instance {error.held_by}, which is not this claim's"
            )
        if error.reason == "journal-write":
            return f"claim {ref}: the ownership journal cannot be written: {error}"
        return f"claim {ref}: device {r.device}: {error}"

    # ---- unprepare

    def unprepare(self, ref: ClaimRef) -> None:
        mine = self._instances_of(ref)
        for instance in mine:
            self._release(ref, instance)
        self.cdi.remove(ref.uid)
        if mine:
            self.changed()

    def _instances_of(self, ref: ClaimRef) -> list[ManagedInstance]:
        """The claim's instances: those managed now, and those its journal entries still prove ours
        (an adoption that could not settle them); an entry whose instance is gone is dropped."""
        for entry in self.manager.journal.entries():
            if entry.podUID == ref.uid and self.manager.get(InstanceKey(*entry.key)) is None:
                self._take(ref, entry)
        return [m for m in self.manager.managed() if m.owner is not None and m.owner.pod_uid == ref.uid]

    def _take(self, ref: ClaimRef, entry: Entry) -> None:
        if entry.gpuUUID not in self.gpus:
            raise PrepareError(
                f"claim {ref}: GPU {entry.gpuUUID} is not on this node any more; left as it is"
            )
        try:
            instance = self.manager.claim(entry)
        except InstanceError as error:
            raise PrepareError(
                f"claim {ref}: its instance cannot be proved now ({error}); retry later"
            ) from None
        if instance is not None:
            self.manager.take(instance)

    def _release(self, ref: ClaimRef, instance: ManagedInstance) -> None:
        try:
            # the manager destroys only with no process on it, checked under the GPU's lock
            self.manager.release(instance.key, cause="unprepare", unused=True)
        except InstanceError as error:
            if error.reason == "in-use":
                raise PrepareError(
                    f"claim {ref}: processes still run on its MIG device {instance.mig_uuid} ({error}); "
                    "retry later"
                ) from None
            raise PrepareError(f"claim {ref}: releasing {instance.key} failed: {error}") from None
        log.info("claim %s: destroyed %s", ref, instance.key)
        self.released(ref, instance)

    # ---- adoption

    def adopt(self, only: set[str] | None = None) -> tuple[int, int]:
        """After a restart: the journal's entries are proved against NVML by the instance manager (one
        adoption rule with the device plugin); the instances of claims that still exist are kept, those
        of claims the API says are gone are released (with the busy check), and a GI a crash left
        without its compute instance is released too (nothing runs on it; prepare makes it whole
        again). Returns (kept, released). An API that cannot be asked, NVML that cannot tell, or a
        gone claim's instance that is still busy decides nothing: it is kept, and its claim UID stays
        in `undecided` for the next call (`only`: just those) to settle."""
        kept = released = 0
        undecided: set[str] = set()
        by_claim: dict[str, list[Entry]] = {}
        for e in self.manager.journal.entries():
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
            live = claim is not None and _allocated_here(claim, ref, self.driver, self.pool)
            try:
                k, r = self._settle(ref, live)
            except PrepareError as error:
                log.warning("claim %s: its instances stay: %s", ref, error)
                kept += len(entries)
                undecided.add(uid)
                continue
            kept, released = kept + k, released + r
        self.undecided = undecided
        return kept, released

    def _settle(self, ref: ClaimRef, live: bool) -> tuple[int, int]:
        """(kept, released) of one journaled claim; `live`: it still exists, allocated here."""
        mine = self._instances_of(ref)
        if not live:
            self.unprepare(ref)
            return 0, len(mine)
        broken = [m for m in mine if not m.has_ci]
        for instance in broken:
            self._release(ref, instance)
        if broken:
            self.changed()
        whole = [m for m in mine if m.has_ci and m.key in self.names]
        if whole:
            self.cdi.write(ref.uid, [self._cdi_device(ref.uid, self.names[m.key], m) for m in whole])
        return len(whole), len(broken)

    def _cdi_device(self, claim_uid: str, device: str, m: ManagedInstance) -> CdiDevice:
        return CdiDevice(
            self.cdi.device_name(claim_uid, device),
            m.mig_uuid,
            self.gpus[m.key.gpu_uuid].minor,
            m.gi_id,
            m.ci_id,
        )


def _allocated_here(claim: Mapping[str, Any], ref: ClaimRef, driver: str, pool: str) -> bool:
    try:
        return bool(allocated(claim, ref, driver, pool))
    except ClaimError:
        return False
