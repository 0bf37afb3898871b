"""The simulated ResourceClaim controller does what kube-controller-manager's does for pods with
ResourceClaims: claims made from templates and recorded in the pod's status, reservations released
when a pod is done or gone, a claim no pod reserves deallocated, generated claims of gone pods
deleted. Run against the simulated API server, as the lab runs it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from sim.dra.claims import ResourceClaimController, generate_name
from waiting_testkit import wait_for

DRIVER = "gpu.example.com"
NS = "default"


def template(name: str = "one-gpu", device_class: str = DRIVER) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "metadata": {"labels": {"team": "ml"}, "annotations": {"note": "from the template"}},
            "spec": {
                "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class}}]}
            },
        },
    }


def pod(name: str, *, template_name: str | None = "one-gpu", claim_name: str | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": "gpu"}
    if claim_name:
        entry["resourceClaimName"] = claim_name
    else:
        entry["resourceClaimTemplateName"] = template_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "schedulerName": "nobody",  # no scheduler here: the tests play its part
            "resourceClaims": [entry],
            "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}],
        },
    }


ALLOCATION = {
    "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "node-1", "device": "gpu-0"}]},
    "nodeSelector": {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}
        ]
    },
}


@pytest.fixture
def controller(apiserver) -> Iterator[ResourceClaimController]:
    ctl = ResourceClaimController(apiserver.api_client("admin"), interval=0.05).start()
    yield ctl
    ctl.stop()


@pytest.fixture
def core(apiserver) -> client.CoreV1Api:
    return client.CoreV1Api(apiserver.api_client("admin"))


@pytest.fixture
def resource(apiserver) -> client.ResourceV1Api:
    return client.ResourceV1Api(apiserver.api_client("admin"))


def _json(resp: Any) -> Any:
    return json.loads(resp.data)


def claims(resource: client.ResourceV1Api) -> list[dict[str, Any]]:
    return _json(resource.list_namespaced_resource_claim(NS, _preload_content=False))["items"]


def read_pod(core: client.CoreV1Api, name: str) -> dict[str, Any]:
    return _json(core.read_namespaced_pod(name, NS, _preload_content=False))


def allocate_and_reserve(
    resource: client.ResourceV1Api, claim: dict[str, Any], *pods: dict[str, Any]
) -> None:
    """What kube-scheduler's PreBind writes: the finalizer, then allocation and reservedFor."""
    claim["metadata"].setdefault("finalizers", []).append("resource.kubernetes.io/delete-protection")
    claim = _json(
        resource.replace_namespaced_resource_claim(
            claim["metadata"]["name"], NS, claim, _preload_content=False
        )
    )
    claim["status"] = {
        "allocation": ALLOCATION,
        "reservedFor": [
            {"resource": "pods", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]} for p in pods
        ],
    }
    resource.replace_namespaced_resource_claim_status(
        claim["metadata"]["name"], NS, claim, _preload_content=False
    )


def events(core: client.CoreV1Api, reason: str) -> list[dict[str, Any]]:
    items = _json(core.list_namespaced_event(NS, _preload_content=False))["items"]
    return [e for e in items if e["reason"] == reason]


def test_a_pod_gets_a_claim_made_from_its_template_and_recorded_in_its_status(
    apiserver, controller, core, resource
):
    apiserver.create(template())
    made = apiserver.create(pod("train"))
    (claim,) = wait_for(lambda: claims(resource))
    meta = claim["metadata"]
    assert meta["name"].startswith("train-gpu-") and meta["generateName"] == "train-gpu-"
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "train",
            "uid": made["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert meta["annotations"] == {
        "note": "from the template",
        "resource.kubernetes.io/pod-claim-name": "gpu",
    }
    assert meta["labels"] == {"team": "ml"}
    assert claim["spec"] == template()["spec"]["spec"]
    statuses = wait_for(lambda: read_pod(core, "train")["status"].get("resourceClaimStatuses"))
    assert statuses == [{"name": "gpu", "resourceClaimName": meta["name"]}]
    # Later passes find the claim recorded in the pod's status: no second claim is ever made.
    wait_for(lambda: controller.sync() or True)
    assert len(claims(resource)) == 1


def test_a_long_pod_name_and_claim_name_are_both_cut_in_proportion():
    name = generate_name("p" * 60, "c" * 20)
    assert name == "p" * 41 + "-" + "c" * 13  # 60·57//82 and 20·57//82, as Go divides
    assert generate_name("train", "gpu") == "train-gpu-"


def test_a_missing_template_is_a_warning_event_on_the_pod_and_the_claim_is_made_once_it_exists(
    apiserver, controller, core, resource
):
    apiserver.create(pod("train", template_name="later"))
    (event,) = wait_for(lambda: events(core, "FailedResourceClaimCreation"))
    assert event["type"] == "Warning" and event["involvedObject"]["name"] == "train"
    assert event["message"] == (
        'PodResourceClaim gpu: resource claim template "later": '
        'resourceclaimtemplate.resource.k8s.io "later" not found'
    )
    assert claims(resource) == []
    apiserver.create(template("later"))
    wait_for(lambda: claims(resource))
    assert len(events(core, "FailedResourceClaimCreation")) == 1  # reported once, not every pass


def test_a_finished_pod_releases_its_claim_which_is_deallocated_and_deleted(
    apiserver, controller, core, resource
):
    apiserver.create(template())
    made = apiserver.create(pod("train"))
    (claim,) = wait_for(lambda: claims(resource))
    allocate_and_reserve(resource, claim, made)
    current = read_pod(core, "train")
    current["status"]["phase"] = "Succeeded"
    core.replace_namespaced_pod_status("train", NS, current, _preload_content=False)
    wait_for(lambda: claims(resource) == [], "the claim deleted")


def test_a_claim_is_kept_allocated_while_a_pod_reserving_it_may_still_run(
    apiserver, controller, core, resource
):
    apiserver.create(template())
    made = apiserver.create(pod("train"))
    (claim,) = wait_for(lambda: claims(resource))
    allocate_and_reserve(resource, claim, made)
    for _ in range(5):
        controller.sync()
    (kept,) = claims(resource)
    assert kept["status"]["allocation"] == ALLOCATION
    assert [r["uid"] for r in kept["status"]["reservedFor"]] == [made["metadata"]["uid"]]


def test_a_claim_shared_by_two_pods_is_deallocated_only_when_the_last_one_is_gone(
    apiserver, controller, core, resource
):
    apiserver.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "shared", "namespace": NS},
            "spec": template()["spec"]["spec"],
        }
    )
    first = apiserver.create(pod("first", claim_name="shared"))
    second = apiserver.create(pod("second", claim_name="shared"))
    (claim,) = claims(resource)
    allocate_and_reserve(resource, claim, first, second)
    core.delete_namespaced_pod("first", NS, grace_period_seconds=0)
    wait_for(lambda: len(claims(resource)[0]["status"]["reservedFor"]) == 1, "one reservation left")
    (claim,) = claims(resource)
    assert claim["status"]["reservedFor"][0]["uid"] == second["metadata"]["uid"]
    assert claim["status"]["allocation"] == ALLOCATION
    core.delete_namespaced_pod("second", NS, grace_period_seconds=0)
    released = wait_for(lambda: [c for c in claims(resource) if not c["metadata"].get("finalizers")])
    # A claim the user made is deallocated but never deleted by the controller.
    assert released[0]["metadata"]["name"] == "shared"
    assert not released[0]["status"].get("allocation") and not released[0]["status"].get("reservedFor")


def test_the_generated_claim_of_a_deleted_pod_is_deleted_too(apiserver, controller, core, resource):
    apiserver.create(template())
    apiserver.create(pod("train"))
    wait_for(lambda: claims(resource))
    core.delete_namespaced_pod("train", NS, grace_period_seconds=0)
    wait_for(lambda: claims(resource) == [], "the claim garbage-collected")


def test_a_claim_being_deleted_with_no_consumer_loses_its_allocation_and_finalizer(
    apiserver, controller, core, resource
):
    apiserver.create(template())
    made = apiserver.create(pod("train"))
    (claim,) = wait_for(lambda: claims(resource))
    allocate_and_reserve(resource, claim, made)
    core.delete_namespaced_pod("train", NS, grace_period_seconds=0)
    resource.delete_namespaced_resource_claim(claim["metadata"]["name"], NS)
    wait_for(lambda: claims(resource) == [], "the claim gone once its finalizer is removed")


def test_a_claim_of_another_pod_is_not_taken_and_a_malformed_pod_claim_is_reported(
    apiserver, controller, core, resource
):
    apiserver.create(template())
    apiserver.create(pod("train"))
    (claim,) = wait_for(lambda: claims(resource))
    made = apiserver.create(pod("other"))
    # The other pod's status points at train's claim: it is not the other pod's, so it gets its own.
    current = read_pod(core, "other")
    current["status"]["resourceClaimStatuses"] = [
        {"name": "gpu", "resourceClaimName": claim["metadata"]["name"]}
    ]
    core.replace_namespaced_pod_status("other", NS, current, _preload_content=False)
    wait_for(lambda: len(claims(resource)) == 2, "a claim for the other pod")
    mine = [
        c for c in claims(resource) if c["metadata"]["ownerReferences"][0]["uid"] == made["metadata"]["uid"]
    ]
    assert len(mine) == 1 and mine[0]["metadata"]["name"] != claim["metadata"]["name"]


def test_a_pod_claim_naming_neither_a_claim_nor_a_template_is_reported_and_other_pods_are_served(
    apiserver, controller, core, resource
):
    apiserver.create(template())
    odd = pod("odd")
    odd["spec"]["resourceClaims"] = [{"name": "gpu"}]
    apiserver.create(odd)
    apiserver.create(pod("train"))
    (event,) = wait_for(lambda: events(core, "FailedResourceClaimCreation"))
    assert event["involvedObject"]["name"] == "odd"
    assert event["message"] == (
        'PodResourceClaim gpu: checking for claim before creating it: pod "default/odd", '
        'spec.resourceClaim "gpu": none of the supported fields are set'
    )
    (claim,) = wait_for(lambda: claims(resource))
    assert claim["metadata"]["ownerReferences"][0]["name"] == "train"
