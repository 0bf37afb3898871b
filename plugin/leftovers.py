"""Instances on this node's managed GPUs that no active reservation covers, published in
`dynmig.io/node-leftover-instances` (mig/leftovers.py) so the scheduler treats them as occupied.

`reclaiming`: an instance we manage whose pod ended (its destroy is pending or failing);
`unowned`: one nothing proves ours (we never destroy it on a busy GPU). Instances kept idle for
reuse are not leftovers (plugin/idle.py). Computed only from a pass that
fully understood the node; written only when the text changes.
"""

from __future__ import annotations

import logging
from collections import Counter

from mig.annotations import LEFTOVERS
from mig.leftovers import RECLAIMING, UNOWNED, Leftover, encode_leftovers
from mig.types import Placement
from plugin.instances import InstanceManager
from plugin.kube import Kube, NodeAnnotationWriter
from plugin.metrics import PluginMetrics
from plugin.nvml import NvmlError
from plugin.reconcile import NodeReservations

log = logging.getLogger("dynmig.plugin.leftovers")


def find_leftovers(manager: InstanceManager, node: NodeReservations) -> list[Leftover] | None:
    """Every GI on a managed GPU not at an active reservation's profile and placement; None when
    NVML cannot tell (then nothing is published this pass)."""
    covered = {
        (r.allocation.gpuUUID, r.allocation.profile, r.allocation.placement_value) for r in node.reservations
    }
    managed = {(m.key.gpu_uuid, m.key.profile, m.key.placement) for m in manager.managed()}
    # kept idle for reuse: free for the scheduler, published in the idle annotation instead
    idle = {(m.key.gpu_uuid, m.key.profile, m.key.placement) for m in manager.managed() if m.idle}
    out: list[Leftover] = []
    for gpu in manager.inventory.managed:
        try:
            gis = manager.nvml.list_gis(gpu.device.handle, list(gpu.profiles))
        except NvmlError as error:
            log.warning(
                "cannot list GPU instances of %s (%s); leftovers not published this pass", gpu.uuid, error
            )
            return None
        for gi in gis:
            profile = gpu.any_profile(gi.profile_id)
            name = profile.name if profile else f"profile-{gi.profile_id}"
            where: tuple[str, str, Placement] = (gpu.uuid, name, gi.placement)
            if where in covered or where in idle:
                continue
            out.append(Leftover.of(gpu.uuid, name, gi.placement, RECLAIMING if where in managed else UNOWNED))
    return out


class LeftoverPublisher:
    def __init__(self, kube: Kube, metrics: PluginMetrics):
        self.metrics = metrics
        self.writer = NodeAnnotationWriter(kube, LEFTOVERS)

    def publish(self, leftovers: list[Leftover]) -> bool:
        """Write the annotation when it changed (an empty list removes it); True when written."""
        counts: Counter[str] = Counter(x.reason for x in leftovers)
        for reason in (UNOWNED, RECLAIMING):
            self.metrics.unowned_placements.labels(reason=reason).set(counts.get(reason, 0))
        if not self.writer.write(encode_leftovers(leftovers) if leftovers else None):
            return False
        if leftovers:
            log.warning(
                "published %d instance(s) no active reservation covers as occupied: %s",
                len(leftovers),
                ", ".join(
                    f"{x.profile}@{x.placement_value} on {x.gpuUUID} ({x.reason})" for x in leftovers[:8]
                ),
            )
        else:
            log.info("no leftover instances: %s removed", LEFTOVERS)
        return True
