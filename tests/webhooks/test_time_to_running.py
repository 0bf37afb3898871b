"""Time to Running as serve reads it from pod updates: counted once, on the update that shows a MIG
pod Running; pods that are not MIG pods, already ran, or carry fields no API server writes are not
counted, and nothing raises."""

from __future__ import annotations

import copy

import pytest

from mig.annotations import VGPU_NODE
from webhooks.started import time_to_running

PENDING = {
    "metadata": {"name": "p", "creationTimestamp": "2026-01-01T10:00:00Z", "annotations": {VGPU_NODE: "n1"}},
    "status": {"phase": "Pending"},
}


def running(*started: str) -> dict:
    pod = copy.deepcopy(PENDING)
    pod["status"] = {
        "phase": "Running",
        "containerStatuses": [
            {"name": f"c{i}", "state": {"running": {"startedAt": t}}} for i, t in enumerate(started)
        ],
    }
    return pod


def test_a_mig_pod_is_timed_to_its_last_containers_start_on_the_update_that_shows_it_running():
    assert time_to_running(PENDING, running("2026-01-01T10:00:04Z", "2026-01-01T10:00:09Z")) == 9
    assert time_to_running(running("2026-01-01T10:00:04Z"), running("2026-01-01T10:00:04Z")) is None
    assert time_to_running(None, running("2026-01-01T10:00:04Z")) is None  # seen first Running: a relist


def test_a_pod_on_no_mig_node_is_not_counted():
    plain = running("2026-01-01T10:00:04Z")
    plain["metadata"]["annotations"] = {}
    assert time_to_running(PENDING, plain) is None


@pytest.mark.parametrize(
    "status",
    [
        "Running",
        {"phase": "Running", "containerStatuses": "c0"},
        {"phase": "Running", "containerStatuses": [None, 3]},
        {"phase": "Running", "containerStatuses": [{"state": {"running": {"startedAt": "yesterday"}}}]},
        {"phase": "Running", "containerStatuses": [{"state": {"waiting": {}}}]},
        {"phase": "Running", "containerStatuses": []},
    ],
)
def test_fields_no_api_server_writes_are_not_counted_and_do_not_raise(status):
    pod = copy.deepcopy(PENDING)
    pod["status"] = status
    assert time_to_running(PENDING, pod) is None
