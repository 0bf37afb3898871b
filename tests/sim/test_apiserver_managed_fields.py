"""managedFields after Update-type writes (merge patch, strategic merge patch, JSON patch, PUT) on
the simulated API server, as kube-apiserver's field manager keeps them (structured-merge-diff's
Updater.Update: the writer gains what it added or changed, every manager loses what it changed or
removed, an empty manager is dropped); and every write leaves the versions before it as they were
(a watcher already holds them)."""

from __future__ import annotations

import json

import kubernetes
import pytest
from sim.apiserver import fieldsets
from sim.apiserver.registry import Request
from sim.apiserver.resources import BY_KEY

NODES = BY_KEY[("", "nodes")]
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
LOCK = "hami.io/mutex.lock"


def _entries(obj: dict) -> dict[str, dict]:
    return {e["manager"]: e for e in obj["metadata"].get("managedFields") or []}


@pytest.fixture
def core(apiserver):
    api = kubernetes.client.CoreV1Api(apiserver.api_client("admin"))
    node = {
        "metadata": {"name": "gpu-1", "annotations": {"register": "8 GPUs"}, "labels": {"zone": "a"}},
        "status": {"capacity": {"cpu": "8"}},
    }
    api.create_node(node, field_manager="device-plugin")
    return api


def _patch(core, body: dict, manager: str, content_type: str = MERGE) -> dict:
    return core.api_client.sanitize_for_serialization(
        core.patch_node("gpu-1", body, field_manager=manager, _content_type=content_type)
    )


def test_a_merge_patch_adding_an_annotation_is_owned_by_its_writer_alone(core):
    node = _patch(core, {"metadata": {"annotations": {LOCK: "2026-12-01T00:00:00Z,team,p"}}}, "dynmig")
    entries = _entries(node)
    assert entries["dynmig"]["operation"] == "Update"
    assert entries["dynmig"]["apiVersion"] == "v1"
    assert entries["dynmig"]["fieldsV1"] == {"f:metadata": {"f:annotations": {f"f:{LOCK}": {}}}}
    assert entries["device-plugin"]["fieldsV1"]["f:metadata"] == {
        "f:annotations": {".": {}, "f:register": {}},
        "f:labels": {".": {}, "f:zone": {}},
    }


def test_removing_the_only_field_a_manager_owns_drops_its_entry(core):
    _patch(core, {"metadata": {"annotations": {LOCK: "2026-12-01T00:00:00Z,team,p"}}}, "dynmig")
    node = _patch(core, {"metadata": {"annotations": {LOCK: None}}}, "device-plugin-release")
    assert set(_entries(node)) == {"device-plugin"}  # the releaser added nothing, so it owns nothing


def test_a_patch_changing_another_managers_field_takes_it_over(core):
    node = _patch(core, {"metadata": {"labels": {"zone": "b"}}}, "relabeller")
    entries = _entries(node)
    assert entries["relabeller"]["fieldsV1"] == {"f:metadata": {"f:labels": {"f:zone": {}}}}
    # the creator keeps the labels map itself: a member with no children left is a bare `{}`
    assert entries["device-plugin"]["fieldsV1"]["f:metadata"]["f:labels"] == {}


def test_a_patch_writing_a_value_a_field_already_has_changes_no_ownership(core):
    before = _entries(_patch(core, {"metadata": {"labels": {"extra": "1"}}}, "first"))
    after = _entries(_patch(core, {"metadata": {"labels": {"zone": "a", "extra": "1"}}}, "second"))
    assert "second" not in after
    assert after == before


def test_strategic_and_json_patches_and_updates_record_what_they_changed(core):
    _patch(core, {"spec": {"taints": [{"key": "gpu", "effect": "NoSchedule"}]}}, "tainter", STRATEGIC)
    _patch(core, [{"op": "add", "path": "/spec/unschedulable", "value": True}], "cordoner", JSON_PATCH)
    node = core.api_client.sanitize_for_serialization(core.read_node("gpu-1"))
    node["metadata"]["labels"]["rack"] = "r1"
    node = core.api_client.sanitize_for_serialization(
        core.replace_node("gpu-1", node, field_manager="racker")
    )
    entries = _entries(node)
    assert entries["tainter"]["fieldsV1"] == {"f:spec": {"f:taints": {}}}  # an atomic list: owned whole
    assert entries["cordoner"]["fieldsV1"] == {"f:spec": {"f:unschedulable": {}}}
    assert entries["racker"]["fieldsV1"] == {"f:metadata": {"f:labels": {"f:rack": {}}}}


def test_a_write_through_the_status_subresource_is_recorded_apart_from_the_main_endpoint(core):
    node = core.api_client.sanitize_for_serialization(
        core.patch_node_status("gpu-1", {"status": {"capacity": {"cpu": "16"}}}, field_manager="kubelet")
    )
    (status_entry,) = [e for e in node["metadata"]["managedFields"] if e["manager"] == "kubelet"]
    assert status_entry["subresource"] == "status"
    assert status_entry["fieldsV1"] == {"f:status": {"f:capacity": {"f:cpu": {}}}}


# ---- earlier versions stay as they were --------------------------------------------------------------


def _writes() -> list[tuple[str, object]]:
    return [
        (MERGE, {"metadata": {"annotations": {LOCK: "x"}, "labels": {"zone": None}}}),
        (
            STRATEGIC,
            {"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}, "metadata": {"labels": {"n": "1"}}},
        ),
        (JSON_PATCH, [{"op": "replace", "path": "/metadata/annotations/register", "value": "7 GPUs"}]),
        (MERGE, {"status": {"capacity": {"cpu": "8000m", "memory": "1024Mi"}}}),
        (MERGE, {"metadata": {"managedFields": [{}]}}),
    ]


def test_no_write_changes_a_version_stored_before_it(apiserver, core):
    """Writes share the parts they do not change with the stored version; none may change it."""
    registry = apiserver.registry
    held = [apiserver.get("nodes", "gpu-1")]
    snapshots = [json.dumps(held[0], sort_keys=True)]
    admin = apiserver.identity("admin")
    for sub in ("", "status"):
        for content_type, body in _writes():
            req = Request(admin, NODES, "", "gpu-1", sub, field_manager="w")
            registry.patch(req, content_type, json.dumps(body).encode())
            held.append(apiserver.get("nodes", "gpu-1"))
            snapshots.append(json.dumps(held[-1], sort_keys=True))
    current = json.loads(snapshots[-1])
    current["metadata"]["labels"] = {"zone": "c"}
    registry.update(Request(admin, NODES, "", "gpu-1", field_manager="u"), current)
    assert [json.dumps(o, sort_keys=True) for o in held] == snapshots
    assert len(set(snapshots)) >= 6  # most writes above changed the node (status ones only status)


def test_a_status_write_with_non_canonical_quantities_is_stored_canonical(apiserver, core):
    node = core.api_client.sanitize_for_serialization(
        core.patch_node_status("gpu-1", {"status": {"capacity": {"cpu": "8000m"}}})
    )
    assert node["status"]["capacity"]["cpu"] == "8"


# ---- the diff behind managedFields ------------------------------------------------------------------


def test_a_set_item_changing_from_a_number_to_a_boolean_is_a_removal_and_an_addition():
    """Python finds 1 == True; the field sets must not: in a set, they are two different items."""
    old = {"metadata": {"finalizers": [1]}}
    new = {"metadata": {"finalizers": [True]}}
    diff = fieldsets.compare(old, new, "V1Node")
    item = (("f", "metadata"), ("f", "finalizers"))
    assert diff.removed == {(*item, ("v", "1"))}
    assert diff.added == {(*item, ("v", "true"))}


def test_equal_values_have_no_difference_and_a_changed_leaf_only_its_path():
    old = {"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"podCIDR": "10.0.0.0/24"}}
    new = json.loads(json.dumps(old))
    assert not (fieldsets.compare(old, new, "V1Node").modified or fieldsets.compare(old, new, "V1Node").added)
    new["metadata"]["labels"]["b"] = "3"
    diff = fieldsets.compare(old, new, "V1Node")
    assert diff.modified == {(("f", "metadata"), ("f", "labels"), ("f", "b"))}
    assert not diff.added and not diff.removed
