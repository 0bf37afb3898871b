"""Startup recovery: decide which GPUs are in use, clean the idle ones we may touch, adopt the rest.

- In use = GPUs referenced by active reservations, or running processes. An NVML query error counts
  as busy; a failed pod list (or an annotation we cannot read) makes every GPU busy.
- Idle, allowlisted, not excluded GPUs are brought to a clean MIG-ready state. Excluded GPUs are
  never touched, not even here.
- Instances of active pods whose complete runtime identity NVML confirms (profile, placement, GI ID,
  CI ID, MIG UUID) are adopted. A pending pod with only a logical reservation protects its placement
  (an instance already there, created before the restart, is adopted for it). Anything that cannot
  be proven is left untouched and reported.
- Instances the ownership journal proves we created (plugin/journal.py) are managed again with the
  pod they were created for, on busy GPUs too; the reclaim pass that follows startup destroys those
  whose pod a complete pod list shows gone or ended. A pending pod is never given an instance the
  journal says was created for another pod.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from mig.allowlist import Allowlist
from plugin.config import DeviceFilter
from plugin.discovery import Inventory, discover
from plugin.instances import InstanceError, InstanceKey, InstanceManager, ManagedInstance
from plugin.journal import Owner
from plugin.kube import Kube, KubeError, PodView
from plugin.nvml import MIG_ENABLE, GpuDevice, Nvml, NvmlError
from plugin.reconcile import NodeReservations, active_reservations

log = logging.getLogger("dynmig.plugin.startup")


@dataclass
class StartupReport:
    complete: bool = False  # False: the pod list failed; run again before trusting the managed set
    busy: dict[str, str] = field(default_factory=dict)  # GPU UUID -> why it is in use
    cleaned: list[str] = field(default_factory=list)
    adopted: list[ManagedInstance] = field(default_factory=list)
    journaled: list[ManagedInstance] = field(default_factory=list)  # proven ours by the journal
    protected: list[InstanceKey] = field(default_factory=list)
    unproven: list[str] = field(default_factory=list)
    untouched: list[str] = field(default_factory=list)  # excluded or not allowlisted GPUs


def in_use(
    devices: list[GpuDevice], node: NodeReservations | None, nvml: Nvml, excluded: DeviceFilter
) -> dict[str, str]:
    """GPU UUID -> reason it is busy. `node` None = the pod list failed: everything is busy."""
    busy: dict[str, str] = {}
    for device in devices:
        if excluded.excludes(device.uuid, device.index):
            continue
        if node is None:
            busy[device.uuid] = "pod list failed"
        elif any(reason == "malformed-annotation" for reason, _ in node.problems):
            busy[device.uuid] = "a pod's reservation annotation cannot be read"
        elif device.uuid in node.gpus:
            busy[device.uuid] = "active reservation"
        else:
            try:
                if nvml.has_processes(device.handle):
                    busy[device.uuid] = "running processes"
            except NvmlError as error:
                busy[device.uuid] = f"NVML cannot tell ({error})"
    return busy


class Startup:
    def __init__(
        self, nvml: Nvml, kube: Kube, manager: InstanceManager, allowlist: Allowlist, excluded: DeviceFilter
    ):
        self.nvml, self.kube, self.manager = nvml, kube, manager
        self.allowlist, self.excluded = allowlist, excluded

    def run(self) -> StartupReport:
        report = StartupReport()
        devices = self.nvml.devices()
        pods: list[PodView] | None
        try:
            pods = self.kube.list_node_pods()
        except KubeError as error:
            log.error("startup: cannot list pods (%s); every GPU counts as busy, nothing is cleaned", error)
            pods = None
        node = None if pods is None else active_reservations(pods, frozenset(d.uuid for d in devices))
        report.complete = pods is not None
        report.busy = in_use(devices, node, self.nvml, self.excluded)
        for device in devices:
            if (
                self.excluded.excludes(device.uuid, device.index)
                or self.allowlist.entry_for(device.name) is None
            ):
                report.untouched.append(device.uuid)
        idle = [d for d in devices if d.uuid not in report.busy and d.uuid not in report.untouched]
        if self._enable_mig(idle, report):
            devices = self.nvml.devices()  # a mode change may rebind the device: fetch handles again
        inventory = discover(self.nvml, self.allowlist, self.excluded, devices)
        self.manager.inventory = inventory
        self._clean(inventory, idle, report)
        if node is not None:
            self._adopt(node, report)
            self._claim_journaled(report)
        for problem in node.problems if node else ():
            report.unproven.append(f"{problem[0]}: {problem[1]}")
        self._report_unowned(inventory, report)
        for _ in report.unproven:
            self.manager.metrics.fail("startup", "unproven")
        log.info(
            "startup: busy=%s cleaned=%s adopted=%d journaled=%d protected=%d unproven=%d untouched=%s",
            report.busy,
            report.cleaned,
            len(report.adopted),
            len(report.journaled),
            len(report.protected),
            len(report.unproven),
            report.untouched,
        )
        for line in report.unproven:
            log.warning("startup: left untouched: %s", line)
        return report

    def _enable_mig(self, idle: list[GpuDevice], report: StartupReport) -> bool:
        changed = False
        for device in idle:
            try:
                current, _pending = self.nvml.mig_mode(device.handle)
                if current == MIG_ENABLE:
                    continue
                status = self.nvml.enable_mig(device.handle)
                changed = True
                if status != 0:
                    report.unproven.append(
                        f"{device.uuid}: MIG mode change pending (status {status}); needs a reset"
                    )
            except NvmlError as error:
                report.unproven.append(f"{device.uuid}: cannot enable MIG mode: {error}")
        return changed

    def _clean(self, inventory: Inventory, idle: list[GpuDevice], report: StartupReport) -> None:
        for device in idle:
            gpu = inventory.gpu(device.uuid)
            if gpu is None or not gpu.managed:
                continue
            try:
                count = self.manager.reset_gpu(device.uuid)
                report.cleaned.append(device.uuid)
                if count:
                    log.info("startup: cleaned %d GPU instance(s) from idle GPU %s", count, device.uuid)
            except InstanceError as error:
                report.unproven.append(f"{device.uuid}: clean-up failed: {error}")

    def _report_unowned(self, inventory: Inventory, report: StartupReport) -> None:
        """Instances on busy GPUs that no active reservation proves: reported, never destroyed."""
        owned = {(m.key.gpu_uuid, m.key.profile, m.key.placement) for m in self.manager.managed()}
        owned |= {(k.gpu_uuid, k.profile, k.placement) for k in report.protected}
        for gpu in inventory.gpus:
            if gpu.uuid not in report.busy or not gpu.managed or gpu.uuid in report.cleaned:
                continue
            try:
                gis = self.nvml.list_gis(gpu.device.handle, list(gpu.profiles))
            except NvmlError as error:
                report.unproven.append(f"{gpu.uuid}: cannot list GPU instances: {error}")
                continue
            for gi in gis:
                profile = gpu.any_profile(gi.profile_id)
                name = profile.name if profile else f"profile {gi.profile_id}"
                if (gpu.uuid, name, gi.placement) not in owned:
                    report.unproven.append(
                        f"{gpu.uuid}: GI {gi.gi_id} {name} at {gi.placement} has no owner "
                        "dynmig can prove; left untouched"
                    )

    def _claim_journaled(self, report: StartupReport) -> None:
        """Manage again what the journal proves ours and nothing adopted (reclaim then decides)."""
        for entry in self.manager.journal.entries():
            key = InstanceKey(*entry.key)
            if self.manager.get(key) is not None:
                continue
            gpu = self.manager.inventory.gpu(key.gpu_uuid)
            if gpu is None or not gpu.managed:
                continue  # excluded or gone from the node: never mutated, the entry waits
            try:
                instance = self.manager.claim(entry)
            except InstanceError as error:
                report.unproven.append(
                    f"journal entry {key} of pod {entry.namespace}/{entry.name}: {error.reason}: {error}"
                )
                continue
            if instance is not None:
                self.manager.take(instance)
                report.journaled.append(instance)

    def _adopt(self, node: NodeReservations, report: StartupReport) -> None:
        for reservation in node.reservations:
            allocation, pod, key = reservation.allocation, reservation.pod, reservation.key
            if self.manager.get(key) is not None:
                continue
            owner = Owner(pod.uid, pod.namespace, pod.name, allocation.containerIndex, allocation.deviceIndex)
            try:
                if allocation.runtime_ready:
                    instance = self.manager.verify(
                        key,
                        allocation.gpuInstanceID or 0,
                        allocation.computeInstanceID or 0,
                        allocation.migUUID or "",
                        owner,
                    )
                    self.manager.adopt(instance)
                    report.adopted.append(instance)
                elif pod.phase == "Pending":
                    entry = self.manager.journal.get(key.journal_key)
                    if entry is None or entry.owner is None or entry.podUID == pod.uid:  # never another pod's
                        found = self.manager.find_at(key, owner)
                        if found is not None:
                            self.manager.adopt(found)
                    report.protected.append(key)
                else:
                    report.unproven.append(f"{pod.ref}: {pod.phase} pod has no runtime identity for {key}")
            except InstanceError as error:
                report.unproven.append(f"{pod.ref}: {key}: {error.reason}: {error}")
