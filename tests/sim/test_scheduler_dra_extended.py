"""sim.scheduler.dra_extended: which DeviceClass serves an extended resource, and the requests
kube-scheduler writes for a pod's extended resources, as extendeddynamicresources.go makes them."""

from __future__ import annotations

import pytest
from sim.scheduler import dra_extended as ext


def device_class(name: str, resource: str | None = None, created: str = "2026-01-01T00:00:00Z") -> dict:
    spec = {"extendedResourceName": resource} if resource else {}
    return {"metadata": {"name": name, "creationTimestamp": created}, "spec": spec}


def pod(*containers: dict, init: tuple[dict, ...] = ()) -> dict:
    return {
        "metadata": {"name": "p", "namespace": "default", "uid": "u-1"},
        "spec": {"containers": list(containers), "initContainers": list(init)},
    }


def test_the_class_naming_a_resource_serves_it_and_every_class_serves_its_implicit_name():
    classes = {"mig-1g": device_class("mig-1g", "nvidia.com/mig-1g.10gb"), "plain": device_class("plain")}
    assert ext.class_for("nvidia.com/mig-1g.10gb", classes) == "mig-1g"
    assert ext.class_for("deviceclass.resource.kubernetes.io/plain", classes) == "plain"
    assert ext.class_for("nvidia.com/gpu", classes) is None
    assert not ext.backed_by_dra("cpu", classes)


def test_of_two_classes_naming_one_resource_the_later_wins_then_the_name_sorted_first():
    a = device_class("a", "nvidia.com/gpu", "2026-01-01T00:00:00Z")
    b = device_class("b", "nvidia.com/gpu", "2026-02-01T00:00:00Z")
    c = device_class("c", "nvidia.com/gpu", "2026-02-01T00:00:00Z")
    assert ext.class_for("nvidia.com/gpu", {"a": a, "b": b, "c": c}) == "b"


def test_each_container_gets_its_own_request_named_by_its_index_and_the_resource_s():
    classes = {"mig-1g": device_class("mig-1g", "nvidia.com/mig-1g.10gb")}
    p = pod(
        {"name": "a", "resources": {"limits": {"cpu": "1", "nvidia.com/mig-1g.10gb": "2"}}},
        {"name": "b", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}},
    )
    assert ext.pod_requests(p) == {"nvidia.com/mig-1g.10gb": 3}
    requests, mappings = ext.requests_and_mappings(p, {"nvidia.com/mig-1g.10gb": 3}, classes)
    assert [(r["name"], r["exactly"]["count"], r["exactly"]["deviceClassName"]) for r in requests] == [
        ("container-0-request-1", 2, "mig-1g"),
        ("container-1-request-0", 1, "mig-1g"),
    ]
    assert [(m["containerName"], m["requestName"]) for m in mappings] == [
        ("a", "container-0-request-1"),
        ("b", "container-1-request-0"),
    ]


def test_a_node_whose_device_plugin_has_the_resource_serves_it_and_one_with_neither_cannot_fit():
    classes = {"mig-1g": device_class("mig-1g", "nvidia.com/mig-1g.10gb")}
    p = pod({"name": "a", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1", "example.com/fpga": "1"}}})
    with pytest.raises(ext.CannotFit):
        ext.node_needs(p, {"status": {"allocatable": {}}}, classes)  # example.com/fpga: nobody has it
    plugin_node = {"status": {"allocatable": {"nvidia.com/mig-1g.10gb": "7", "example.com/fpga": "1"}}}
    assert ext.node_needs(p, plugin_node, classes) == {}
    dra_node = {"status": {"allocatable": {"example.com/fpga": "1"}}}
    assert ext.node_needs(p, dra_node, classes) == {"nvidia.com/mig-1g.10gb": 1}


def test_the_pods_claim_of_an_earlier_cycle_is_found_by_its_annotation_and_controller():
    p = pod({"name": "a"})
    mine = ext.in_memory_claim(p, "tmp")
    mine["metadata"]["name"] = "p-extended-resources-x1"
    other = {"metadata": {"name": "o", "ownerReferences": mine["metadata"]["ownerReferences"]}}
    assert ext.find_claim(p, [other, mine]) is mine
    assert mine["metadata"]["generateName"] == "p-extended-resources-"
