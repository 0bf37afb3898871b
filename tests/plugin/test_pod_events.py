"""The device plugin tells the pod what it did: the instance it created (profile, placement, MIG
UUID), the instance it reclaimed once the pod ended, and why an Allocate was refused."""

from __future__ import annotations

import time

from tests.plugin.conftest import Want

A100 = {"gpus": [{"model": "A100-SXM4-40GB"}]}


def pod_events(node, name, reason, count=1, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        events = [
            e
            for e in node.core.list_namespaced_event("default").to_dict()["items"]
            if e["involved_object"]["name"] == name and e["reason"] == reason
        ]
        if len(events) >= count or time.monotonic() > deadline:
            return events
        time.sleep(0.05)


def test_a_created_instance_is_an_event_on_its_pod_naming_profile_placement_and_mig_uuid(make_node):
    node = make_node(A100)
    node.start_plugin()
    node.add_pod("train", [[Want(0, "1g.5gb", 6, 1)]])
    assert node.admit("train").ok
    [(_, _, _, mig_uuid)] = node.instances(0)

    [event] = pod_events(node, "train", "MigInstanceCreated")

    assert (
        event["type"] == "Normal"
        and event["involved_object"]["uid"] == node.core.read_namespaced_pod("train", "default").metadata.uid
    )
    assert f"1g.5gb@6:1 on {node.uuids[0]}" in event["message"] and mig_uuid in event["message"]
    assert event["reporting_component"] == "dynmig-device-plugin"
    assert event["reporting_instance"] == event["source"]["host"] != ""

    node.set_phase("train", "Succeeded")
    node.tick()
    [reclaimed] = pod_events(node, "train", "MigInstanceReclaimed")
    assert mig_uuid in reclaimed["message"] and "the pod ended" in reclaimed["message"]


def test_each_instance_of_a_pod_gets_its_own_created_event(make_node):
    node = make_node(A100)
    node.start_plugin()
    node.add_pod("pair", [[Want(0, "1g.5gb", 0, 1), Want(0, "1g.5gb", 2, 1)]])
    assert node.admit("pair").ok

    events = pod_events(node, "pair", "MigInstanceCreated", count=2)

    assert sorted("@0:1" in e["message"] for e in events) == [False, True]


def test_a_refused_allocate_is_a_warning_on_the_pod_saying_why(make_node):
    node = make_node(A100)
    node.start_plugin()
    node.add_pod("bare", [[Want(0, "1g.5gb", 0, 1)]], allocations="")
    assert not node.admit("bare").ok

    [event] = pod_events(node, "bare", "MigAllocateFailed")

    assert event["type"] == "Warning" and "reservation-mismatch" in event["message"]
    assert pod_events(node, "bare", "MigInstanceCreated", timeout=0) == []
