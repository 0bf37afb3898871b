"""The device plugin's CDI specs (`--device-list-strategy=cdi`): one spec per MIG instance it hands
to a container, so a runtime that injects devices from CDI specs (containerd and CRI-O on GPU
Operator 25.10+ nodes) finds an instance created a moment ago, which no spec of NVIDIA's toolkit
names.

Kind `k8s.dynmig.io/mig` (never one of the toolkit's kinds: `nvidia.com/gpu`,
`management.nvidia.com/gpu`, `runtime.nvidia.com/gpu`, `k8s.device-plugin.nvidia.com/gpu`), device
name the MIG UUID, file `k8s.dynmig.io-mig_<MIG UUID>.json` (rules in plugin/cdi.py). A spec is
written before Allocate answers (for a new, reused, pre-created or adopted instance alike), removed
when the plugin forgets the instance (destroyed, or found gone), and reconciled against the managed
instances at start (after the journal's recovery) and after every reconcile pass: a spec of ours
that names no managed instance goes, a managed instance handed out has its spec.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from plugin.cdi import CdiError, MigDevice, MigEdits, SpecDir, device_name
from plugin.discovery import Inventory
from plugin.instances import ManagedInstance
from plugin.nvml import Nvml, NvmlError

log = logging.getLogger("dynmig.plugin.cdi")

KIND = "k8s.dynmig.io/mig"


def cdi_name(mig_uuid: str) -> str:
    """The CDI device name kubelet passes to the runtime for a MIG device."""
    return f"{KIND}={device_name(mig_uuid)}"


class InstanceSpecs:
    def __init__(self, specs: SpecDir, edits: MigEdits, nvml: Nvml, inventory: Callable[[], Inventory]):
        self.specs, self.edits, self.nvml, self.inventory = specs, edits, nvml, inventory
        self._minors: dict[str, int] = {}  # GPU UUID -> its device minor (fixed while the driver is loaded)

    def _gpu_minor(self, gpu_uuid: str) -> int:
        if gpu_uuid not in self._minors:
            gpu = self.inventory().gpu(gpu_uuid)
            if gpu is None:
                raise CdiError(f"GPU {gpu_uuid} is not in this plugin's inventory")
            try:
                self._minors[gpu_uuid] = self.nvml.minor_number(gpu.device.handle)
            except NvmlError as error:
                raise CdiError(f"GPU {gpu_uuid}: its device minor is unknown: {error}") from None
        return self._minors[gpu_uuid]

    def write(self, instances: Iterable[ManagedInstance]) -> None:
        """Write the spec of each instance (atomically, replacing one there); CdiError on failure."""
        for m in instances:
            d = MigDevice(
                device_name(m.mig_uuid), m.mig_uuid, self._gpu_minor(m.key.gpu_uuid), m.gi_id, m.ci_id
            )
            self.specs.write(m.mig_uuid, [(d.name, self.edits.device(d))], self.edits.common())

    def forget(self, instance: ManagedInstance) -> None:
        """The instance is gone (destroyed, or found gone): its spec goes with it."""
        if not instance.mig_uuid:
            return
        try:
            if self.specs.remove(instance.mig_uuid):
                log.info("removed the CDI spec of %s (%s)", instance.key, instance.mig_uuid)
        except CdiError as error:
            log.warning("%s; the next reconcile pass tries again", error)

    def reconcile(self, managed: Callable[[], Iterable[ManagedInstance]]) -> tuple[int, int]:
        """Remove every spec of ours whose instance is not managed; write the missing specs of
        managed instances handed to a pod. Returns (written, removed). The directory is listed
        before the managed set is read: a spec an Allocate writes meanwhile is of an instance
        already managed, or not listed."""
        present = set(self.specs.ids())
        by_id = {device_name(m.mig_uuid): m for m in managed() if m.mig_uuid and m.has_ci}
        removed = written = 0
        for spec_id in sorted(present - set(by_id)):
            try:
                removed += self.specs.remove(spec_id)
            except CdiError as error:
                log.warning("%s", error)
        missing = [m for i, m in by_id.items() if i not in present and m.delivered and not m.idle]
        for m in missing:
            try:
                self.write([m])
                written += 1
            except CdiError as error:
                log.warning("CDI spec of %s: %s", m.key, error)
        if removed or written:
            log.info("CDI specs reconciled: %d written, %d removed (no instance of ours)", written, removed)
        return written, removed
