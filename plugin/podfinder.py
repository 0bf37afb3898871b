"""Finding the pod kubelet is allocating for (kubelet's Allocate does not say which pod it is).

As HAMi does: the node lock annotation `hami.io/mutex.lock` (`<time>,<namespace>,<name>`) names the
pod being bound; otherwise the pending pod on this node in bind-phase `allocating` whose
`hami.io/vgpu-node` is this node. The pure helpers work on plain data.
"""

from __future__ import annotations

from collections.abc import Mapping

from mig.annotations import (
    BIND_PHASE_ALLOCATING,
    DEVICES_TO_ALLOCATE,
    NODE_LOCK,
    AnnotationError,
    ContainerDevice,
    decode_node_lock,
)
from plugin.kube import Kube, PodView


class PodNotFound(LookupError):
    pass


def lock_owner(node_annotations: Mapping[str, str]) -> tuple[str, str] | None:
    """(namespace, name) from the node lock, or None (absent, the legacy bare-timestamp form, or
    malformed: the codec in mig/annotations.py, shared with the scheduler)."""
    held = node_annotations.get(NODE_LOCK)
    return decode_node_lock(held).owner if held else None


def next_container(pod: PodView) -> tuple[int, list[ContainerDevice]] | None:
    """The first container entry of devices-to-allocate that still has devices (init containers first)."""
    return pod.reservation.next_container()


def is_allocating_here(pod: PodView, node_name: str) -> bool:
    if not pod.active or not pod.reservation.node or pod.reservation.node != node_name:
        return False
    if pod.reservation.bind_phase != BIND_PHASE_ALLOCATING:
        return False
    try:
        return next_container(pod) is not None
    except AnnotationError:
        return True  # it is ours; Allocate reports the bad annotation instead of "not found"


def pick_pending(pods: list[PodView], node_name: str) -> PodView | None:
    candidates = [p for p in pods if p.phase == "Pending" and is_allocating_here(p, node_name)]
    return candidates[0] if candidates else None


class PodFinder:
    def __init__(self, kube: Kube):
        self.kube = kube

    def find(self) -> PodView:
        """The pod being allocated; raises PodNotFound, or KubeError when the API fails."""
        node_name = self.kube.node_name
        owner = lock_owner(self.kube.get_node().annotations)
        if owner is not None:
            pod = self.kube.get_pod(*owner)
            if pod is not None and is_allocating_here(pod, node_name):
                return pod
        pod = pick_pending(self.kube.list_node_pods(), node_name)
        if pod is None:
            raise PodNotFound(
                f"no binding pod found on node {node_name}: no pod in bind-phase allocating with "
                f"devices left in {DEVICES_TO_ALLOCATE}"
            )
        return pod
