"""The simulated kube-scheduler allocates ResourceClaims as kube-scheduler's DynamicResources plugin
does: claims gathered (a pod waits until they exist), the structured allocator run per node over
the ResourceSlices and DeviceClasses, devices of other claims counted as in use, the allocation and
reservation written through /status before the Binding, upstream's words when it cannot. The
ResourceClaim controller runs beside it, as kube-controller-manager does."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from https_testkit import JsonServer
from kubernetes import client
from sim.dra.claims import ResourceClaimController
from sim.scheduler import Scheduler, parse
from waiting_testkit import wait_for

DRIVER = "gpu.example.com"
NS = "default"
SCHEDULER = "dynmig-scheduler"


def node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def device(name: str, size: str, slices: list[int]) -> dict[str, Any]:
    return {
        "name": name,
        "attributes": {"size": {"string": size}},
        "consumesCounters": [
            {"counterSet": "gpu-0", "counters": {f"slice-{i}": {"value": "1"} for i in slices}}
        ],
    }


def pool(node_name: str, devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A node's pool as a partitionable driver publishes it: one GPU's counters (two memory
    slices), then its devices, each consuming the slices it covers."""
    spec = {
        "driver": DRIVER,
        "nodeName": node_name,
        "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 2},
    }
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node_name}-counters"},
            "spec": {
                **spec,
                "sharedCounters": [
                    {"name": "gpu-0", "counters": {"slice-0": {"value": "1"}, "slice-1": {"value": "1"}}}
                ],
            },
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node_name}-devices"},
            "spec": {**spec, "devices": devices},
        },
    ]


HALVES = [device("half-0", "half", [0]), device("half-1", "half", [1]), device("whole", "whole", [0, 1])]


def device_class(name: str = DRIVER) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
    }


def claim_spec(selector: str | None = None, device_class_name: str = DRIVER) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class_name}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}


def template(name: str, selector: str | None = None, device_class_name: str = DRIVER) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"spec": claim_spec(selector, device_class_name)},
    }


def pod(
    name: str, template_name: str = "any-gpu", claim_name: str | None = None, **extra: Any
) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": "gpu"}
    entry["resourceClaimName" if claim_name else "resourceClaimTemplateName"] = claim_name or template_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "schedulerName": SCHEDULER,
            "resourceClaims": [entry],
            "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "gpu"}], **extra}}],
        },
    }


def config(extenders: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": SCHEDULER}],
        "extenders": extenders or [],
    }


@pytest.fixture
def world(apiserver) -> Iterator[Callable[..., Scheduler]]:
    """world(nodes, devices, extenders=None): nodes each publishing a pool of `devices`, the device
    class, the `any-gpu` template, the ResourceClaim controller and the scheduler."""
    started: list[Any] = []

    def make(
        nodes: tuple[str, ...] = ("node-1", "node-2"),
        devices: list[dict[str, Any]] = HALVES,
        extenders: list[dict[str, Any]] | None = None,
    ) -> Scheduler:
        apiserver.create(device_class())
        apiserver.create(template("any-gpu"))
        for name in nodes:
            apiserver.create(node(name))
            for obj in pool(name, devices):
                apiserver.create(obj)
        started.append(ResourceClaimController(apiserver.api_client("admin"), interval=0.05).start())
        sched = Scheduler(
            parse(config(extenders)),
            apiserver.api_client("kube-scheduler"),
            initial_backoff=0.05,
            max_backoff=0.2,
            seed=1,
        ).start()
        started.append(sched)
        assert sched.wait_synced()
        return sched

    yield make
    for part in reversed(started):
        part.stop()


@pytest.fixture
def core(apiserver) -> client.CoreV1Api:
    return client.CoreV1Api(apiserver.api_client("admin"))


@pytest.fixture
def resource(apiserver) -> client.ResourceV1Api:
    return client.ResourceV1Api(apiserver.api_client("admin"))


def read_pod(core: client.CoreV1Api, name: str) -> dict[str, Any]:
    return json.loads(core.read_namespaced_pod(name, NS, _preload_content=False).data)


def claim_of(core: client.CoreV1Api, resource: client.ResourceV1Api, pod_name: str) -> dict[str, Any]:
    statuses = wait_for(lambda: read_pod(core, pod_name)["status"].get("resourceClaimStatuses"))
    name = statuses[0]["resourceClaimName"]
    return json.loads(resource.read_namespaced_resource_claim(name, NS, _preload_content=False).data)


def bound_to(core: client.CoreV1Api, name: str) -> str:
    return str(wait_for(lambda: read_pod(core, name)["spec"].get("nodeName"), f"{name} bound"))


def devices_of(claim: dict[str, Any]) -> list[str]:
    return [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]]


def failed_scheduling(core: client.CoreV1Api, name: str) -> list[str]:
    items = json.loads(core.list_namespaced_event(NS, _preload_content=False).data)["items"]
    return [
        e["message"]
        for e in items
        if e["reason"] == "FailedScheduling" and e["involvedObject"]["name"] == name
    ]


def scheduled_condition(core: client.CoreV1Api, name: str) -> dict[str, Any] | None:
    for cond in read_pod(core, name)["status"].get("conditions") or []:
        if cond["type"] == "PodScheduled":
            return dict(cond)
    return None


def test_a_pod_with_a_template_claim_gets_an_allocation_on_the_node_it_is_bound_to_and_a_reservation(
    world, apiserver, core, resource
):
    world()
    made = apiserver.create(pod("train"))
    node_name = bound_to(core, "train")
    claim = claim_of(core, resource, "train")
    allocation = claim["status"]["allocation"]
    (result,) = allocation["devices"]["results"]
    assert result == {"request": "gpu", "driver": DRIVER, "pool": node_name, "device": "half-0"}
    assert allocation["nodeSelector"] == {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
        ]
    }
    assert claim["status"]["reservedFor"] == [
        {"resource": "pods", "name": "train", "uid": made["metadata"]["uid"]}
    ]
    assert claim["metadata"]["finalizers"] == ["resource.kubernetes.io/delete-protection"]


def test_two_pods_never_get_devices_sharing_a_counter_and_a_third_waits_with_upstreams_message(
    world, apiserver, core, resource
):
    world(nodes=("node-1",))
    for name in ("a", "b", "c"):
        apiserver.create(pod(name))
    wait_for(lambda: sum(bool(read_pod(core, n)["spec"].get("nodeName")) for n in "abc") == 2, "two bound")
    bound = [n for n in "abc" if read_pod(core, n)["spec"].get("nodeName")]
    (waiting,) = set("abc") - set(bound)
    taken = sorted(d for n in bound for d in devices_of(claim_of(core, resource, n)))
    assert taken == ["half-0", "half-1"]  # never "whole": its memory slices are taken
    message = "0/1 nodes are available: 1 cannot allocate all claims."
    wait_for(lambda: message in failed_scheduling(core, waiting), "the FailedScheduling event")
    cond = wait_for(lambda: scheduled_condition(core, waiting))
    assert cond["status"] == "False" and cond["reason"] == "Unschedulable" and cond["message"] == message
    assert not claim_of(core, resource, waiting)["status"].get("allocation")


def test_a_claim_no_device_satisfies_keeps_the_pod_pending_with_upstreams_message(
    world, apiserver, core, resource
):
    world()
    apiserver.create(template("huge", selector=f'device.attributes["{DRIVER}"].size == "huge"'))
    apiserver.create(pod("train", template_name="huge"))
    message = "0/2 nodes are available: 2 cannot allocate all claims."
    wait_for(lambda: message in failed_scheduling(core, "train"), "the FailedScheduling event")
    assert not read_pod(core, "train")["spec"].get("nodeName")
    assert not claim_of(core, resource, "train")["status"].get("allocation")


def test_a_deleted_pods_claim_is_deallocated_and_its_device_allocated_again(world, apiserver, core, resource):
    world(nodes=("node-1",), devices=[device("whole", "whole", [0, 1])])
    apiserver.create(pod("first"))
    bound_to(core, "first")
    first_claim = claim_of(core, resource, "first")
    apiserver.create(pod("second"))
    wait_for(lambda: failed_scheduling(core, "second"), "second unschedulable while first holds the device")
    core.delete_namespaced_pod("first", NS, grace_period_seconds=0)
    assert bound_to(core, "second") == "node-1"
    assert devices_of(claim_of(core, resource, "second")) == ["whole"]
    gone = first_claim["metadata"]["name"]
    # the generated claim went with its pod
    wait_for(lambda: gone not in [c.metadata.name for c in resource.list_namespaced_resource_claim(NS).items])


def test_a_pod_waits_unattempted_until_its_claim_exists(world, apiserver, core):
    sched = world()
    apiserver.create(pod("train", template_name="later"))
    reason = wait_for(lambda: sched.gated(NS, "train"))
    assert reason == 'pod "default/train": ResourceClaim not created yet'
    # As kube-scheduler's PreEnqueue: no attempt, so no FailedScheduling event and no condition.
    assert failed_scheduling(core, "train") == [] and scheduled_condition(core, "train") is None
    apiserver.create(template("later"))
    bound_to(core, "train")
    assert sched.gated(NS, "train") == ""


def test_a_pod_naming_a_missing_claim_waits_for_it_and_an_allocated_claim_keeps_its_pods_on_its_node(
    world, apiserver, core, resource
):
    sched = world()
    apiserver.create(pod("first", claim_name="shared"))
    assert wait_for(lambda: sched.gated(NS, "first")) == 'could not find ResourceClaim "default/shared"'
    apiserver.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "shared", "namespace": NS},
            "spec": claim_spec(),
        }
    )
    where = bound_to(core, "first")
    for name in ("second", "third"):
        apiserver.create(pod(name, claim_name="shared"))
        assert bound_to(core, name) == where
    claim = json.loads(resource.read_namespaced_resource_claim("shared", NS, _preload_content=False).data)
    assert sorted(r["name"] for r in claim["status"]["reservedFor"]) == ["first", "second", "third"]
    assert len(claim["status"]["allocation"]["devices"]["results"]) == 1


def test_a_request_for_an_unknown_device_class_is_unschedulable_as_upstream_words_it(world, apiserver, core):
    world()
    apiserver.create(template("nowhere", device_class_name="no-such-class"))
    apiserver.create(pod("train", template_name="nowhere"))
    message = "0/2 nodes are available: request gpu: device class no-such-class does not exist."
    wait_for(lambda: message in failed_scheduling(core, "train"), "the FailedScheduling event")
    assert scheduled_condition(core, "train")["reason"] == "Unschedulable"


def test_a_selector_failing_at_runtime_aborts_the_attempt_as_upstream_does(world, apiserver, core, resource):
    world()
    apiserver.create(template("broken", selector=f'device.attributes["{DRIVER}"].missing == 1'))
    apiserver.create(pod("train", template_name="broken"))
    claim_name = claim_of(core, resource, "train")["metadata"]["name"]
    start = f'running "DynamicResources" filter plugin: claim default/{claim_name}: selector #0: CEL runtime error:'
    wait_for(
        lambda: any(m.startswith(start) for m in failed_scheduling(core, "train")),
        "the FailedScheduling event",
    )
    assert wait_for(lambda: scheduled_condition(core, "train"))["reason"] == "SchedulerError"
    assert not read_pod(core, "train")["spec"].get("nodeName")
    assert not claim_of(core, resource, "train")["status"].get("allocation")


def test_an_extender_still_filters_a_pod_with_claims_and_the_allocation_follows_its_choice(
    world, apiserver, core, resource
):
    calls: list[dict[str, Any]] = []

    def keep_node_2(path: str, body: dict[str, Any]) -> dict[str, Any]:
        calls.append(body)
        return {"NodeNames": ["node-2"], "FailedNodes": {"node-1": "not this one"}, "Error": ""}

    ext = JsonServer(keep_node_2)
    try:
        world(
            extenders=[
                {
                    "urlPrefix": f"http://127.0.0.1:{ext.port}",
                    "filterVerb": "filter",
                    "nodeCacheCapable": True,
                    "managedResources": [{"name": "nvidia.com/gpumem", "ignoredByScheduler": True}],
                }
            ]
        )
        apiserver.create(pod("train", limits={"nvidia.com/gpumem": "8000"}))
        assert bound_to(core, "train") == "node-2"
        assert (
            claim_of(core, resource, "train")["status"]["allocation"]["devices"]["results"][0]["pool"]
            == "node-2"
        )
        assert calls and calls[0]["Pod"]["spec"]["resourceClaims"] == [
            {"name": "gpu", "resourceClaimTemplateName": "any-gpu"}
        ]
    finally:
        ext.stop()


def test_an_allocation_with_a_malformed_node_selector_aborts_the_attempt_naming_the_field(
    world, apiserver, core, resource
):
    world()
    made = apiserver.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "odd", "namespace": NS},
            "spec": claim_spec(),
        }
    )
    made["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpu", "driver": DRIVER, "pool": "node-1", "device": "half-0"}]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "Near"}]}]
            },
        }
    }
    resource.replace_namespaced_resource_claim_status("odd", NS, made, _preload_content=False)
    apiserver.create(pod("train", claim_name="odd"))
    want = (
        "resource claim default/odd: status.allocation.nodeSelector.nodeSelectorTerms[0]"
        '.matchExpressions[0].operator: Unsupported value: "Near"'
    )
    wait_for(lambda: want in failed_scheduling(core, "train"), "the FailedScheduling event")
    assert scheduled_condition(core, "train")["reason"] == "SchedulerError"
    assert not read_pod(core, "train")["spec"].get("nodeName")


def test_an_allocation_selecting_nodes_by_label_keeps_the_pod_on_a_matching_node(
    world, apiserver, core, resource
):
    world()
    made = apiserver.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "by-label", "namespace": NS},
            "spec": claim_spec(),
        }
    )
    made["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpu", "driver": DRIVER, "pool": "node-2", "device": "half-0"}]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-2"]}
                        ]
                    }
                ]
            },
        }
    }
    resource.replace_namespaced_resource_claim_status("by-label", NS, made, _preload_content=False)
    apiserver.create(pod("train", claim_name="by-label"))
    assert bound_to(core, "train") == "node-2"
    claim = json.loads(resource.read_namespaced_resource_claim("by-label", NS, _preload_content=False).data)
    assert [r["name"] for r in claim["status"]["reservedFor"]] == ["train"]
    assert devices_of(claim) == ["half-0"]  # an allocated claim is only reserved, never reallocated


def test_a_failed_binding_gives_the_reservation_back_and_the_retry_keeps_the_allocation(
    world, apiserver, core, resource
):
    binds: list[dict[str, Any]] = []
    admin = client.CoreV1Api(apiserver.api_client("admin"))

    between: list[dict[str, Any]] = []  # the claim as the retry's filter finds it

    def answer(path: str, body: dict[str, Any]) -> dict[str, Any]:
        if path == "/filter":
            if binds:
                listed = resource.list_namespaced_resource_claim(NS, _preload_content=False)
                between.extend(json.loads(listed.data)["items"])
            return {"NodeNames": body["NodeNames"], "FailedNodes": {}, "Error": ""}
        binds.append(body)
        if len(binds) == 1:
            return {"Error": "node is busy, try again"}
        target = {"kind": "Node", "name": body["Node"]}
        admin.create_namespaced_pod_binding(
            body["PodName"],
            NS,
            {"metadata": {"name": body["PodName"]}, "target": target},
            _preload_content=False,
        )
        return {"Error": ""}

    ext = JsonServer(answer)
    try:
        world(
            extenders=[
                {
                    "urlPrefix": f"http://127.0.0.1:{ext.port}",
                    "filterVerb": "filter",
                    "bindVerb": "bind",
                    "nodeCacheCapable": True,
                    "managedResources": [{"name": "nvidia.com/gpumem", "ignoredByScheduler": True}],
                }
            ]
        )
        made = apiserver.create(pod("train", limits={"nvidia.com/gpumem": "8000"}))
        where = bound_to(core, "train")
        assert len(binds) == 2 and binds[0]["Node"] == binds[1]["Node"] == where
        assert any("node is busy" in m for m in failed_scheduling(core, "train"))
        # Unreserve took the pod out of reservedFor; the allocation stayed, restricting the retry.
        assert between and not between[0]["status"].get("reservedFor")
        assert between[0]["status"]["allocation"]["devices"]["results"][0]["pool"] == where
        claim = claim_of(core, resource, "train")
        assert claim["status"]["allocation"]["devices"]["results"][0]["pool"] == where
        assert claim["status"]["reservedFor"] == [
            {"resource": "pods", "name": "train", "uid": made["metadata"]["uid"]}
        ]
    finally:
        ext.stop()


def test_a_pod_claim_naming_neither_a_claim_nor_a_template_is_held_naming_the_field(world, apiserver, core):
    sched = world()
    odd = pod("odd")
    odd["spec"]["resourceClaims"] = [{"name": "gpu"}]
    apiserver.create(odd)
    apiserver.create(pod("train"))
    bound_to(core, "train")
    why = wait_for(lambda: sched.gated(NS, "odd"), "odd held")
    assert why == 'pod "default/odd", spec.resourceClaim "gpu": none of the supported fields are set'
    assert not read_pod(core, "odd")["spec"].get("nodeName")
