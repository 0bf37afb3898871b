"""A node whose device plugin is not serving (kubelet counts none of its GPUs: allocatable 0, as it
sets the moment the plugin's socket goes) gets no pod from the extender, which says why in the
pod's FailedScheduling and FilteringFailed, and takes the node back once kubelet counts its GPUs
again: a pod bound there would only fail its admission ("requested number of devices unavailable"),
lost to its user if it is a bare pod or a Job's."""

from __future__ import annotations

import json

from kubernetes import client
from waiting_testkit import eventually
from webhooks_testkit import gpu_pod, node

from webhooks.refusal import DOWN_TEXT

RESOURCE = "nvidia.com/gpu"


def counted(doc: dict, gpus: int) -> dict:
    doc["status"]["allocatable"][RESOURCE] = str(gpus)
    doc["status"]["capacity"][RESOURCE] = "7"
    return doc


def set_allocatable(apiserver, name: str, gpus: int) -> None:
    core = client.CoreV1Api(apiserver.api_client("admin"))
    core.patch_node_status(name, {"status": {"allocatable": {RESOURCE: str(gpus)}}})


def filtering_failed(apiserver) -> list[str]:
    core = client.CoreV1Api(apiserver.api_client("admin"))
    items = json.loads(core.list_namespaced_event("team", _preload_content=False).data)["items"]
    return [e["message"] for e in items if e["reason"] == "FilteringFailed"]


def test_a_node_whose_plugin_is_not_serving_gets_no_pod_until_kubelet_counts_its_gpus_again(
    apiserver, service, extender
):
    apiserver.create(counted(node("n0", "A100-SXM4-40GB"), 7))
    assert eventually(lambda: service.fleet.occupancy("n0") is not None)
    pod = apiserver.create(gpu_pod("p", memory=4000))
    assert eventually(lambda: service.cache.pod("team", "p") is not None)

    set_allocatable(apiserver, "n0", 0)  # the plugin died: kubelet's next node status says so
    assert eventually(lambda: service.fleet.not_serving("n0", RESOURCE))
    refused = extender.post("/filter", json={"Pod": pod, "Nodes": None, "NodeNames": ["n0"]}).json()

    assert refused["NodeNames"] == [] and refused["FailedNodes"] == {"n0": DOWN_TEXT}
    assert eventually(
        lambda: any("n0 (its device plugin is not serving" in m for m in filtering_failed(apiserver))
    )

    set_allocatable(apiserver, "n0", 7)  # registered again: its GPUs are counted
    assert eventually(lambda: not service.fleet.not_serving("n0", RESOURCE))
    placed = extender.post("/filter", json={"Pod": pod, "Nodes": None, "NodeNames": ["n0"]}).json()
    assert placed["NodeNames"] == ["n0"], placed


def test_a_node_kubelet_no_longer_lists_the_gpus_of_is_left_out_but_one_that_never_did_is_not_judged(service):
    fleet = service.fleet
    fleet.set_node(counted(node("gone", "A100-SXM4-40GB"), 7))
    fleet.set_node(node("gone", "A100-SXM4-40GB"))  # 5 minutes on, kubelet dropped the resource
    fleet.set_node(node("fresh", "A100-SXM4-40GB"))  # no status of the resource ever written

    assert "no longer lists" in fleet.not_serving("gone", RESOURCE)
    assert fleet.not_serving("fresh", RESOURCE) == ""
