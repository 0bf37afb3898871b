"""The simulated API server as the official `kubernetes` client sees it."""

from __future__ import annotations

import http.client
import json
import threading

import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
from sim.apiserver import Identity, write_kubeconfig


def pod(name: str, labels: dict | None = None, scheduler: str = "default-scheduler", node: str = "") -> dict:
    spec: dict = {"containers": [{"name": "c", "image": "busybox"}], "schedulerName": scheduler}
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
    }


@pytest.fixture
def core(apiserver):
    return client.CoreV1Api(apiserver.api_client("admin"))


def names(items) -> list[str]:
    return sorted(i.metadata.name for i in items)


def test_a_created_pod_gets_identity_and_a_fresh_resource_version_and_starts_pending(core):
    first = core.create_namespaced_pod("default", pod("a"))
    second = core.create_namespaced_pod("default", {**pod("x"), "metadata": {"generateName": "web-"}})
    assert first.metadata.uid and first.metadata.creation_timestamp
    assert int(second.metadata.resource_version) > int(first.metadata.resource_version)
    assert second.metadata.name.startswith("web-") and len(second.metadata.name) == len("web-") + 5
    assert first.status.phase == "Pending"
    assert first.spec.scheduler_name == "default-scheduler"


def test_creating_a_pod_twice_or_in_a_missing_namespace_is_refused_like_kubernetes(core):
    core.create_namespaced_pod("default", pod("a"))
    with pytest.raises(ApiException) as dup:
        core.create_namespaced_pod("default", pod("a"))
    assert dup.value.status == 409 and json.loads(dup.value.body)["reason"] == "AlreadyExists"
    with pytest.raises(ApiException) as missing:
        core.create_namespaced_pod("nowhere", pod("b"))
    assert missing.value.status == 404
    assert json.loads(missing.value.body)["message"] == 'namespaces "nowhere" not found'


def test_label_selectors_support_equality_sets_and_existence(core):
    core.create_namespaced_pod("default", pod("a", {"app": "x", "tier": "gpu"}))
    core.create_namespaced_pod("default", pod("b", {"app": "y"}))
    core.create_namespaced_pod("default", pod("c", {"app": "z", "tier": "cpu"}))
    assert names(core.list_namespaced_pod("default", label_selector="app=x").items) == ["a"]
    assert names(core.list_namespaced_pod("default", label_selector="app!=x").items) == ["b", "c"]
    assert names(core.list_namespaced_pod("default", label_selector="app in (x,y)").items) == ["a", "b"]
    assert names(core.list_namespaced_pod("default", label_selector="app notin (x,y)").items) == ["c"]
    assert names(core.list_namespaced_pod("default", label_selector="tier").items) == ["a", "c"]
    assert names(core.list_namespaced_pod("default", label_selector="!tier").items) == ["b"]


def test_field_selectors_find_pods_by_node_scheduler_and_phase(core):
    core.create_namespaced_pod("default", pod("a", scheduler="dynmig-scheduler"))
    core.create_namespaced_pod("default", pod("b", node="node-1"))
    assert names(core.list_pod_for_all_namespaces(field_selector="spec.nodeName=node-1").items) == ["b"]
    assert names(core.list_pod_for_all_namespaces(field_selector="spec.nodeName=").items) == ["a"]
    assert names(
        core.list_namespaced_pod("default", field_selector="spec.schedulerName=dynmig-scheduler").items
    ) == ["a"]
    assert names(
        core.list_namespaced_pod("default", field_selector="status.phase!=Running,metadata.name=b").items
    ) == ["b"]
    with pytest.raises(ApiException) as bad:
        core.list_namespaced_pod("default", field_selector="spec.priority=1")
    assert bad.value.status == 400 and "field label not supported" in json.loads(bad.value.body)["message"]


def test_all_three_patch_types_change_metadata_and_json_patch_test_failures_are_422(core):
    core.create_namespaced_pod("default", pod("a", {"app": "x"}))
    merged = core.patch_namespaced_pod(
        "a",
        "default",
        {"metadata": {"annotations": {"k": "v"}}},
        _content_type="application/merge-patch+json",
    )
    assert merged.metadata.annotations == {"k": "v"}
    strategic = core.patch_namespaced_pod("a", "default", {"metadata": {"labels": {"app": None, "b": "1"}}})
    assert strategic.metadata.labels == {"b": "1"}
    patched = core.patch_namespaced_pod(
        "a",
        "default",
        [
            {"op": "test", "path": "/metadata/annotations/k", "value": "v"},
            {"op": "add", "path": "/metadata/annotations/hami.io~1vgpu-node", "value": "node-1"},
        ],
    )
    assert patched.metadata.annotations == {"k": "v", "hami.io/vgpu-node": "node-1"}
    with pytest.raises(ApiException) as failed:
        core.patch_namespaced_pod(
            "a", "default", [{"op": "test", "path": "/metadata/annotations/k", "value": "other"}]
        )
    assert failed.value.status == 422
    assert core.read_namespaced_pod("a", "default").metadata.annotations["k"] == "v"


def test_strategic_merge_patch_merges_container_lists_by_name(core):
    body = pod("a")
    body["spec"]["containers"].append({"name": "side", "image": "old"})
    core.create_namespaced_pod("default", body)
    patched = core.patch_namespaced_pod(
        "a", "default", {"spec": {"containers": [{"name": "side", "image": "new"}]}}
    )
    assert [(c.name, c.image) for c in patched.spec.containers] == [("c", "busybox"), ("side", "new")]


def test_stale_resource_versions_get_409_on_update_and_on_patch(core):
    created = core.create_namespaced_pod("default", pod("a"))
    core.patch_namespaced_pod("a", "default", {"metadata": {"labels": {"x": "1"}}})
    body = core.api_client.sanitize_for_serialization(created)
    body["metadata"]["labels"] = {"x": "2"}
    with pytest.raises(ApiException) as put:
        core.replace_namespaced_pod("a", "default", body)
    assert put.value.status == 409 and json.loads(put.value.body)["reason"] == "Conflict"
    with pytest.raises(ApiException) as patch:
        core.patch_namespaced_pod(
            "a",
            "default",
            {"metadata": {"resourceVersion": created.metadata.resource_version, "labels": {"x": "3"}}},
            _content_type="application/merge-patch+json",
        )
    assert patch.value.status == 409
    current = core.read_namespaced_pod("a", "default")
    body = core.api_client.sanitize_for_serialization(current)
    body["metadata"]["labels"] = {"x": "4"}
    assert core.replace_namespaced_pod("a", "default", body).metadata.labels == {"x": "4"}


def test_a_no_op_patch_does_not_bump_the_resource_version(core):
    core.create_namespaced_pod("default", pod("a", {"x": "1"}))
    before = core.read_namespaced_pod("a", "default").metadata.resource_version
    after = core.patch_namespaced_pod("a", "default", {"metadata": {"labels": {"x": "1"}}})
    assert after.metadata.resource_version == before


def test_binding_sets_the_node_once_and_a_second_binding_conflicts(core):
    created = core.create_namespaced_pod("default", pod("a"))
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "a", "uid": created.metadata.uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"},
    }
    # The client cannot decode the Status reply into V1Binding (kubernetes-client/python#547).
    resp = core.create_namespaced_pod_binding("a", "default", body, _preload_content=False)
    assert resp.status == 201 and json.loads(resp.data)["status"] == "Success"
    bound = core.read_namespaced_pod("a", "default")
    assert bound.spec.node_name == "node-1"
    assert [c.type for c in bound.status.conditions] == ["PodScheduled"]
    with pytest.raises(ApiException) as again:
        core.create_namespaced_pod_binding("a", "default", body, _preload_content=False)
    assert again.value.status == 409 and "already assigned" in json.loads(again.value.body)["message"]


def test_status_is_written_through_the_status_subresource_only(core):
    core.create_namespaced_pod("default", pod("a"))
    core.patch_namespaced_pod("a", "default", {"status": {"phase": "Running"}})
    assert core.read_namespaced_pod("a", "default").status.phase == "Pending"
    core.patch_namespaced_pod_status(
        "a", "default", {"status": {"phase": "Running"}, "metadata": {"labels": {"ignored": "yes"}}}
    )
    now = core.read_namespaced_pod("a", "default")
    assert now.status.phase == "Running" and not now.metadata.labels


def test_deleting_a_bound_pod_is_graceful_and_grace_zero_removes_it(apiserver, core):
    apiserver.registry.reap_after_grace = False
    core.create_namespaced_pod("default", pod("a", node="node-1"))
    core.create_namespaced_pod("default", pod("b", node="node-1"))
    core.create_namespaced_pod("default", pod("unbound"))
    core.delete_namespaced_pod("a", "default")
    terminating = core.read_namespaced_pod("a", "default")
    assert terminating.metadata.deletion_timestamp is not None
    assert terminating.metadata.deletion_grace_period_seconds == 30
    core.delete_namespaced_pod("b", "default", grace_period_seconds=0)
    core.delete_namespaced_pod("unbound", "default")
    assert names(core.list_namespaced_pod("default").items) == ["a"]
    assert apiserver.finish_deletions() == 1
    assert core.list_namespaced_pod("default").items == []


def test_watch_streams_changes_from_a_resource_version_with_selector_transitions(core):
    start = core.list_namespaced_pod("default").metadata.resource_version
    core.create_namespaced_pod("default", pod("a", {"gpu": "yes"}))
    core.create_namespaced_pod("default", pod("b"))
    core.patch_namespaced_pod("a", "default", {"metadata": {"labels": {"gpu": None}}})
    seen = []
    for ev in watch.Watch().stream(
        core.list_namespaced_pod,
        "default",
        label_selector="gpu=yes",
        resource_version=start,
        timeout_seconds=1,
    ):
        seen.append((ev["type"], ev["object"].metadata.name))
    assert seen == [("ADDED", "a"), ("DELETED", "a")]


def test_a_watch_sees_writes_made_while_it_is_open(core):
    start = core.list_namespaced_pod("default").metadata.resource_version
    seen = []
    w = watch.Watch()

    def consume():
        for ev in w.stream(core.list_namespaced_pod, "default", resource_version=start, timeout_seconds=5):
            seen.append((ev["type"], ev["object"].metadata.name))
            if len(seen) == 2:
                w.stop()

    t = threading.Thread(target=consume)
    t.start()
    core.create_namespaced_pod("default", pod("a"))
    core.delete_namespaced_pod("a", "default")
    t.join(10)
    assert seen == [("ADDED", "a"), ("DELETED", "a")]


def test_a_watch_from_a_compacted_resource_version_gets_410_gone(apiserver, core):
    start = core.list_namespaced_pod("default").metadata.resource_version
    core.create_namespaced_pod("default", pod("a"))
    apiserver.compact()
    with pytest.raises(ApiException) as gone:
        for _ in watch.Watch().stream(
            core.list_namespaced_pod, "default", resource_version=start, timeout_seconds=1
        ):
            pass
    assert gone.value.status == 410


def test_injected_failures_hit_only_the_named_verb_and_resource_then_stop(apiserver, core):
    core.create_namespaced_pod("default", pod("a"))
    apiserver.faults.fail_next(1, verb="patch", resource="pods", code=500)
    with pytest.raises(ApiException) as failed:
        core.patch_namespaced_pod("a", "default", {"metadata": {"labels": {"x": "1"}}})
    assert failed.value.status == 500
    assert not core.read_namespaced_pod("a", "default").metadata.labels
    assert core.patch_namespaced_pod("a", "default", {"metadata": {"labels": {"x": "1"}}}).metadata.labels


def test_the_api_can_go_down_and_come_back(apiserver):
    core = client.CoreV1Api(apiserver.api_client("admin"))
    core.api_client.configuration.retries = 0
    apiserver.down()
    with pytest.raises(Exception):  # noqa: B017 - urllib3 raises MaxRetryError on connection refused
        core.list_namespace(_request_timeout=2)
    apiserver.up()
    assert "default" in names(core.list_namespace().items)
    apiserver.down("503")
    with pytest.raises(ApiException) as unavailable:
        core.list_namespace()
    assert unavailable.value.status == 503
    apiserver.up()
    assert core.list_namespace().items


def test_leases_and_configmaps_round_trip_with_conflicts(apiserver):
    coord = client.CoordinationV1Api(apiserver.api_client("scheduler"))
    lease = coord.create_namespaced_lease(
        "kube-system", {"metadata": {"name": "dynmig"}, "spec": {"holderIdentity": "a"}}
    )
    lease.spec.holder_identity = "b"
    assert coord.replace_namespaced_lease("dynmig", "kube-system", lease).spec.holder_identity == "b"
    lease.spec.holder_identity = "c"
    with pytest.raises(ApiException) as stale:
        coord.replace_namespaced_lease("dynmig", "kube-system", lease)
    assert stale.value.status == 409


def test_unknown_bearer_tokens_are_unauthorized(apiserver, tmp_path):
    stranger = Identity("stranger", "mallory")
    path = write_kubeconfig(tmp_path / "kc.yaml", apiserver.url, stranger)
    api = client.CoreV1Api(config.new_client_from_config(config_file=str(path)))
    with pytest.raises(ApiException) as denied:
        api.list_namespace()
    assert denied.value.status == 401


@pytest.mark.parametrize(
    ("patch", "content_type"),
    [
        ({"metadata": {"labels": {"x": "2", "y": None}}, "spec": {"tolerations": [{"key": "k"}]}}, "merge"),
        (
            {"metadata": {"labels": {"x": "2"}}, "spec": {"containers": [{"name": "c", "image": "b:2"}]}},
            "strategic",
        ),
        ([{"op": "replace", "path": "/metadata/labels/x", "value": "2"}], "json"),
    ],
    ids=["merge", "strategic", "json"],
)
def test_a_patch_changes_the_new_version_only_never_the_stored_one_others_read(
    apiserver, core, patch, content_type
):
    """Watch events and readers share the stored object; a write must copy what it changes."""
    core.create_namespaced_pod("default", pod("a", {"x": "1", "y": "1"}))
    stored = apiserver.get("pods", "a", "default")
    before = json.dumps(stored, sort_keys=True)
    kinds = {"merge": "application/merge-patch+json", "strategic": "application/strategic-merge-patch+json"}
    kinds["json"] = "application/json-patch+json"
    conn = http.client.HTTPConnection(apiserver.host, apiserver.port, timeout=30)
    headers = {
        "Authorization": f"Bearer {apiserver.identity('admin').token}",
        "Content-Type": kinds[content_type],
    }
    conn.request("PATCH", "/api/v1/namespaces/default/pods/a", json.dumps(patch), headers)
    assert conn.getresponse().status == 200
    conn.close()
    assert json.dumps(stored, sort_keys=True) == before
    assert apiserver.get("pods", "a", "default")["metadata"]["labels"]["x"] == "2"
