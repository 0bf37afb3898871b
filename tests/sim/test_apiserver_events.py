"""Events through both of kube-apiserver's Event APIs (core/v1 and events.k8s.io/v1): one stored
object, read back through either with the real field mapping, validated as the real server does,
and shown by kubectl 1.35 (`get events`, `events`) with its default settings."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from kubernetes import client
from sim.scheduler.api import ApiWriter

V1_PATH = "/apis/events.k8s.io/v1/namespaces/default/events"


def micro_now() -> str:
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"


def new_event(name: str = "train.1", **fields: Any) -> dict[str, Any]:
    """An events.k8s.io/v1 Event as client-go's events recorder writes it."""
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": "default"},
        "eventTime": micro_now(),
        "reportingController": "default-scheduler",
        "reportingInstance": "default-scheduler-host-1",
        "action": "Scheduling",
        "reason": "FailedScheduling",
        "regarding": {
            "kind": "Pod",
            "namespace": "default",
            "name": "train",
            "uid": "u-1",
            "apiVersion": "v1",
        },
        "note": "0/2 nodes are available: 2 no free slice.",
        "type": "Warning",
        **fields,
    }


def legacy_event(name: str = "train.2") -> dict[str, Any]:
    """A core/v1 Event as client-go's legacy recorder writes it."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": "default"},
        "involvedObject": {"kind": "Pod", "namespace": "default", "name": "train", "uid": "u-1"},
        "reason": "FilteringFailed",
        "message": "no GPU has a free 3g slice",
        "type": "Warning",
        "source": {"component": "dynmig-scheduler"},
        "firstTimestamp": "2026-01-01T00:00:00Z",
        "lastTimestamp": "2026-01-01T00:00:05Z",
        "count": 3,
    }


@pytest.fixture
def core(apiserver):
    return client.CoreV1Api(apiserver.api_client("admin"))


@pytest.fixture
def ev1(apiserver):
    return client.EventsV1Api(apiserver.api_client("admin"))


def raw(resp) -> dict[str, Any]:
    return json.loads(resp.data)


@pytest.fixture
def wire(apiserver):
    """Raw requests on the official client's connection, for bodies its own models would refuse
    before sending (a real client in another language sends them)."""
    return ApiWriter(apiserver.api_client("admin"))


def refusal(call, *args, **kwargs) -> tuple[int, dict[str, Any]]:
    with pytest.raises(client.ApiException) as exc:
        call(*args, **kwargs)
    return exc.value.status, json.loads(exc.value.body)


def test_an_event_written_through_events_v1_reads_back_through_core_v1_with_the_real_field_names(core, ev1):
    sent = new_event()
    ev1.create_namespaced_event("default", sent, _preload_content=False)
    got = raw(core.read_namespaced_event("train.1", "default", _preload_content=False))
    assert got["apiVersion"] == "v1"
    assert got["message"] == sent["note"] and got["involvedObject"] == sent["regarding"]
    assert got["reportingComponent"] == "default-scheduler"
    assert got["reportingInstance"] == "default-scheduler-host-1"
    assert got["action"] == "Scheduling" and got["eventTime"] == sent["eventTime"]
    # Go writes the struct-valued fields of an unset legacy part: null times, an empty source.
    assert got["firstTimestamp"] is None and got["lastTimestamp"] is None and got["source"] == {}
    assert "count" not in got and "note" not in got
    # The official client's typed read decodes it.
    typed = core.read_namespaced_event("train.1", "default")
    assert typed.message == sent["note"] and typed.involved_object.name == "train"


def test_a_core_v1_event_reads_through_events_v1_with_its_legacy_fields_deprecated(core, ev1):
    core.create_namespaced_event("default", legacy_event(), _preload_content=False)
    got = raw(ev1.read_namespaced_event("train.2", "default", _preload_content=False))
    assert got["apiVersion"] == "events.k8s.io/v1"
    assert got["note"] == "no GPU has a free 3g slice" and got["regarding"]["name"] == "train"
    assert got["deprecatedCount"] == 3 and got["deprecatedSource"] == {"component": "dynmig-scheduler"}
    assert got["deprecatedFirstTimestamp"] == "2026-01-01T00:00:00Z"
    assert got["deprecatedLastTimestamp"] == "2026-01-01T00:00:05Z"
    assert got["eventTime"] is None
    assert not {"message", "involvedObject", "count", "source", "firstTimestamp"} & set(got)


def test_both_apis_list_the_same_events(core, ev1):
    ev1.create_namespaced_event("default", new_event(), _preload_content=False)
    core.create_namespaced_event("default", legacy_event(), _preload_content=False)
    by_core = raw(core.list_namespaced_event("default", _preload_content=False))
    by_v1 = raw(ev1.list_namespaced_event("default", _preload_content=False))
    assert by_v1["kind"] == "EventList" and by_v1["apiVersion"] == "events.k8s.io/v1"
    assert [e["metadata"]["name"] for e in by_core["items"]] == ["train.1", "train.2"]
    assert [e["metadata"] for e in by_v1["items"]] == [e["metadata"] for e in by_core["items"]]
    assert [e["note"] for e in by_v1["items"]] == [e["message"] for e in by_core["items"]]


def test_events_v1_refuses_an_event_without_reporter_or_action_naming_each_field(wire):
    body = new_event()
    for key in ("reportingController", "reportingInstance", "action"):
        del body[key]
    code, status = refusal(wire.send, "POST", V1_PATH, body)
    assert code == 422 and status["reason"] == "Invalid"
    causes = {(c["field"], c["reason"]) for c in status["details"]["causes"]}
    assert causes == {
        ("reportingController", "FieldValueRequired"),
        ("reportingInstance", "FieldValueRequired"),
        ("action", "FieldValueRequired"),
    }
    assert status["message"].startswith('Event.events.k8s.io "train.1" is invalid: [')


def test_events_v1_refuses_an_event_without_event_time(wire):
    body = new_event()
    del body["eventTime"]
    code, status = refusal(wire.send, "POST", V1_PATH, body)
    assert code == 422
    assert status["message"] == 'Event.events.k8s.io "train.1" is invalid: eventTime: Required value'


def test_events_v1_refuses_a_note_over_1024_bytes_and_the_deprecated_fields(wire):
    code, status = refusal(wire.send, "POST", V1_PATH, new_event(note="é" * 513))
    assert code == 422 and status["details"]["causes"][0]["field"] == "message"
    assert "can have at most 1024 characters" in status["message"]
    code, status = refusal(wire.send, "POST", V1_PATH, new_event(deprecatedCount=2, type="Fatal"))
    fields = {c["field"] for c in status["details"]["causes"]}
    assert code == 422 and fields == {"count", "type"}


def test_events_v1_refuses_an_event_time_that_is_not_a_time_with_a_400(wire):
    code, status = refusal(wire.send, "POST", V1_PATH, new_event(eventTime={"$ne": 1}))
    assert code == 400 and "eventTime" in status["message"]


def test_the_core_api_takes_a_legacy_event_but_not_one_outside_its_objects_namespace(core):
    body = legacy_event()
    body["involvedObject"]["namespace"] = "kube-system"
    code, status = refusal(core.create_namespaced_event, "default", body)
    assert code == 422 and status["details"]["causes"][0]["field"] == "involvedObject.namespace"


def test_a_series_patched_through_events_v1_shows_in_both_apis_and_the_note_stays_immutable(
    core, ev1, wire, run
):
    ev1.create_namespaced_event("default", new_event(), _preload_content=False)
    series = {"count": 2, "lastObservedTime": micro_now()}
    ev1.patch_namespaced_event("train.1", "default", {"series": series}, _preload_content=False)
    assert raw(core.read_namespaced_event("train.1", "default", _preload_content=False))["series"] == series
    code, status = refusal(ev1.patch_namespaced_event, "train.1", "default", {"note": "something else"})
    assert code == 422 and "field is immutable" in status["message"]
    code, status = refusal(
        wire.send,
        "PATCH",
        f"{V1_PATH}/train.1",
        {"series": {"count": 1, "lastObservedTime": micro_now()}},
        "application/merge-patch+json",
    )
    assert code == 422 and status["details"]["causes"][0]["field"] == "series.count"
    # kubectl events prints a series as "<last seen> (x<count> over <first seen>)".
    assert "(x2 over" in run("events", "-n", "default")


def test_field_selectors_take_each_apis_own_names(core, ev1):
    ev1.create_namespaced_event("default", new_event(), _preload_content=False)
    other = new_event("infer.1", regarding={"kind": "Pod", "namespace": "default", "name": "infer"})
    ev1.create_namespaced_event("default", other, _preload_content=False)
    picked = raw(
        ev1.list_namespaced_event("default", field_selector="regarding.name=train", _preload_content=False)
    )
    assert [e["metadata"]["name"] for e in picked["items"]] == ["train.1"]
    picked = raw(
        core.list_namespaced_event(
            "default",
            field_selector="involvedObject.name=infer,reportingComponent=default-scheduler",
            _preload_content=False,
        )
    )
    assert [e["metadata"]["name"] for e in picked["items"]] == ["infer.1"]
    code, status = refusal(ev1.list_namespaced_event, "default", field_selector="involvedObject.name=train")
    assert code == 400 and status["message"] == "field label not supported: involvedObject.name"


def test_a_watch_on_each_api_sees_the_same_change_in_its_own_shape(apiserver, core, ev1):
    seen: dict[str, list[dict[str, Any]]] = {"core": [], "v1": []}

    def watch(name: str, call) -> None:
        resp = call("default", watch=True, timeout_seconds=5, _preload_content=False)
        for line in resp:
            seen[name].append(json.loads(line))
            if seen[name][-1]["type"] == "ADDED":
                return

    before = apiserver.open_watches("events")
    threads = [
        threading.Thread(target=watch, args=("core", core.list_namespaced_event)),
        threading.Thread(target=watch, args=("v1", ev1.list_namespaced_event)),
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while apiserver.open_watches("events") < before + 2:
        assert time.monotonic() < deadline, "the watches did not start"
        time.sleep(0.02)
    ev1.create_namespaced_event("default", new_event(), _preload_content=False)
    for t in threads:
        t.join(10)
    assert seen["core"][-1]["object"]["message"] == seen["v1"][-1]["object"]["note"]
    assert seen["core"][-1]["object"]["apiVersion"] == "v1"
    assert seen["v1"][-1]["object"]["apiVersion"] == "events.k8s.io/v1"


def test_kubectl_get_events_shows_events_of_both_apis_in_its_columns(core, ev1, run):
    ev1.create_namespaced_event("default", new_event(), _preload_content=False)
    core.create_namespaced_event("default", legacy_event(), _preload_content=False)
    lines = run("get", "events", "-n", "default").splitlines()
    assert lines[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    rows = {line.split()[2]: line for line in lines[1:]}
    assert "pod/train" in rows["FailedScheduling"] and "0/2 nodes are available" in rows["FailedScheduling"]
    assert "pod/train" in rows["FilteringFailed"]
    wide = run("get", "events", "-n", "default", "-o", "wide")
    assert "default-scheduler, default-scheduler-host-1" in wide
    assert "FailedScheduling" in run("get", "events.events.k8s.io", "-n", "default")


def test_kubectl_events_lists_an_events_v1_event(ev1, run):
    ev1.create_namespaced_event("default", new_event(), _preload_content=False)
    out = run("events", "-n", "default")
    assert "FailedScheduling" in out and "Pod/train" in out and "0/2 nodes are available" in out


@pytest.mark.parametrize(
    "fields",
    [
        {"eventTime": "2026-13-45T25:61:00.000000Z"},
        {"eventTime": 1767225600},
        {"regarding": ["Pod", "train"]},
        {"note": {"text": "x"}},
        {"series": "twice"},
        {"series": {"count": "2", "lastObservedTime": "2026-01-01T00:00:00.000000Z"}},
        {"series": {"count": 2, "lastObservedTime": "yesterday"}},
        {"deprecatedCount": 2.5},
        {"reportingController": "not a/qualified/name"},
        {"reason": "R" * 129},
        {"reportingInstance": "i" * 129},
    ],
)
def test_a_malformed_event_is_a_4xx_naming_the_field_never_a_crash(wire, fields):
    code, status = refusal(wire.send, "POST", V1_PATH, new_event(**fields))
    assert code in (400, 422)
    # Validation names the stored field (as kube-apiserver's does); decoding names the one sent.
    stored = {"regarding": "involvedObject", "note": "message", "deprecatedCount": "count"}
    field = next(iter(fields))
    assert (stored.get(field, field) if code == 422 else field) in status["message"]
