"""The page's HTTP side on a real uvicorn listener: strict headers on every response, the event
stream (new fragment when the fleet changes, heartbeats meanwhile), a bounded number of watchers,
and a slot given back when a watcher goes away."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from waiting_testkit import eventually

from webhooks.page.app import CSP, create_page_app
from webhooks.page.stream import Feed, Timing, event
from webhooks.runner import Listeners, Page

FAST = Timing(poll=0.02, heartbeat=0.2)


@contextmanager
def serving(render: Callable[[], str], **kw: Any) -> Iterator[tuple[str, Starlette]]:
    app = create_page_app(render, interval=0.01, timing=FAST, **kw)
    listeners = Listeners(Starlette(), page=Page(app)).start()
    try:
        yield listeners.page_url, app
    finally:
        listeners.stop()


def sse_events(response: httpx.Response) -> Iterator[tuple[str, str]]:
    """(event name, data) per event; ("", comment) per comment line."""
    name, data = "", []
    for line in response.iter_lines():
        if line.startswith(":"):
            yield "", line[1:].strip()
        elif line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            data.append(line[6:])
        elif line == "" and (name or data):
            yield name, "\n".join(data)
            name, data = "", []


def test_every_response_carries_a_strict_content_security_policy_and_the_page_loads_nothing_external():
    with serving(lambda: "<p>fleet</p>") as (url, _), httpx.Client(base_url=url, timeout=10) as http:
        for path in ("/", "/page.js", "/page.css", "/healthz"):
            r = http.get(path)
            assert r.status_code == 200, path
            assert r.headers["content-security-policy"] == CSP
            assert r.headers["x-content-type-options"] == "nosniff"
        assert "script-src 'self'" in CSP and "default-src 'none'" in CSP and "unsafe" not in CSP
        index = http.get("/").text
        assert "<p>fleet</p>" in index  # the first view needs no script
        assert "http://" not in index.replace('xmlns="http://www.w3.org/2000/svg"', "")
        assert "https://" not in index
        with http.stream("GET", "/events") as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            assert r.headers["content-security-policy"] == CSP


def test_the_page_is_read_only():
    with serving(lambda: "") as (url, _), httpx.Client(base_url=url, timeout=10) as http:
        for path in ("/", "/events"):
            assert http.post(path, content=b"x").status_code == 405


def test_a_stream_sends_the_fragment_again_only_when_it_changed_and_heartbeats_meanwhile():
    shown = {"html": "<p>one</p>"}
    with (
        serving(lambda: shown["html"]) as (url, _),
        httpx.Client(timeout=10) as http,
        http.stream("GET", url + "events") as r,
    ):
        stream = sse_events(r)
        assert next(stream) == ("fleet", "<p>one</p>")
        assert next(stream) == ("", "heartbeat")  # unchanged: no event, a heartbeat
        shown["html"] = "<p>two</p>\n<p>lines</p>"
        got = next(e for e in stream if e[0] == "fleet")
        assert got == ("fleet", "<p>two</p>\n<p>lines</p>")


def test_a_watcher_over_the_limit_is_refused_and_a_watcher_that_leaves_frees_its_slot():
    with serving(lambda: "<p>x</p>", max_streams=2) as (url, app), httpx.Client(timeout=10) as http:
        first = http.send(http.build_request("GET", url + "events"), stream=True)
        second = http.send(http.build_request("GET", url + "events"), stream=True)
        events_1, events_2 = sse_events(first), sse_events(second)  # kept: dropping one closes its stream
        assert next(events_1)[0] == "fleet" and next(events_2)[0] == "fleet"
        assert app.state.streams.open == 2
        refused = http.get(url + "events", timeout=5)
        assert refused.status_code == 503 and refused.headers["retry-after"] == "10"
        assert "2 browsers already watch" in refused.text
        first.close()  # the browser tab closes: the server notices and gives the slot back
        assert eventually(lambda: app.state.streams.open == 1)
        with http.stream("GET", url + "events") as third:
            assert third.status_code == 200
        second.close()
        assert eventually(lambda: app.state.streams.open == 0)


def test_a_slow_rendering_spaces_the_next_ones_out_so_the_page_never_takes_the_schedulers_cpu():
    clock = [0.0]

    def slow() -> str:
        clock[0] += 2.0  # this rendering took 2 s
        return "<p>big fleet</p>"

    feed = Feed(slow, interval=1.0, clock=lambda: clock[0])
    feed.current()
    assert feed.renders == 1
    clock[0] += 7.0  # 9 s after the rendering began: within 5 × its 2 s
    feed.current()
    assert feed.renders == 1
    clock[0] += 1.0
    feed.current()
    assert feed.renders == 2


def test_many_watchers_share_one_rendering_per_interval():
    clock = [0.0]
    calls = []
    feed = Feed(lambda: calls.append(1) or "<p>x</p>", interval=1.0, clock=lambda: clock[0])
    for _ in range(50):
        assert feed.current() == (1, "<p>x</p>")
    assert len(calls) == 1
    clock[0] = 1.0
    assert feed.current() == (1, "<p>x</p>")  # rendered again, unchanged: same version
    assert len(calls) == 2


@pytest.mark.parametrize(
    "data, expected",
    [
        ("a", "event: fleet\ndata: a\n\n"),
        ("a\nb", "event: fleet\ndata: a\ndata: b\n\n"),
        ("a\r\nb\rc", "event: fleet\ndata: a\ndata: b\ndata: c\n\n"),  # no bare CR can end the event early
    ],
)
def test_every_line_of_an_event_is_its_own_data_field(data, expected):
    assert event("fleet", data) == expected
