"""README "Migrating from HAMi", run against the whole lab: a pod that names HAMi's scheduler is left
alone by dynmig's webhook and scheduler, and once HAMi's scheduler has written its reservation (in
HAMi's annotations) and bound the pod, dynmig's device plugin creates exactly that MIG instance.

In the lab the stand-in for HAMi's scheduler is dynmig's scheduler identity, as in the
bad-annotation scenario: on a cluster, `allocationWriters` lets HAMi's own service accounts write
the annotation during the handover (tests/charts checks that rule in all three places)."""

from __future__ import annotations

import json

from kubernetes import client
from lab.kit import Kit, gpu_pod

from mig.annotations import (
    BIND_PHASE,
    BIND_TIME,
    DEVICES_ALLOCATED,
    DEVICES_TO_ALLOCATE,
    MIG_ALLOCATIONS,
    VGPU_NODE,
    VGPU_TIME,
    ContainerDevice,
    MigAllocation,
    encode_allocations,
    encode_devices,
)


def hami_reservation(node: str, gpu_uuid: str, profile: str, start: int, size: int) -> dict[str, str]:
    """The annotations HAMi v2.10's scheduler writes at filter and bind time for one MIG device."""
    devices = encode_devices([[ContainerDevice(gpu_uuid, "NVIDIA", 4864, 14)]])
    allocation = MigAllocation.model_validate(
        {
            "containerIndex": 0,
            "deviceIndex": 0,
            "gpuUUID": gpu_uuid,
            "profile": profile,
            "placement": {"start": start, "size": size},
        }
    )
    return {
        VGPU_NODE: node,
        VGPU_TIME: "1767225600",
        DEVICES_TO_ALLOCATE: devices,
        DEVICES_ALLOCATED: devices,
        MIG_ALLOCATIONS: encode_allocations([allocation]) or "",
        BIND_PHASE: "allocating",
        BIND_TIME: "1767225600",
    }


def test_a_pod_scheduled_by_hami_is_run_by_dynmigs_device_plugin_at_hamis_placement(lab, kit):
    (node, gpu), *_ = kit.gpus_of_model("A100")
    pod = gpu_pod("from-hami", 4000)
    pod["spec"]["schedulerName"] = "hami-scheduler"
    kit.create(pod)
    created = kit.pod("from-hami")
    assert created["spec"]["schedulerName"] == "hami-scheduler"  # dynmig's webhook leaves it alone
    assert not created["spec"].get("nodeName")  # and dynmig's scheduler does not schedule it

    hami = Kit(lab, identity="scheduler")
    hami.annotate("from-hami", hami_reservation(node, gpu.uuid, "1g.5gb", start=6, size=1))
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "from-hami", "namespace": "default", "uid": created["metadata"]["uid"]},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    lab.core("scheduler").create_namespaced_pod_binding(
        "from-hami", "default", binding, _preload_content=False
    )

    kit.wait_phase("from-hami", "Running", timeout=60)
    (done,) = kit.allocations("from-hami")
    assert (done.gpuUUID, done.profile, done.placement_value.start, done.placement_value.size) == (
        gpu.uuid,
        "1g.5gb",
        6,
        1,
    )
    assert done.migUUID and done.gpuInstanceID is not None and done.computeInstanceID is not None
    (instance,) = [i for i in kit.instances(node) if i.mig_uuid == done.migUUID]
    assert (instance.gpu_uuid, instance.profile, instance.start, instance.size) == (gpu.uuid, "1g.5gb", 6, 1)
    assert kit.pod("from-hami")["metadata"]["annotations"][BIND_PHASE] == "success"


def test_alice_cannot_forge_a_hami_reservation_in_the_lab(lab, kit):
    (node, gpu), *_ = kit.gpus_of_model("A100")
    pod = gpu_pod("forged", 4000)
    pod["spec"]["schedulerName"] = "hami-scheduler"
    kit.create(pod)
    alice = client.CoreV1Api(lab.api_client("alice"))
    patch = {"metadata": {"annotations": hami_reservation(node, gpu.uuid, "1g.5gb", start=0, size=1)}}
    try:
        alice.patch_namespaced_pod("forged", "default", patch)
        denied = ""
    except client.ApiException as error:
        denied = json.loads(error.body or "{}").get("message", "")
    assert MIG_ALLOCATIONS in denied
