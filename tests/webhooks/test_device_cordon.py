"""An operator closes single GPUs to new pods with HAMi's node annotation `hami.io/device-cordon`
(comma-separated GPU UUIDs): the scheduler reserves nothing new there and says why, while pods
already on those GPUs keep their reservations."""

from __future__ import annotations

import json

from kubernetes import client
from waiting_testkit import eventually
from webhooks_testkit import gpu_pod, node

from mig.annotations import DEVICE_CORDON, DEVICES_ALLOCATED, MAX_CORDON_TEXT, MIG_ALLOCATIONS, VGPU_NODE
from mig.placement.request import ContainerRequest, PodRequest
from mig.types import Placement
from webhooks.fleet import Fleet


def cordoned(value, gpus: int = 2) -> dict:
    doc = node("n1", "A100-SXM4-40GB", gpus=gpus)
    doc["metadata"]["annotations"][DEVICE_CORDON] = value
    return doc


def plan_1g(fleet: Fleet):
    return fleet.index.plan(PodRequest.from_annotations([ContainerRequest(1, 4000)]))


def holder_on(gpu: str, start: int) -> dict:
    pod = gpu_pod("holder")
    reserved = [
        {
            "containerIndex": 0,
            "deviceIndex": 0,
            "gpuUUID": gpu,
            "profile": "1g.5gb",
            "placement": {"start": start, "size": 1},
        }
    ]
    pod["metadata"].update(
        uid="holder-uid",
        annotations={
            VGPU_NODE: "n1",
            MIG_ALLOCATIONS: json.dumps(reserved),
            DEVICES_ALLOCATED: f"{gpu},NVIDIA,4864,14:;",
        },
    )
    pod["status"] = {"phase": "Running"}
    return pod


def test_a_cordoned_gpu_gets_no_new_pod_while_its_uncordoned_sibling_does():
    fleet = Fleet()
    fleet.set_node(cordoned(" GPU-n1-0 ,, "))  # stray blanks and commas are skipped, as HAMi does

    plan = plan_1g(fleet)

    assert [d.gpu_uuid for d in plan.devices] == ["GPU-n1-1"]


def test_a_node_whose_gpus_are_all_cordoned_refuses_saying_so_and_how_to_uncordon():
    fleet = Fleet()
    fleet.set_node(cordoned("GPU-n1-0,GPU-n1-1"))

    refusal = plan_1g(fleet)

    assert refusal.fits is False
    assert refusal.node_code("n1") == "cordoned"
    text = refusal.node_message("n1")
    assert "GPU GPU-n1-0: GPU is cordoned" in text and "GPU GPU-n1-1: GPU is cordoned" in text
    assert "remove the UUID from that list to uncordon" in text and DEVICE_CORDON in text


def test_a_pod_already_on_a_cordoned_gpu_keeps_its_reservation_and_its_slices_stay_taken():
    fleet = Fleet()
    fleet.set_node(cordoned("GPU-n1-0", gpus=1))
    fleet.set_pod(holder_on("GPU-n1-0", 6))

    [(usage, allocation)] = fleet.occupancy("n1").holders["GPU-n1-0"]
    assert usage.name == "holder" and allocation.placement_value == Placement(6, 1)
    assert plan_1g(fleet).fits is False

    fleet.set_node(node("n1", "A100-SXM4-40GB"))  # uncordoned: the cordon annotation is gone
    [device] = plan_1g(fleet).devices
    assert device.gpu_uuid == "GPU-n1-0" and device.placement != Placement(6, 1)


def test_an_oversized_or_non_text_cordon_list_closes_the_node_with_a_reason_instead_of_crashing():
    for value in ("GPU-n1-1," * (MAX_CORDON_TEXT // 9 + 1), {"GPU-n1-0": True}, ["GPU-n1-0"], 7):
        fleet = Fleet()
        fleet.set_node(cordoned(value))

        refusal = plan_1g(fleet)

        assert refusal.fits is False, value
        assert "node cordon list unreadable" in refusal.node_message("n1")
        assert DEVICE_CORDON in refusal.node_message("n1")
        assert len(refusal.node_message("n1")) <= 1100


def test_an_empty_cordon_list_closes_nothing():
    for value in ("", " , ,", None):
        fleet = Fleet()
        fleet.set_node(cordoned(value, gpus=1))
        assert plan_1g(fleet).fits, value


def test_cordoning_a_gpu_on_a_live_node_reaches_the_extenders_reply(apiserver, service, extender):
    apiserver.create(node("n1", "A100-SXM4-40GB"))
    assert eventually(lambda: service.fleet.occupancy("n1") is not None)
    core = client.CoreV1Api(apiserver.api_client("admin"))
    core.patch_node("n1", {"metadata": {"annotations": {DEVICE_CORDON: "GPU-n1-0"}}})
    assert eventually(lambda: service.fleet.occupancy("n1").gpus[0].cordoned)
    pod = apiserver.create(gpu_pod("p1", memory=4000))
    assert eventually(lambda: service.cache.pod("team", "p1") is not None)

    out = extender.post("/filter", json={"Pod": pod, "Nodes": None, "NodeNames": ["n1"]}).json()

    assert out["NodeNames"] == []
    assert "n1/GPU-n1-0: GPU is cordoned" in out["FailedNodes"]["n1"]
