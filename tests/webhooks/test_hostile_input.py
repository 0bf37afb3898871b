"""Every reproduction from the hostile-input storm, as a regression test: a 4xx or a denial naming the
field, never a 5xx, a hang or memory that grows with the input."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from test_extender import filter_args, seed, stored_pod
from waiting_testkit import eventually
from webhooks_testkit import gpu_pod, node, pod, review

from mig.annotations import MIG_ALLOCATIONS, PROFILE_PREFERENCE, decode_allocations

JSON = {"content-type": "application/json"}


def admission(client, route: str, body: dict) -> dict:
    reply = client.post(f"/{route}", json=body)
    assert reply.status_code == 200, reply.text
    return reply.json()["response"]


@pytest.mark.parametrize("route", ["mutate", "validate"])
def test_a_body_of_2000_open_brackets_is_a_400_not_a_crash(client, route):
    reply = client.post(f"/{route}", content=b"[" * 2000, headers=JSON)
    assert reply.status_code == 400 and "deeper than 64 levels" in reply.text


def test_a_deep_object_inside_a_valid_review_is_a_400(client):
    deep = {"metadata": {"name": "p", "annotations": {}}, "x": json.loads("[" * 200 + "]" * 200)}
    reply = client.post("/validate", content=json.dumps(review(deep)).encode(), headers=JSON)
    assert reply.status_code == 400 and "deeper than" in reply.text


@pytest.mark.parametrize(
    ("change", "path"),
    [
        (
            lambda p: p["spec"]["containers"][0].update(name=7),
            "request.object.spec.containers[0].name: must be a string",
        ),
        (lambda p: p.update(spec=[]), "request.object.spec: must be an object"),
        (
            lambda p: p["spec"]["containers"][0].update(resources=[]),
            ("request.object.spec.containers[0].resources: must be an object"),
        ),
        (
            lambda p: p["metadata"].update(annotations={PROFILE_PREFERENCE: 7}),
            f"request.object.metadata.annotations.{PROFILE_PREFERENCE}: must be a string",
        ),
        (lambda p: p["metadata"].update(uid=["a"]), "request.object.metadata.uid: must be a string"),
    ],
)
@pytest.mark.parametrize("route", ["mutate", "validate"])
def test_a_pod_with_a_field_of_the_wrong_type_is_denied_naming_its_json_path(client, route, change, path):
    obj = pod(limits={"nvidia.com/gpu": "1"})
    change(obj)
    response = admission(client, route, review(obj))
    assert response["allowed"] is False and response["status"]["code"] == 400
    assert response["status"]["message"].startswith(path)


def _device_config(text: str) -> dict:
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "dc", "namespace": "dynmig", "labels": {"dynmig.io/device-config": "true"}},
        "data": {"device-config.yaml": text},
    }
    return review(cm, kind="ConfigMap", resource="configmaps")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("- " * 500 + "x", "nests deeper than 32 levels"),
        ("a: " + "[" * 2000, "not valid YAML"),
        ("a: &x [1, 2]\nb: *x", "uses an alias"),
        ("x" * 300_000, "the limit is 262144"),
    ],
)
def test_a_hostile_device_config_is_denied_quickly_and_says_why(client, text, why):
    response = admission(client, "validate", _device_config(text))
    assert response["allowed"] is False and why in response["status"]["message"]


def test_a_preference_annotation_of_a_quarter_megabyte_is_denied_with_the_limit(client):
    obj = pod(limits={"nvidia.com/gpu": "1"}, annotations={PROFILE_PREFERENCE: "1g," * 80_000})
    response = admission(client, "mutate", review(obj))
    assert response["allowed"] is False and "the limit is 4096" in response["status"]["message"]


# ---------------------------------------------------------------- extender


def test_a_non_gpu_pod_with_a_deeply_nested_node_item_is_a_400(extender):
    deep = "[" * 980 + "]" * 980
    body = (
        '{"Pod": {"metadata": {"name": "web", "namespace": "team", "uid": "u"}}, "NodeNames": null, '
        '"Nodes": {"items": [{"metadata": {"name": "n1"}, "x": ' + deep + "}]}}"
    )
    reply = extender.post("/filter", content=body.encode(), headers=JSON)
    assert reply.status_code == 400 and "deeper than 64 levels" in reply.text


@pytest.mark.parametrize(
    ("change", "path"),
    [
        (
            lambda b: b["Pod"]["metadata"].update(annotations={PROFILE_PREFERENCE: 7}),
            f"Pod.metadata.annotations.{PROFILE_PREFERENCE}: must be a string",
        ),
        (
            lambda b: b["Pod"]["spec"]["containers"][0].update(resources={"limits": []}),
            "Pod.spec.containers[0].resources.limits: must be an object",
        ),
        (lambda b: b["Pod"]["metadata"].update(uid=["u"]), "Pod.metadata.uid: must be a string"),
        (
            lambda b: b["Pod"]["metadata"].update(annotations=[]),
            "Pod.metadata.annotations: must be an object",
        ),
        (
            lambda b: b.update(Nodes={"items": [{"metadata": []}]}),
            "Nodes.items[0].metadata: must be an object",
        ),
        (lambda b: b.update(NodeNames=[7]), "NodeNames[0]: must be a string"),
        (
            lambda b: b.update(NodeNames=[f"n{i}" for i in range(100_000)]),
            "NodeNames: is too long (the limit is 15000)",
        ),
    ],
)
def test_extender_args_with_a_wrong_type_or_size_are_a_400_naming_the_field(extender, change, path):
    body = filter_args(gpu_pod("p"), ["n1"])
    body["Pod"]["metadata"]["uid"] = "u"
    change(body)
    reply = extender.post("/filter", json=body)
    assert reply.status_code == 400
    assert reply.text == f"filter: {path}\n"


def test_a_gpu_pod_over_many_unknown_nodes_gets_a_reply_with_bounded_text(apiserver, service, extender):
    _, p = seed(apiserver, service, node("n1"), gpu_pod("p", memory=900_000))
    names = ["n1"] + [f"unknown-{i}" for i in range(14_000)]
    out = extender.post("/filter", json=filter_args(p, names)).json()
    assert out["Error"] == "" and out["NodeNames"] == []
    assert len(out["FailedNodes"]) == len(names)
    assert all(len(text) <= 1100 for text in out["FailedNodes"].values())
    assert "no allowlisted profile has 900000 MiB" in out["FailedNodes"]["n1"]


def test_a_pod_asking_for_10_to_the_8_devices_is_refused_naming_the_cap(apiserver, service, extender):
    absurd = gpu_pod("absurd")
    absurd["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "100000000"
    _, p = seed(apiserver, service, node("n1"), absurd)
    out = extender.post("/filter", json=filter_args(p, ["n1"])).json()
    assert out["Error"] == (
        "container main: nvidia.com/gpu 100000000 is more than 128 devices, the most dynmig "
        "places for one pod (no node has more MIG instances)"
    )
    assert service.fleet.placements()["GPU-n1-0"] == []


def test_devices_over_the_cap_across_containers_are_refused_too(apiserver, service, extender):
    many = gpu_pod("many", devices=100)
    many["spec"]["initContainers"] = [{"name": "init", "resources": {"limits": {"nvidia.com/gpu": "100"}}}]
    _, p = seed(apiserver, service, node("n1"), many)
    out = extender.post("/filter", json=filter_args(p, ["n1"])).json()
    assert out["Error"].startswith(
        "the pod's containers ask for 200 nvidia.com/gpu devices together, more than 128"
    )


# ---------------------------------------------------------------- only the scheduler changes a reservation


def test_the_webhook_listener_does_not_serve_filter_or_bind(service):
    from starlette.testclient import TestClient

    with TestClient(service.app) as webhook:
        for verb in ("/filter", "/bind"):
            assert webhook.post(verb, json={}).status_code == 404


def test_the_extender_listens_on_loopback_by_default():
    from webhooks.config import parse_args

    cfg = parse_args([])
    assert (cfg.extender_bind_address, cfg.extender_port) == ("127.0.0.1", 8444)
    assert cfg.bind_address == "0.0.0.0"  # the webhooks are reached through the Service


def _running(apiserver, service, extender, memory: int = 8000) -> dict:
    """A pod filtered, bound and given a runtime identity, as the device plugin records it."""
    _, p = seed(apiserver, service, node("n1"), gpu_pod("run", memory=memory))
    uid = p["metadata"]["uid"]
    extender.post("/filter", json=filter_args(p, ["n1"]))
    assert extender.post(
        "/bind", json={"PodName": "run", "PodNamespace": "team", "PodUID": uid, "Node": "n1"}
    ).json() == {"Error": ""}
    stored = stored_pod(apiserver, "run")
    (alloc,) = decode_allocations(stored["metadata"]["annotations"][MIG_ALLOCATIONS])
    running = [
        {
            **alloc.model_dump(exclude_none=True),
            "migUUID": "MIG-abc",
            "gpuInstanceID": 1,
            "computeInstanceID": 0,
        }
    ]
    core = client.CoreV1Api(apiserver.api_client("device-plugin"))
    core.patch_namespaced_pod(
        "run", "team", {"metadata": {"annotations": {MIG_ALLOCATIONS: json.dumps(running)}}}
    )
    core.patch_namespaced_pod_status("run", "team", {"status": {"phase": "Running"}})
    assert eventually(
        lambda: (service.cache.pod("team", "run") or {}).get("status", {}).get("phase") == "Running"
    )
    return stored_pod(apiserver, "run")


def test_refiltering_a_running_pod_with_a_larger_request_never_changes_its_reservation(
    apiserver, service, extender
):
    running = _running(apiserver, service, extender)
    before = running["metadata"]["annotations"][MIG_ALLOCATIONS]
    forged = json.loads(json.dumps(running))
    forged["spec"].pop("nodeName")
    forged["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] = "40000"
    out = extender.post("/filter", json=filter_args(forged, ["n1"])).json()
    assert out["Error"] == "pod team/run is already bound to node n1; dynmig does not plan it again"
    assert stored_pod(apiserver, "run")["metadata"]["annotations"][MIG_ALLOCATIONS] == before


def test_a_bind_for_a_pod_the_request_misnames_is_refused(apiserver, service, extender):
    _, _p = seed(apiserver, service, node("n1"), gpu_pod("p1"))
    out = extender.post(
        "/bind", json={"PodName": "p1", "PodNamespace": "team", "PodUID": "someone-else", "Node": "n1"}
    ).json()
    assert "dynmig binds only the pod the cluster has" in out["Error"]
    assert stored_pod(apiserver, "p1")["spec"].get("nodeName") is None


def test_a_device_config_with_thousands_of_mistakes_gets_a_short_denial(client):
    entries = "".join(f"  - models: [A30]\n    profiles: [bad{i}]\n" for i in range(3000))
    response = admission(client, "validate", _device_config("nvidia:\n  migProfileAllowlist:\n" + entries))
    message = response["status"]["message"]
    assert response["allowed"] is False and message.endswith("more errors") and len(message) < 25_000
