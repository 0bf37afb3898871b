"""Events dynmig posts: repeats are one aggregated object, posting never blocks, drops are counted."""

from __future__ import annotations

import kubernetes
import pytest
from waiting_testkit import eventually as _eventually

from base.events import EventRecorder, Regarding


def _pod(name="p", uid="uid-1", ns="default"):
    return {"metadata": {"name": name, "namespace": ns, "uid": uid}}


def _events(core, reason):
    return [e for e in core.list_namespaced_event("default").to_dict()["items"] if e["reason"] == reason]


@pytest.fixture
def core(apiserver):
    return kubernetes.client.CoreV1Api(apiserver.api_client("admin"))


def test_a_refusal_repeated_for_one_pod_is_one_event_whose_count_grows(core):
    recorder = EventRecorder(core, "dynmig-scheduler", instance="serve-0").start()
    try:
        recorder.record(_pod(), "Warning", "FilteringFailed", "0/2 nodes: 2 GPUs full")
        assert _eventually(lambda: _events(core, "FilteringFailed"))
        for i in range(5):
            recorder.record(_pod(), "Warning", "FilteringFailed", f"0/2 nodes: 2 GPUs full ({i})")
        got = _eventually(
            lambda: [e for e in _events(core, "FilteringFailed") if e["count"] == 6 and "(4)" in e["message"]]
        )
    finally:
        recorder.stop()
    events = _events(core, "FilteringFailed")
    assert len(events) == 1 and got
    (event,) = events
    assert event["involved_object"]["uid"] == "uid-1" and event["involved_object"]["kind"] == "Pod"
    assert event["reporting_component"] == "dynmig-scheduler" and event["reporting_instance"] == "serve-0"
    assert event["last_timestamp"] >= event["first_timestamp"]


def test_other_pods_and_other_reasons_get_their_own_events(core):
    recorder = EventRecorder(core, "dynmig-scheduler").start()
    try:
        recorder.record(_pod("a", "ua"), "Warning", "FilteringFailed", "x")
        recorder.record(_pod("b", "ub"), "Warning", "FilteringFailed", "x")
        recorder.record(_pod("a", "ua"), "Normal", "FilteringSucceed", "y")
    finally:
        recorder.stop()
    assert sorted(e["involved_object"]["name"] for e in _events(core, "FilteringFailed")) == ["a", "b"]
    assert len(_events(core, "FilteringSucceed")) == 1


def test_recording_returns_before_a_slow_api_server_has_written_anything(apiserver, core):
    apiserver.faults.add_latency(1.0, verb="create", resource="events")
    recorder = EventRecorder(core, "dynmig-device-plugin").start()
    try:
        for i in range(20):
            recorder.record(_pod(f"p{i}", f"u{i}"), "Normal", "MigInstanceCreated", "created")
        assert _events(core, "MigInstanceCreated") == []  # every write is still on its way
        assert recorder.pending() > 0
    finally:
        recorder.stop(timeout=0.1)
        apiserver.faults.clear()


def test_an_api_server_that_is_down_costs_dropped_events_not_errors(apiserver, core):
    dropped: list[str] = []
    recorder = EventRecorder(core, "dynmig-device-plugin", dropped=dropped.append).start()
    apiserver.down()
    try:
        recorder.record(_pod(), "Normal", "MigInstanceCreated", "created")
        assert _eventually(lambda: dropped) == ["api-error"]
    finally:
        recorder.stop()
        apiserver.up()


def test_a_full_queue_drops_new_series_and_counts_them(core):
    dropped: list[str] = []
    recorder = EventRecorder(core, "dynmig-scheduler", capacity=3, dropped=dropped.append)  # not started
    for i in range(5):
        recorder.record(_pod(f"p{i}", f"u{i}"), "Warning", "FilteringFailed", "x")
    recorder.record(_pod("p0", "u0"), "Warning", "FilteringFailed", "again")  # a repeat still counts
    assert dropped == ["queue-full", "queue-full"] and recorder.pending() == 3


def test_a_long_message_is_cut_to_what_the_api_server_accepts(core):
    recorder = EventRecorder(core, "dynmig-scheduler").start()
    try:
        recorder.record_about(Regarding("Pod", "default", "p", "u"), "Warning", "FilteringFailed", "x" * 5000)
        recorder.record_about(Regarding("Pod", "default", "q", "v"), "Warning", "FilteringFailed", "é" * 5000)
    finally:
        recorder.stop()
    messages = sorted(e["message"] for e in _events(core, "FilteringFailed"))
    assert [len(m.encode()) <= 1024 and m.endswith("…") for m in messages] == [True, True]
    assert messages[0].startswith("xxx") and messages[1].startswith("ééé")
