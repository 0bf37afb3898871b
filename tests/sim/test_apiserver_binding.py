"""pods/binding through the official client, as kube-apiserver's binding storage answers it: one
write that sets the node, merges the Binding's annotations and marks the pod scheduled; the real
refusals (status code, reason and words) for a bound, deleted, gated or different pod."""

from __future__ import annotations

import http.client
import json
import threading

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException


def pod(name: str, annotations: dict | None = None, **spec: object) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec},
    }


def binding(name: str, node: str = "node-1", **meta: object) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, **meta},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


@pytest.fixture
def core(apiserver):
    return client.CoreV1Api(apiserver.api_client("admin"))


def bind(core, name: str, body: dict) -> dict:
    # The client cannot decode the Status reply into V1Binding (kubernetes-client/python#547).
    resp = core.create_namespaced_pod_binding(name, "default", body, _preload_content=False)
    assert resp.status == 201
    return json.loads(resp.data)


def refusal(core, name: str, body: object) -> tuple[int, dict]:
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod_binding(name, "default", body, _preload_content=False)
    return err.value.status, json.loads(err.value.body)


def test_a_bindings_annotations_land_on_the_pod_in_the_same_write_as_its_node(core):
    created = core.create_namespaced_pod("default", pod("a", {"keep": "me", "over": "old"}))
    stream = watch.Watch()
    events: list[tuple[str, dict]] = []

    def follow() -> None:
        for ev in stream.stream(
            core.list_namespaced_pod,
            "default",
            resource_version=created.metadata.resource_version,
            timeout_seconds=5,
        ):
            events.append((ev["type"], ev["raw_object"]))
            stream.stop()

    reader = threading.Thread(target=follow)
    reader.start()
    annotations = {"hami.io/vgpu-node": "node-1", "over": "new"}
    assert (
        bind(core, "a", binding("a", uid=created.metadata.uid, annotations=annotations))["status"]
        == "Success"
    )
    reader.join(10)
    [(kind, seen)] = events
    assert kind == "MODIFIED"
    assert seen["spec"]["nodeName"] == "node-1"
    assert seen["metadata"]["annotations"] == {"keep": "me", "over": "new", "hami.io/vgpu-node": "node-1"}
    assert [c["type"] for c in seen["status"]["conditions"]] == ["PodScheduled"]
    assert int(seen["metadata"]["resourceVersion"]) == int(created.metadata.resource_version) + 1
    assert (
        core.read_namespaced_pod("a", "default").metadata.resource_version
        == seen["metadata"]["resourceVersion"]
    )


def test_binding_replaces_an_existing_pod_scheduled_condition_in_place(core, apiserver):
    core.create_namespaced_pod("default", pod("a"))
    conditions = [
        {"type": "Initialized", "status": "True"},
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/1 nodes"},
    ]
    core.patch_namespaced_pod_status("a", "default", {"status": {"conditions": conditions}})
    bind(core, "a", binding("a"))
    got = core.read_namespaced_pod("a", "default").status.conditions
    assert [(c.type, c.status, c.reason, c.message) for c in got] == [
        ("Initialized", "True", None, None),
        ("PodScheduled", "True", None, None),
    ]


def test_binding_a_bound_pod_is_a_conflict_on_pods_binding_and_changes_nothing(core):
    core.create_namespaced_pod("default", pod("a"))
    bind(core, "a", binding("a"))
    before = core.read_namespaced_pod("a", "default")
    code, status = refusal(core, "a", binding("a", "node-2", annotations={"late": "x"}))
    assert (code, status["reason"]) == (409, "Conflict")
    assert status["message"] == (
        'Operation cannot be fulfilled on pods/binding "a": pod a is already assigned to node "node-1"'
    )
    assert status["details"] == {"name": "a", "kind": "pods/binding"}
    after = core.read_namespaced_pod("a", "default")
    assert after.metadata.resource_version == before.metadata.resource_version
    assert "late" not in (after.metadata.annotations or {})


def test_a_binding_for_another_uid_or_an_old_resource_version_fails_its_storage_precondition(core):
    created = core.create_namespaced_pod("default", pod("a"))
    code, status = refusal(core, "a", binding("a", uid="not-the-pod"))
    assert (code, status["reason"], status["details"]["kind"]) == (409, "Conflict", "pods")
    assert status["message"] == (
        'Operation cannot be fulfilled on pods "a": StorageError: invalid object, Code: 4, '
        "Key: /registry/pods/default/a, ResourceVersion: 0, AdditionalErrorMsg: Precondition "
        f"failed: UID in precondition: not-the-pod, UID in object meta: {created.metadata.uid}"
    )
    core.patch_namespaced_pod("a", "default", {"metadata": {"labels": {"x": "1"}}})
    code, status = refusal(core, "a", binding("a", resourceVersion=created.metadata.resource_version))
    assert code == 409 and "Precondition failed: ResourceVersion in precondition" in status["message"]
    assert core.read_namespaced_pod("a", "default").spec.node_name is None


def test_a_pod_being_deleted_or_still_gated_cannot_be_bound(core):
    core.create_namespaced_pod(
        "default", {**pod("gone"), "metadata": {"name": "gone", "finalizers": ["x/y"]}}
    )
    core.delete_namespaced_pod("gone", "default", grace_period_seconds=0)
    code, status = refusal(core, "gone", binding("gone"))
    assert code == 409 and status["message"].endswith(
        "pod gone is being deleted, cannot be assigned to a host"
    )
    core.create_namespaced_pod("default", pod("gated", schedulingGates=[{"name": "x/wait"}]))
    code, status = refusal(core, "gated", binding("gated"))
    assert code == 409 and status["message"].endswith("pod gated has non-empty .spec.schedulingGates")


def test_a_missing_pod_is_not_found_and_a_missing_node_is_not_checked(core):
    code, status = refusal(core, "nobody", binding("nobody"))
    assert (code, status["reason"], status["message"]) == (404, "NotFound", 'pods "nobody" not found')
    core.create_namespaced_pod("default", pod("a"))
    bind(core, "a", binding("a", "no-such-node"))
    assert core.read_namespaced_pod("a", "default").spec.node_name == "no-such-node"


def test_a_binding_without_a_node_name_is_answered_as_the_real_server_does_with_an_internal_error(core):
    core.create_namespaced_pod("default", pod("a"))
    body = binding("a")
    body["target"] = {"kind": "Node"}
    code, status = refusal(core, "a", body)
    assert (code, status.get("reason"), status["message"]) == (500, None, "target.name: Required value")
    body["target"] = {"kind": "Pod", "name": "x"}
    code, status = refusal(core, "a", body)
    assert code == 500 and 'target.kind: Unsupported value: "Pod"' in status["message"]


def test_a_name_or_namespace_that_differs_from_the_url_is_a_bad_request(core):
    core.create_namespaced_pod("default", pod("a"))
    code, status = refusal(core, "a", binding("b"))
    assert (code, status["message"]) == (400, "name in URL does not match name in Binding object")
    code, status = refusal(core, "a", binding("a", namespace="other"))
    assert code == 400 and "namespace of the provided object does not match" in status["message"]


@pytest.mark.parametrize(
    "annotations",
    [{"a": 1}, {"a": {"deep": "x"}}, ["a", "b"], "text", {"a": True}],
    ids=["number", "object", "list", "string", "bool"],
)
def test_annotations_that_are_not_a_map_of_strings_cannot_be_decoded(core, apiserver, annotations):
    """Sent as raw JSON: the official client would refuse to send such a body at all."""
    core.create_namespaced_pod("default", pod("a"))
    conn = http.client.HTTPConnection(apiserver.host, apiserver.port, timeout=30)
    conn.request(
        "POST",
        "/api/v1/namespaces/default/pods/a/binding",
        json.dumps(binding("a", annotations=annotations)),
        {"Authorization": f"Bearer {apiserver.identity('admin').token}", "Content-Type": "application/json"},
    )
    resp = conn.getresponse()
    code, status = resp.status, json.loads(resp.read())
    conn.close()
    assert (code, status["reason"]) == (400, "BadRequest")
    assert status["message"].startswith(
        'Binding in version "v1" cannot be handled as a Binding: json: cannot'
    )
    assert core.read_namespaced_pod("a", "default").spec.node_name is None


def test_a_body_beyond_the_servers_request_limit_is_refused_before_it_is_decoded(core):
    core.create_namespaced_pod("default", pod("a"))
    code, status = refusal(core, "a", binding("a", annotations={"big": "x" * (3 * 1024 * 1024)}))
    assert (code, status["reason"]) == (413, "RequestEntityTooLarge")
    assert core.read_namespaced_pod("a", "default").spec.node_name is None


def test_the_binding_copies_annotations_unvalidated_and_the_pods_next_update_is_invalid(core):
    """The real binding storage does not validate the annotations it copies; ObjectMeta
    validation then refuses the pod's next ordinary update."""
    core.create_namespaced_pod("default", pod("a"))
    bind(core, "a", binding("a", annotations={"big": "x" * (300 * 1024)}))
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_pod("a", "default", {"metadata": {"labels": {"x": "1"}}})
    status = json.loads(err.value.body)
    assert (err.value.status, status["reason"]) == (422, "Invalid")
    assert (
        status["message"]
        == 'Pod "a" is invalid: metadata.annotations: Too long: may not be more than 262144 bytes'
    )


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("bad key", "name part must consist of alphanumeric characters"),
        ("-leading", "name part must consist of alphanumeric characters"),
        ("a/b/c", "a qualified name must consist of"),
        ("/name", "prefix part must be non-empty"),
        ("Bad_Prefix!/name", "prefix part a lowercase RFC 1123 subdomain"),
        ("x" * 64, "name part must be no more than 63 characters"),
    ],
)
def test_a_pod_created_with_an_annotation_key_that_is_not_a_qualified_name_is_invalid(core, key, why):
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("default", pod("a", {key: "v"}))
    status = json.loads(err.value.body)
    assert (err.value.status, status["reason"]) == (422, "Invalid")
    assert f'metadata.annotations: Invalid value: "{key}": {why}' in status["message"]


def test_annotation_keys_are_checked_lower_cased_and_sizes_count_keys_and_values(core):
    assert core.create_namespaced_pod("default", pod("a", {"Example.COM/MyName": "v"})).metadata.name == "a"
    near = {"k": "x" * (256 * 1024 - 1)}
    assert core.create_namespaced_pod("default", pod("b", near)).metadata.name == "b"
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("default", pod("c", {"kk": "x" * (256 * 1024 - 1)}))
    assert err.value.status == 422
