"""Events the device plugin posts on the pod it serves: what it created, what it reclaimed, and why
an Allocate was refused. They show in `kubectl describe pod`, next to kubelet's and the scheduler's.

Posting goes through base.events (aggregated, one background sender, bounded): it never blocks
or fails Allocate or a reclaim pass; what cannot be posted is counted in
`dynmig_plugin_events_dropped_total`.
"""

from __future__ import annotations

from typing import Any, Self

from base.events import EventRecorder, Regarding
from plugin.journal import UNKNOWN, Owner
from plugin.kube import PodView

COMPONENT = "dynmig-device-plugin"
CREATED = "MigInstanceCreated"
RECLAIMED = "MigInstanceReclaimed"
REFUSED = "MigAllocateFailed"
NODE_REFUSED = "MigNodeRefused"
NODE_RESUMED = "MigNodeResumed"


class NodeEvents:
    """A node plugin's event recorder (None: events off), started and stopped with the plugin."""

    component = COMPONENT

    def __init__(self, recorder: EventRecorder | None):
        self.recorder = recorder

    @classmethod
    def for_node(cls, core: Any, node: str, dropped: Any = None) -> Self:
        """Events from this node's plugin (reportingInstance and source.host: the node, as kubelet's)."""
        return cls(EventRecorder(core, cls.component, instance=node, host=node, dropped=dropped))

    def start(self) -> None:
        if self.recorder is not None:
            self.recorder.start()

    def stop(self) -> None:
        if self.recorder is not None:
            self.recorder.stop()


class PodEvents(NodeEvents):
    def created(self, owner: Owner | None, what: str, mig_uuid: str, gi: int, ci: int) -> None:
        """`what`: profile@start:size on GPU-…"""
        if owner is not None:
            self._post(
                owner,
                "Normal",
                CREATED,
                f"created MIG instance {what} (GI {gi}, CI {ci}): {mig_uuid}, for container "
                f"{owner.container_index} device {owner.device_index}",
                distinct=what,
            )

    def reclaimed(self, owner: Owner | None, what: str, mig_uuid: str) -> None:
        if owner is not None:
            message = f"destroyed MIG instance {what} ({mig_uuid}): the pod ended"
            self._post(owner, "Normal", RECLAIMED, message, distinct=what)

    def refused(self, pod: PodView, reason: str, message: str) -> None:
        self._record(
            Regarding("Pod", pod.namespace, pod.name, pod.uid),
            "Warning",
            REFUSED,
            f"Allocate refused ({reason}): {message}",
            distinct=reason,
        )

    def node(self, node: str, refused: bool, message: str) -> None:
        """On the Node (kubectl describe node): the plugin leaves its GPUs alone, or serves them again."""
        if self.recorder is not None:
            reason, type_ = (NODE_REFUSED, "Warning") if refused else (NODE_RESUMED, "Normal")
            self.recorder.record_about(Regarding("Node", "", node), type_, reason, message, reason)

    def _post(self, owner: Owner, type_: str, reason: str, message: str, distinct: str) -> None:
        uid = owner.pod_uid if owner.pod_uid != UNKNOWN else ""
        self._record(Regarding("Pod", owner.namespace, owner.name, uid), type_, reason, message, distinct)

    def _record(self, regarding: Regarding, type_: str, reason: str, message: str, distinct: str) -> None:
        # an owner no pod stands behind (the warm pool's, or one whose pod was never known) gets no event
        if (
            self.recorder is not None
            and regarding.name not in ("", UNKNOWN)
            and regarding.namespace not in ("", UNKNOWN)
        ):
            self.recorder.record_about(regarding, type_, reason, message, distinct)
