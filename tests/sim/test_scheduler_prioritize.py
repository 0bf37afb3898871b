"""The simulated kube-scheduler calls extenders' prioritize verbs as kube-scheduler does
(pkg/scheduler/extender.go `Prioritize`, schedule_one.go `prioritizeNodes`): every interested entry
gets the feasible nodes, its scores × weight × 10 are added up, the highest total wins, and a failed
prioritize only loses its scores."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from https_testkit import JsonServer
from sim.scheduler import Scheduler, parse
from sim.scheduler.config import ExtenderConfig
from sim.scheduler.extender import Extender, ExtenderError
from waiting_testkit import wait_for


def node(name: str, unschedulable: bool = False) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "spec": {"unschedulable": unschedulable},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def pod(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"schedulerName": "dynmig-scheduler", "containers": [{"name": "c", "image": "x"}]},
    }


def scorer(points: dict[str, int] | object) -> Callable[[str, dict], object]:
    def reply(path: str, body: dict) -> object:
        if not isinstance(points, dict):
            return points
        return [{"Host": n, "Score": points.get(n, 0)} for n in body["NodeNames"]]

    return reply


def entry(url: str, weight: int, **extra) -> dict:
    return {
        "urlPrefix": url,
        "prioritizeVerb": "prioritize",
        "weight": weight,
        "nodeCacheCapable": True,
        **extra,
    }


def config(*entries: dict) -> dict:
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": "dynmig-scheduler"}],
        "extenders": list(entries),
    }


@pytest.fixture
def servers() -> Iterator[Callable[..., JsonServer]]:
    made: list[JsonServer] = []

    def make(reply) -> JsonServer:
        made.append(JsonServer(reply))
        return made[-1]

    yield make
    for s in made:
        s.stop()


@pytest.fixture
def schedule(apiserver) -> Iterator[Callable[[dict, int], list[str]]]:
    """schedule(config, pods) -> the node each of `pods` new pods was bound to."""
    for name in ("node-1", "node-2", "node-3"):
        apiserver.create(node(name, unschedulable=name == "node-3"))
    started: list[Scheduler] = []

    def run(doc: dict, pods: int) -> list[str]:
        sched = Scheduler(parse(doc), apiserver.api_client("kube-scheduler"), seed=1).start()
        started.append(sched)
        assert sched.wait_synced()
        names = [f"p{len(started)}-{i}" for i in range(pods)]
        for n in names:
            apiserver.create(pod(n))
        return [
            wait_for(
                lambda n=n: (apiserver.get("pods", n, "default") or {}).get("spec", {}).get("nodeName"), n
            )
            for n in names
        ]

    yield run
    for s in started:
        s.stop()


def test_the_node_an_extender_scores_highest_is_chosen_every_time(servers, schedule):
    ext = servers(scorer({"node-2": 10}))
    assert schedule(config(entry(f"http://127.0.0.1:{ext.port}", 5)), 6) == ["node-2"] * 6


def test_prioritize_is_sent_only_the_feasible_nodes(servers, schedule):
    ext = servers(scorer({"node-1": 3}))
    schedule(config(entry(f"http://127.0.0.1:{ext.port}", 1)), 1)
    [body] = [b for p, b in ext.calls if p == "/prioritize"]
    assert sorted(body["NodeNames"]) == ["node-1", "node-2"] and body["Nodes"] is None
    assert body["Pod"]["metadata"]["name"] == "p1-0"


def test_scores_of_two_extenders_are_weighted_and_added(servers, schedule):
    light, heavy = servers(scorer({"node-1": 10})), servers(scorer({"node-2": 5}))
    doc = config(entry(f"http://127.0.0.1:{light.port}", 1), entry(f"http://127.0.0.1:{heavy.port}", 3))
    assert schedule(doc, 4) == ["node-2"] * 4  # 5 × 3 beats 10 × 1


@pytest.mark.parametrize("reply", [{"Error": "not a list"}, [{"Host": "node-1", "Score": "high"}]])
def test_a_prioritize_that_fails_only_loses_its_scores(servers, schedule, reply):
    broken, working = servers(scorer(reply)), servers(scorer({"node-1": 1}))
    doc = config(entry(f"http://127.0.0.1:{broken.port}", 9), entry(f"http://127.0.0.1:{working.port}", 1))
    assert schedule(doc, 3) == ["node-1"] * 3


def test_an_extender_that_cannot_be_reached_scores_nothing_and_scheduling_goes_on(schedule):
    doc = config(entry("http://127.0.0.1:9", 1, httpTimeout="1s", ignorable=True))
    assert set(schedule(doc, 2)) <= {"node-1", "node-2"}


def test_a_reply_is_read_as_go_decodes_it():
    ext = Extender(ExtenderConfig(url_prefix="http://unused", prioritize_verb="prioritize", weight=2))
    server = JsonServer(
        lambda p, b: [{"host": "a", "score": 3}, {"Host": "b", "Score": 1}, {"Host": "a", "Score": 1}]
    )
    try:
        ext.url = f"http://127.0.0.1:{server.port}"
        nodes = [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]
        assert ext.prioritize({}, nodes) == {"a": (3 + 1) * 2 * 10, "b": 1 * 2 * 10}
        assert Extender(ExtenderConfig(url_prefix="http://unused")).prioritize({}, nodes) == {}
    finally:
        server.stop()
        ext.close()
    with pytest.raises(ExtenderError):
        bad = Extender(
            ExtenderConfig(url_prefix="http://127.0.0.1:9", prioritize_verb="p", weight=1, http_timeout=1)
        )
        bad.prioritize({}, nodes)
