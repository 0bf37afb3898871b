"""kube.reflector against the simulated API server: list, watch, bookmarks, 410, drops, long lines."""

from __future__ import annotations

import contextlib
import functools
import itertools
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from sim.apiserver import ApiServer
from waiting_testkit import eventually

from kube.reflector import MAX_LINE, LineTooLong, Reflector, lines


def config_map(name: str, namespace: str = "team", **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": data,
    }


class Mirror:
    """What a reflector's callbacks saw: the objects by name, the lists, the events."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.lists: list[list[str]] = []
        self.events: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def replace(self, items: list[dict[str, Any]]) -> None:
        with self._lock:
            self.objects = {item["metadata"]["name"]: item for item in items}
            self.lists.append(sorted(self.objects))

    def event(self, kind: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        with self._lock:
            self.events.append((kind, name))
            if kind == "DELETED":
                self.objects.pop(name, None)
            else:
                self.objects[name] = obj


@pytest.fixture
def namespaces(apiserver: ApiServer) -> ApiServer:
    for ns in ("team", "other"):
        apiserver.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    return apiserver


@contextlib.contextmanager
def reflect(
    server: ApiServer, mirror: Mirror, namespace: str = "team", **options: Any
) -> Iterator[Reflector]:
    core = client.CoreV1Api(server.api_client("admin"))
    reflector = Reflector(
        f"configmaps in {namespace}",
        functools.partial(core.list_namespaced_config_map, namespace),
        mirror.replace,
        mirror.event,
        **options,
    )
    reflector.start()
    try:
        assert reflector.synced.wait(10)
        yield reflector
    finally:
        reflector.stop(5)


@pytest.fixture
def mirror() -> Mirror:
    return Mirror()


def test_a_reflector_lists_what_exists_then_follows_changes_without_listing_again(namespaces, mirror):
    namespaces.create(config_map("before"))
    with reflect(namespaces, mirror) as reflector:
        assert mirror.lists == [["before"]]
        namespaces.create(config_map("after"))
        assert eventually(lambda: ("ADDED", "after") in mirror.events)
        assert reflector.relists == 1


def test_a_reflector_lists_again_when_the_servers_history_no_longer_reaches_its_resource_version(
    namespaces, mirror
):
    namespaces.create(config_map("a"))
    with reflect(namespaces, mirror, backoff=(0.01, 0.05)) as reflector:
        namespaces.create(config_map("b"))
        assert eventually(lambda: "b" in mirror.objects)
        namespaces.faults.fail_next(10_000, verb="watch", resource="configmaps", code=503)
        namespaces.faults.cut_watches()
        assert eventually(lambda: reflector._response is None)  # disconnected, and kept out
        namespaces.create(config_map("c"))  # a change the reflector does not see...
        namespaces.compact()  # ...then the server forgets every version before now
        namespaces.faults.clear()  # the next watch resumes from b's version: 410
        assert eventually(lambda: reflector.relists >= 2)
        assert eventually(lambda: "c" in mirror.objects)
        assert sorted(mirror.objects) == ["a", "b", "c"]


def test_bookmarks_move_a_quiet_watchs_resource_version_forward(tmp_path, mirror):
    server = ApiServer(workdir=tmp_path / "apiserver", bookmark_interval=0.1).start()
    try:
        for ns in ("team", "other"):
            server.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        with reflect(server, mirror) as reflector:
            listed = int(reflector.resource_version)
            latest = server.create(config_map("elsewhere", "other"))["metadata"]["resourceVersion"]
            assert int(latest) > listed
            # nothing in "team" changed, yet the watch learns the server's newer version
            assert eventually(lambda: int(reflector.resource_version) >= int(latest))
            assert mirror.events == []
            assert reflector.relists == 1
    finally:
        server.stop()


def test_a_dropped_watch_resumes_from_the_last_resource_version_and_misses_nothing(namespaces, mirror):
    with reflect(namespaces, mirror, backoff=(0.01, 0.05)) as reflector:
        namespaces.create(config_map("first"))
        assert eventually(lambda: ("ADDED", "first") in mirror.events)
        # "first" may come from the list before the watch is open; cut only a watch that is open
        assert eventually(lambda: reflector._response is not None)
        watches = reflector.watches
        namespaces.faults.cut_watches()
        namespaces.create(config_map("second"))
        assert eventually(lambda: ("ADDED", "second") in mirror.events)
        assert reflector.watches > watches
        assert reflector.relists == 1  # resumed, not listed again
        assert mirror.events.count(("ADDED", "first")) == 1


def test_a_reflector_keeps_trying_while_the_api_server_is_down_and_lists_when_it_returns(namespaces, mirror):
    with reflect(namespaces, mirror, backoff=(0.01, 0.05)) as reflector:
        namespaces.faults.fail_next(3, verb="watch", code=500)
        namespaces.faults.cut_watches()
        namespaces.create(config_map("later"))
        assert eventually(lambda: "later" in mirror.objects)
        assert reflector.relists == 1


def test_a_watch_line_longer_than_the_bound_is_not_buffered_and_the_kind_is_listed_again(namespaces, mirror):
    with reflect(namespaces, mirror, max_line=2048, backoff=(0.01, 0.05)) as reflector:
        namespaces.create(config_map("big", blob="x" * 20_000))
        # the event's line is over the bound: the watch is dropped and the list brings the object
        assert eventually(lambda: reflector.relists >= 2)
        assert eventually(lambda: "big" in mirror.objects)
        assert ("ADDED", "big") not in mirror.events


def test_reading_lines_stops_at_the_bound_instead_of_buffering_an_endless_line():
    endless = itertools.repeat(b"x" * 4096)
    with pytest.raises(LineTooLong):
        for _ in lines(endless, limit=64 * 1024):
            pass


def test_lines_split_across_chunks_come_out_whole_and_blank_lines_are_skipped():
    chunks = [b'{"a":', b"1}\n\n", b'{"b":2}\n{"c"', b":3}"]
    assert list(lines(chunks, limit=MAX_LINE)) == [b'{"a":1}', b'{"b":2}', b'{"c":3}']


def test_stopping_a_reflector_closes_its_open_watch(namespaces, mirror):
    with reflect(namespaces, mirror, watch_timeout=300) as reflector:
        assert eventually(lambda: reflector._response is not None)
        reflector.stop(5)
        assert not reflector._thread.is_alive()


def test_a_quiet_watch_that_reaches_its_timeout_is_resumed_without_a_warning(namespaces, mirror, caplog):
    caplog.set_level("WARNING", logger="kube.reflector")
    # timeoutSeconds=1: the server ends each watch after a second, with no event and no bookmark
    with reflect(namespaces, mirror, watch_timeout=1, backoff=(5.0, 5.0)) as reflector:
        assert eventually(lambda: reflector.watches >= 3)  # with a 5 s backoff this would take 10 s
        namespaces.create(config_map("late"))
        assert eventually(lambda: ("ADDED", "late") in mirror.events)
    assert [r.getMessage() for r in caplog.records if r.name == "kube.reflector"] == []


def test_listed_and_watched_objects_come_without_their_managed_fields_and_keep_the_rest(namespaces, mirror):
    core = client.CoreV1Api(namespaces.api_client("admin"))
    core.create_namespaced_config_map("team", config_map("before", a="1"))
    stored = core.read_namespaced_config_map("before", "team")
    assert stored.metadata.managed_fields, "the API server records who wrote the object"
    with reflect(namespaces, mirror):
        listed = mirror.objects["before"]
        assert "managedFields" not in listed["metadata"]
        assert listed["data"] == {"a": "1"} and listed["metadata"]["resourceVersion"]
        core.patch_namespaced_config_map("before", "team", {"data": {"a": "2"}})
        assert eventually(lambda: mirror.objects["before"]["data"] == {"a": "2"})
        assert "managedFields" not in mirror.objects["before"]["metadata"]
