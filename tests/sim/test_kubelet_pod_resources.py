"""The simulated kubelet's PodResources List, as kubelet's: a pod is listed from just before its
admission (HandlePodAdditions adds it to the pod manager before canAdmitPod), a container's devices
only once its Allocate has returned (the device manager records podDevices after the plugin's
answer), pods kubelet has not reached are not listed, and a pod stays listed until it is gone."""

from __future__ import annotations

import grpc
import pytest
from kubelet_testkit import TinyPlugin
from sim.kubelet import SimulatedKubelet

from plugin.api import podresources_pb2 as prpb
from plugin.api import podresources_pb2_grpc as prrpc
from plugin.podresources import KubeletPods

RESOURCE = "example.com/gpu"


def listing(kubelet: SimulatedKubelet) -> dict[tuple[str, str], dict[str, list[str]]]:
    with grpc.insecure_channel(f"unix://{kubelet.pod_resources_path}") as channel:
        answer = prrpc.PodResourcesListerStub(channel).List(prpb.ListPodResourcesRequest(), timeout=5)
    return {
        (p.namespace, p.name): {c.name: [d for cd in c.devices for d in cd.device_ids] for c in p.containers}
        for p in answer.pod_resources
    }


class Peeking(TinyPlugin):
    """Looks at PodResources from inside each Allocate, as dynmig's plugin does."""

    def __init__(self, directory, kubelet: SimulatedKubelet, **kwargs):
        super().__init__(directory, **kwargs)
        self.kubelet = kubelet
        self.seen: list[dict] = []

    def Allocate(self, request, context):
        self.seen.append(listing(self.kubelet))
        return super().Allocate(request, context)


@pytest.fixture
def kubelet(socket_dir):
    k = SimulatedKubelet(socket_dir, dial_timeout=0.5).start()
    yield k
    k.stop()


def test_inside_allocate_the_pod_being_admitted_is_listed_without_devices_and_pods_not_reached_are_not(
    kubelet, socket_dir
):
    plugin = Peeking(socket_dir, kubelet, count=4).start()
    try:
        kubelet.wait_for_devices(RESOURCE, healthy=4)
        first = kubelet.allocate(RESOURCE, [("main", 1), ("side", 1)], pod_uid="u1", pod_ref=("ns", "first"))
        assert first.ok, first.error
        # in the first container's Allocate: the pod is listed, no device recorded yet
        assert plugin.seen[0] == {("ns", "first"): {}}
        # in the second container's: the first container's devices are recorded, its own not yet
        assert plugin.seen[1] == {("ns", "first"): {"main": first.containers[0].devices}}
        after = listing(kubelet)
        assert after[("ns", "first")] == {
            "main": first.containers[0].devices,
            "side": first.containers[1].devices,
        }

        second = kubelet.allocate(RESOURCE, [("main", 1)], pod_uid="u2", pod_ref=("ns", "second"))
        assert second.ok
        assert set(plugin.seen[2]) == {("ns", "first"), ("ns", "second")}
        assert plugin.seen[2][("ns", "second")] == {}

        kubelet.release("u1")  # its containers ended: it stays listed until it is gone from the API
        assert ("ns", "first") in listing(kubelet)
        kubelet.forget("u1")
        assert set(listing(kubelet)) == {("ns", "second")}
        assert KubeletPods(str(kubelet.pod_resources_path)).listed() == {("ns", "second")}
    finally:
        plugin.stop()


def test_a_pod_kubelet_rejected_before_the_device_manager_is_listed_with_no_devices(kubelet):
    kubelet.take_in("u9", "ns", "rejected")
    assert listing(kubelet) == {("ns", "rejected"): {}}
