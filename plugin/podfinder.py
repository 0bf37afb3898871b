"""Finding the pod kubelet is allocating for (kubelet's Allocate does not say which pod it is).

As HAMi does: the node lock annotation `hami.io/mutex.lock` (`<time>,<namespace>,<name>`) names the
pod being bound; otherwise the pending pod on this node in bind-phase `allocating` whose
`hami.io/vgpu-node` is this node. The pure helpers work on plain data.

With kubelet's PodResources API (`--pod-resources-socket`), without any lock: the one pod that
kubelet's pod manager lists and that still has reserved containers to allocate. Why that is the
pod of this Allocate, whatever the number of pods bound to the node at once (plugin/podresources.py
for the kubelet facts): kubelet adds a pod to its pod manager just before admitting it and admits
one pod at a time, calling Allocate only inside that admission, for the pod's containers in turn.
So at an Allocate call every listed pod but the one being admitted has finished its admission:
admitted (each of its Allocates returned, and this plugin erased every entry before answering, so
it has none left) or rejected (kubelet made no more Allocate calls for it; until its phase shows
Failed it is a second candidate, and then Allocate waits and, if still two, refuses); pods bound
but not reached yet are not listed. The lock is not read on this path: another binder's lock
cannot misdirect it.
"""

from __future__ import annotations

import time
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
from plugin.podresources import KubeletPods, PodResourcesError

AMBIGUOUS_WAIT_S = 3.0  # how long Allocate waits for kubelet's view to single out one pod
AMBIGUOUS_POLL_S = 0.05


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


def taken_in(pods: list[PodView], listed: set[tuple[str, str]], node_name: str) -> list[PodView]:
    """The pods kubelet's pod manager lists that still have reserved containers to allocate here."""
    return [
        p
        for p in pods
        if p.phase == "Pending" and (p.namespace, p.name) in listed and is_allocating_here(p, node_name)
    ]


class PodFinder:
    def __init__(self, kube: Kube, kubelet_pods: KubeletPods | None = None, wait: float = AMBIGUOUS_WAIT_S):
        self.kube = kube
        self.kubelet_pods = kubelet_pods
        self.wait = wait

    def find(self) -> PodView:
        """The pod being allocated; raises PodNotFound, or KubeError when the API fails."""
        if self.kubelet_pods is not None:
            return self._find_taken_in(self.kubelet_pods)
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

    def _find_taken_in(self, kubelet_pods: KubeletPods) -> PodView:
        """The single pod kubelet has taken in with containers left to allocate (module docstring);
        waits up to `wait` seconds for exactly one, never guesses between two."""
        node_name = self.kube.node_name
        deadline = time.monotonic() + self.wait
        while True:
            try:
                listed = kubelet_pods.listed()
            except PodResourcesError as error:
                raise PodNotFound(
                    f"cannot tell which pod kubelet is admitting on {node_name}: {error}"
                ) from None
            found = taken_in(self.kube.list_node_pods(), listed, node_name)
            if len(found) == 1:
                return found[0]
            if time.monotonic() >= deadline:
                if not found:
                    raise PodNotFound(
                        f"no binding pod found on node {node_name}: kubelet's pod manager lists no pod "
                        f"in bind-phase allocating with devices left in {DEVICES_TO_ALLOCATE}"
                    )
                names = ", ".join(sorted(p.ref for p in found)[:8])
                raise PodNotFound(
                    f"cannot tell which pod kubelet is admitting on {node_name}: {len(found)} pods it "
                    f"lists still have devices to allocate ({names}); dynmig never guesses"
                )
            time.sleep(AMBIGUOUS_POLL_S)
