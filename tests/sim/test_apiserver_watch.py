"""Watch semantics of the simulated API server over raw HTTP, as kube-apiserver documents them:
resourceVersion "", "0", a specific version and a compacted one; the WatchList protocol
(sendInitialEvents + the initial-events-end bookmark); periodic bookmarks."""

from __future__ import annotations

import http.client
import json
from urllib.parse import urlencode

import pytest


def pod(name: str, labels: dict | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


@pytest.fixture
def watch(apiserver):
    """watch(**query) -> (status, [events]) of one watch on default/pods that ends after
    timeoutSeconds (or `until` events)."""
    token = apiserver.identity("admin").token

    def run(until: int = 0, **query: str) -> tuple[int, list[dict]]:
        conn = http.client.HTTPConnection(apiserver.host, apiserver.port, timeout=30)
        params = {"watch": "true", "timeoutSeconds": "1", **query}
        conn.request(
            "GET",
            f"/api/v1/namespaces/default/pods?{urlencode(params)}",
            headers={"Authorization": f"Bearer {token}"},
        )
        resp = conn.getresponse()
        if resp.status != 200:
            out = resp.status, [json.loads(resp.read())]
            conn.close()
            return out
        events = []
        for line in resp:
            if line.strip():
                events.append(json.loads(line))
            if until and len(events) >= until:
                break
        conn.close()
        return 200, events

    return run


def kinds(events: list[dict]) -> list[tuple[str, str]]:
    return [(e["type"], e["object"]["metadata"].get("name", "")) for e in events]


def test_send_initial_events_streams_the_state_then_a_bookmark_marking_its_end(apiserver, watch):
    apiserver.create(pod("a"))
    apiserver.create(pod("b"))
    code, events = watch(
        until=3,
        sendInitialEvents="true",
        resourceVersionMatch="NotOlderThan",
        allowWatchBookmarks="true",
        resourceVersion="",
    )
    assert code == 200
    assert kinds(events) == [("ADDED", "a"), ("ADDED", "b"), ("BOOKMARK", "")]
    bookmark = events[2]["object"]
    assert bookmark["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert (
        bookmark["metadata"]["resourceVersion"]
        == apiserver.get("pods", "b", "default")["metadata"]["resourceVersion"]
    )
    assert bookmark["kind"] == "Pod"


def test_send_initial_events_false_starts_at_now_without_the_state(apiserver, watch):
    apiserver.create(pod("a"))
    code, events = watch(sendInitialEvents="false", resourceVersionMatch="NotOlderThan")
    assert (code, events) == (200, [])


def test_watch_list_options_kube_apiserver_refuses_are_refused_with_its_words(watch):
    code, [status] = watch(sendInitialEvents="true")
    assert code == 422
    assert "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan" in status["message"]
    code, [status] = watch(resourceVersionMatch="NotOlderThan")
    assert code == 422 and "forbidden for watch unless sendInitialEvents is provided" in status["message"]
    code, [status] = watch(resourceVersion="12abc")
    assert code == 400


def test_resource_version_unset_or_zero_replays_the_state_and_a_specific_one_only_what_follows(
    apiserver, watch
):
    first = apiserver.create(pod("a"))["metadata"]["resourceVersion"]
    apiserver.create(pod("b"))
    assert kinds(watch()[1]) == [("ADDED", "a"), ("ADDED", "b")]
    assert kinds(watch(resourceVersion="0")[1]) == [("ADDED", "a"), ("ADDED", "b")]
    assert kinds(watch(resourceVersion=first)[1]) == [("ADDED", "b")]


def test_a_compacted_resource_version_ends_the_watch_with_an_expired_error(apiserver, watch):
    first = apiserver.create(pod("a"))["metadata"]["resourceVersion"]
    apiserver.create(pod("b"))
    apiserver.compact()
    code, events = watch(resourceVersion=first)
    assert code == 200 and [e["type"] for e in events] == ["ERROR"]
    assert (events[0]["object"]["code"], events[0]["object"]["reason"]) == (410, "Expired")


def test_a_watch_that_allows_bookmarks_gets_them_with_the_current_resource_version(apiserver, watch):
    apiserver.bookmark_interval = 0.2
    apiserver.create(pod("a"))
    now = apiserver.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})
    _code, events = watch(until=2, allowWatchBookmarks="true", resourceVersion="0", timeoutSeconds="10")
    assert kinds(events) == [("ADDED", "a"), ("BOOKMARK", "")]
    assert events[1]["object"]["metadata"]["resourceVersion"] == now["metadata"]["resourceVersion"]
    assert "annotations" not in events[1]["object"]["metadata"]
    assert [e["type"] for e in watch(resourceVersion="0")[1]] == ["ADDED"]  # none unless allowed
