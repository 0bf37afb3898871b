"""The simulated kube-scheduler calls a scheduler extender exactly as kube-scheduler does, and posts
its events as kube-scheduler does: events.k8s.io/v1 through client-go's events broadcaster rules
(reporting controller and instance, action, a series for repeats), readable through core/v1 and
kubectl 1.35 as a cluster shows them."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from https_testkit import JsonServer, make_pki
from kubernetes import client
from sim.scheduler import ConfigError, Scheduler, messages, parse
from sim.scheduler.api import ApiWriter
from sim.scheduler.recorder import EventRecorder
from waiting_testkit import wait_for

GPU_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "train", "namespace": "default"},
    "spec": {
        "schedulerName": "dynmig-scheduler",
        "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpumem": "8000"}}}],
    },
}


def node(name: str, ready: bool = True, unschedulable: bool = False) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"gpu": "h100"}},
        "spec": {"unschedulable": unschedulable},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


class Extender(JsonServer):
    """A tiny extender: records each call's JSON body; `filter`/`bind` decide the replies."""

    def __init__(
        self,
        filter_fn: Callable[[dict], dict],
        bind_fn: Callable[[dict], dict] | None = None,
        tls: tuple | None = None,
    ):
        def answer(path: str, body: dict) -> dict:
            return filter_fn(body) if path == "/filter" else (bind_fn or (lambda b: {"Error": ""}))(body)

        super().__init__(answer, tls=tls)

    def bodies(self, path: str) -> list[dict]:
        return [b for p, b in self.calls if p == path]


def config(url: str, **extender) -> dict:
    ext = {
        "urlPrefix": url,
        "filterVerb": "filter",
        "bindVerb": "bind",
        "nodeCacheCapable": True,
        "weight": 1,
        "httpTimeout": "5s",
        "enableHTTPS": False,
        "managedResources": [
            {"name": "nvidia.com/gpu", "ignoredByScheduler": True},
            {"name": "nvidia.com/gpumem", "ignoredByScheduler": True},
        ],
    }
    ext.update(extender)
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": "dynmig-scheduler"}],
        "extenders": [ext],
    }


@pytest.fixture
def cluster(apiserver):
    apiserver.create(node("node-1"))
    apiserver.create(node("node-2"))
    return apiserver


@pytest.fixture
def run_scheduler(apiserver) -> Iterator[Callable[[dict], Scheduler]]:
    started: list[Scheduler] = []

    def start(doc: dict) -> Scheduler:
        sched = Scheduler(
            parse(doc), apiserver.api_client("kube-scheduler"), initial_backoff=0.05, max_backoff=0.2, seed=1
        ).start()
        started.append(sched)
        assert sched.wait_synced()
        return sched

    yield start
    for s in started:
        s.stop()


@pytest.fixture
def extenders() -> Iterator[Callable[..., Extender]]:
    made: list[Extender] = []

    def make(*args, **kwargs) -> Extender:
        made.append(Extender(*args, **kwargs))
        return made[-1]

    yield make
    for e in made:
        e.stop()


def binder(apiserver) -> Callable[[dict], dict]:
    """An extender bind verb that binds through the API, as HAMi's /bind does."""
    core = client.CoreV1Api(apiserver.api_client("scheduler"))

    def bind(args: dict) -> dict:
        body = {
            "metadata": {"name": args["PodName"], "uid": args["PodUID"]},
            "target": {"kind": "Node", "name": args["Node"]},
        }
        core.create_namespaced_pod_binding(
            args["PodName"], args["PodNamespace"], body, _preload_content=False
        )
        return {"Error": ""}

    return bind


def events(apiserver, reason: str) -> list[dict]:
    core = client.CoreV1Api(apiserver.api_client("admin"))
    return [
        e
        for e in json.loads(core.list_namespaced_event("default", _preload_content=False).data)["items"]
        if e["reason"] == reason
    ]


def test_a_node_cache_capable_extender_gets_pascal_case_node_names_and_binds_the_pod(
    cluster, run_scheduler, extenders
):
    ext = extenders(
        lambda args: {
            "NodeNames": ["node-2"],
            "FailedNodes": {"node-1": "no free slice"},
            "FailedAndUnresolvableNodes": None,
            "Error": "",
        },
        binder(cluster),
    )
    run_scheduler(config(f"http://127.0.0.1:{ext.port}"))
    core = client.CoreV1Api(cluster.api_client("admin"))
    created = core.create_namespaced_pod("default", GPU_POD)
    wait_for(lambda: core.read_namespaced_pod("train", "default").spec.node_name == "node-2")
    (filt,) = ext.bodies("/filter")
    assert set(filt) == {"Pod", "Nodes", "NodeNames"}
    assert filt["Nodes"] is None and sorted(filt["NodeNames"]) == ["node-1", "node-2"]
    assert "kind" not in filt["Pod"] and filt["Pod"]["metadata"]["uid"] == created.metadata.uid
    # The API server stored the quantity canonically (8000 -> 8k), so that is what the extender sees.
    assert filt["Pod"]["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpumem": "8k"}
    (bind,) = ext.bodies("/bind")
    assert bind == {
        "PodName": "train",
        "PodNamespace": "default",
        "PodUID": created.metadata.uid,
        "Node": "node-2",
    }
    assert (
        wait_for(lambda: events(cluster, "Scheduled"))[0]["message"]
        == "Successfully assigned default/train to node-2"
    )


def test_an_extender_without_node_cache_gets_a_full_node_list_and_answers_with_nodes(
    cluster, run_scheduler, extenders
):
    def keep_node_1(args: dict) -> dict:
        items = [n for n in args["Nodes"]["items"] if n["metadata"]["name"] == "node-1"]
        return {"Nodes": {"metadata": {}, "items": items}, "NodeNames": None, "FailedNodes": {}, "Error": ""}

    ext = extenders(keep_node_1)
    run_scheduler(config(f"http://127.0.0.1:{ext.port}", nodeCacheCapable=False, bindVerb=""))
    core = client.CoreV1Api(cluster.api_client("admin"))
    core.create_namespaced_pod("default", GPU_POD)
    wait_for(lambda: core.read_namespaced_pod("train", "default").spec.node_name == "node-1")
    (filt,) = ext.bodies("/filter")
    assert filt["NodeNames"] is None and set(filt["Nodes"]) == {"metadata", "items"}
    assert sorted(n["metadata"]["name"] for n in filt["Nodes"]["items"]) == ["node-1", "node-2"]
    assert all("kind" not in n for n in filt["Nodes"]["items"])
    assert ext.bodies("/bind") == []


def test_a_pod_without_managed_resources_never_reaches_the_extender(cluster, run_scheduler, extenders):
    ext = extenders(lambda args: {"Error": "should not be called"})
    run_scheduler(config(f"http://127.0.0.1:{ext.port}"))
    core = client.CoreV1Api(cluster.api_client("admin"))
    plain = {
        **GPU_POD,
        "spec": {"schedulerName": "dynmig-scheduler", "containers": [{"name": "c", "image": "x"}]},
    }
    core.create_namespaced_pod("default", plain)
    wait_for(lambda: core.read_namespaced_pod("train", "default").spec.node_name)
    assert ext.calls == []


def test_a_pod_for_another_scheduler_is_left_alone(cluster, run_scheduler, extenders):
    ext = extenders(lambda args: {"NodeNames": args["NodeNames"], "Error": ""})
    sched = run_scheduler(config(f"http://127.0.0.1:{ext.port}", bindVerb=""))
    core = client.CoreV1Api(cluster.api_client("admin"))
    core.create_namespaced_pod(
        "default", {**GPU_POD, "spec": {**GPU_POD["spec"], "schedulerName": "default-scheduler"}}
    )
    core.create_namespaced_pod("default", {**GPU_POD, "metadata": {"name": "mine"}})
    wait_for(lambda: core.read_namespaced_pod("mine", "default").spec.node_name)
    assert core.read_namespaced_pod("train", "default").spec.node_name is None
    # The binding thread counts the pod just after its Binding lands, so the count may trail the read.
    assert wait_for(lambda: sched.stats.scheduled == 1)


def test_no_fit_records_failed_scheduling_in_kube_scheduler_words_and_retries(
    cluster, run_scheduler, extenders
):
    ext = extenders(
        lambda args: {
            "NodeNames": None,
            "FailedNodes": {"node-1": "1g.24gb needs a free slice", "node-2": "GPU cordoned"},
            "Error": "",
        }
    )
    sched = run_scheduler(config(f"http://127.0.0.1:{ext.port}"))
    core = client.CoreV1Api(cluster.api_client("admin"))
    core.create_namespaced_pod("default", GPU_POD)
    failed = wait_for(lambda: events(cluster, "FailedScheduling"))
    assert failed[0]["type"] == "Warning"
    assert failed[0]["message"] == "0/2 nodes are available: 1 1g.24gb needs a free slice, 1 GPU cordoned."
    wait_for(lambda: len(ext.bodies("/filter")) >= 3)
    pod = core.read_namespaced_pod("train", "default")
    assert pod.status.phase == "Pending" and pod.spec.node_name is None
    cond = next(c for c in pod.status.conditions if c.type == "PodScheduled")
    assert cond.status == "False" and cond.reason == "Unschedulable"
    # Repeats about the same pod version form a series (events.k8s.io/v1), written at its second
    # occurrence with count 2.
    assert wait_for(
        lambda: any((e.get("series") or {}).get("count", 0) >= 2 for e in events(cluster, "FailedScheduling"))
    )
    assert sched.stats.scheduled == 0 and sched.stats.unschedulable >= 3


def test_in_tree_fit_reasons_count_nodes_that_are_not_ready_or_cordoned(apiserver, run_scheduler, extenders):
    apiserver.create(node("node-1", ready=False))
    apiserver.create(node("node-2", unschedulable=True))
    ext = extenders(lambda args: {"NodeNames": args["NodeNames"], "Error": ""})
    run_scheduler(config(f"http://127.0.0.1:{ext.port}"))
    client.CoreV1Api(apiserver.api_client("admin")).create_namespaced_pod("default", GPU_POD)
    failed = wait_for(lambda: events(apiserver, "FailedScheduling"))
    assert failed[0]["message"] == (
        "0/2 nodes are available: 1 node(s) had untolerated taint "
        "{node.kubernetes.io/not-ready: }, 1 node(s) were unschedulable."
    )
    assert ext.calls == []


@pytest.mark.parametrize("ignorable", [True, False])
def test_an_unreachable_extender_fails_the_attempt_unless_it_is_ignorable(cluster, run_scheduler, ignorable):
    run_scheduler(config("http://127.0.0.1:1", ignorable=ignorable, bindVerb=""))
    core = client.CoreV1Api(cluster.api_client("admin"))
    core.create_namespaced_pod("default", GPU_POD)
    if ignorable:
        wait_for(lambda: core.read_namespaced_pod("train", "default").spec.node_name)
    else:
        failed = wait_for(lambda: events(cluster, "FailedScheduling"))
        assert failed[0]["message"].startswith('Post "http://127.0.0.1:1/filter"')
        assert core.read_namespaced_pod("train", "default").spec.node_name is None


def test_an_https_extender_is_verified_against_the_configured_ca(cluster, run_scheduler, extenders, tmp_path):
    import base64

    ca, crt, key = make_pki(tmp_path, "dynmig.dynmig.svc")
    ext = extenders(lambda args: {"NodeNames": ["node-1"], "Error": ""}, tls=(crt, key))
    run_scheduler(
        config(
            f"https://127.0.0.1:{ext.port}",
            enableHTTPS=True,
            bindVerb="",
            tlsConfig={"insecure": False, "caData": base64.b64encode(ca).decode()},
        )
    )
    core = client.CoreV1Api(cluster.api_client("admin"))
    core.create_namespaced_pod("default", GPU_POD)
    wait_for(lambda: core.read_namespaced_pod("train", "default").spec.node_name == "node-1")


@pytest.mark.parametrize(
    "change, field",
    [
        ({"httpTimeout": "thirty"}, "extenders[0].httpTimeout"),
        ({"urlPrefix": ""}, "extenders[0].urlPrefix"),
        ({"managedResources": [{"ignoredByScheduler": True}]}, "extenders[0].managedResources[0].name"),
        ({"prioritizeVerb": "prioritize", "weight": 0}, "extenders[0].weight"),
    ],
)
def test_a_bad_scheduler_configuration_is_refused_naming_the_field(change, field):
    with pytest.raises(ConfigError) as err:
        parse(config("http://x", **change))
    assert str(err.value).startswith(field)


def test_the_configuration_honours_timeouts_and_tls_settings():
    cfg = parse(
        config(
            "https://127.0.0.1:443",
            httpTimeout="1m30s",
            enableHTTPS=True,
            tlsConfig={"insecure": True},
            ignorable=True,
        )
    )
    (ext,) = cfg.extenders
    assert ext.http_timeout == 90 and ext.tls.insecure and ext.ignorable and ext.node_cache_capable
    assert cfg.scheduler_names == ("dynmig-scheduler",)
    assert parse(config("http://x", httpTimeout=None)).extenders[0].http_timeout == 5


def test_an_ignorable_binder_that_fails_leaves_the_binding_to_the_default_binder(
    cluster, run_scheduler, extenders
):
    ext = extenders(
        lambda args: {"NodeNames": args["NodeNames"], "Error": ""}, lambda args: {"Error": "cannot bind now"}
    )
    run_scheduler(config(f"http://127.0.0.1:{ext.port}", ignorable=True))
    core = client.CoreV1Api(cluster.api_client("admin"))
    core.create_namespaced_pod("default", GPU_POD)
    wait_for(lambda: core.read_namespaced_pod("train", "default").spec.node_name)
    assert len(ext.bodies("/bind")) == 1
    (scheduled,) = wait_for(lambda: events(cluster, "Scheduled"))
    assert scheduled["message"].startswith("Successfully assigned default/train to node-")


# ---- events ----------------------------------------------------------------------------------


def v1_events(apiserver, reason: str) -> list[dict[str, Any]]:
    ev1 = client.EventsV1Api(apiserver.api_client("admin"))
    items = json.loads(ev1.list_namespaced_event("default", _preload_content=False).data)["items"]
    return [e for e in items if e["reason"] == reason]


def refusing(args: dict) -> dict:
    return {
        "NodeNames": None,
        "FailedNodes": {"node-1": "no free slice", "node-2": "no free slice"},
        "Error": "",
    }


def test_a_bound_pod_gets_a_scheduled_event_from_the_profile_with_action_binding(
    cluster, run_scheduler, extenders, run
):
    ext = extenders(lambda args: {"NodeNames": args["NodeNames"], "Error": ""})
    run_scheduler(config(f"http://127.0.0.1:{ext.port}", bindVerb=""))
    core = client.CoreV1Api(cluster.api_client("admin"))
    pod = core.create_namespaced_pod("default", GPU_POD)
    (event,) = wait_for(lambda: v1_events(cluster, "Scheduled"))
    assert event["reportingController"] == "dynmig-scheduler"
    assert event["reportingInstance"].startswith("dynmig-scheduler-")
    assert event["action"] == "Binding" and event["type"] == "Normal"
    assert event["regarding"]["uid"] == pod.metadata.uid and event["regarding"]["kind"] == "Pod"
    assert event["note"].startswith("Successfully assigned default/train to node-")
    assert event["eventTime"] and event["metadata"]["name"].startswith("train.")
    assert "series" not in event
    # What an operator runs: both of kubectl's event views show it.
    assert "Successfully assigned default/train" in run("get", "events", "-n", "default")
    assert "Successfully assigned default/train" in run("events", "-n", "default", "--for", "pod/train")


def test_repeated_refusals_of_one_pod_version_become_one_event_with_a_series(
    cluster, run_scheduler, extenders
):
    ext = extenders(refusing)
    sched = run_scheduler(config(f"http://127.0.0.1:{ext.port}"))
    client.CoreV1Api(cluster.api_client("admin")).create_namespaced_pod("default", GPU_POD)
    wait_for(lambda: sched.stats.unschedulable >= 5)
    series = wait_for(lambda: [e for e in v1_events(cluster, "FailedScheduling") if e.get("series")])
    # Attempts on the same pod version share one event instead of one each.
    assert len(v1_events(cluster, "FailedScheduling")) < sched.stats.unschedulable
    for event in series:
        assert event["action"] == "Scheduling" and event["type"] == "Warning"
        assert event["note"] == "0/2 nodes are available: 2 no free slice."
        # Between refreshes the API holds the count of the series' first write: 2.
        assert event["series"]["count"] == 2


def test_a_finished_series_writes_its_final_count(apiserver):
    writer = ApiWriter(apiserver.api_client("kube-scheduler"))
    recorder = EventRecorder(writer, "host-1", finish_time=0.2)
    pod = {"metadata": {"name": "train", "namespace": "default", "uid": "u-1", "resourceVersion": "7"}}
    try:
        for _ in range(5):
            recorder.record(pod, "Warning", "FailedScheduling", "Scheduling", "0/1 nodes are available.")
        (event,) = wait_for(
            lambda: [
                e for e in v1_events(apiserver, "FailedScheduling") if e.get("series", {}).get("count") == 5
            ]
        )
    finally:
        recorder.stop()
    assert event["reportingController"] == "default-scheduler"
    assert event["reportingInstance"] == "default-scheduler-host-1"
    assert event["regarding"]["resourceVersion"] == "7"


def test_a_note_over_the_api_limit_is_cut_to_1024_bytes_as_kube_scheduler_does(apiserver):
    writer = ApiWriter(apiserver.api_client("kube-scheduler"))
    recorder = EventRecorder(writer, "host-1")
    pod = {"metadata": {"name": "big", "namespace": "default", "uid": "u-2"}}
    try:
        recorder.record(pod, "Warning", "FailedScheduling", "Scheduling", messages.truncated("é" * 2000))
        (event,) = wait_for(lambda: v1_events(apiserver, "FailedScheduling"))
    finally:
        recorder.stop()
    assert len(event["note"].encode()) <= 1024 and event["note"].endswith(" ...")


def test_the_scheduler_counts_the_wall_time_of_its_cycles_and_of_the_extender_filter_calls_in_them(
    cluster, run_scheduler, extenders
):
    def slow_keep_all(args: dict) -> dict:
        time.sleep(0.2)
        return {"NodeNames": args["NodeNames"], "Error": ""}

    ext = extenders(slow_keep_all, binder(cluster))
    sched = run_scheduler(config(f"http://127.0.0.1:{ext.port}"))
    core = client.CoreV1Api(cluster.api_client("admin"))
    core.create_namespaced_pod("default", GPU_POD)
    wait_for(lambda: sched.stats.scheduled == 1)
    (extender,) = sched.extenders
    assert sched.stats.attempts == extender.filter_calls == 1
    # the filter call took the extender's 0.2 s at least, and it is part of the cycle
    assert 0.2 <= extender.filter_seconds <= sched.stats.cycle_seconds


def mig_pod(name: str, resource: str = "nvidia.com/mig-1g.10gb", count: str = "1") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": "dynmig-scheduler",
            "containers": [{"name": "c", "image": "x", "resources": {"limits": {resource: count}}}],
        },
    }


def test_a_pod_asking_an_extended_resource_no_node_has_stays_pending_with_kube_schedulers_reason(
    cluster, run_scheduler, extenders
):
    ext = extenders(lambda args: {"NodeNames": args["NodeNames"], "Error": ""})
    run_scheduler(config(f"http://127.0.0.1:{ext.port}", bindVerb=""))
    core = client.CoreV1Api(cluster.api_client("admin"))
    core.create_namespaced_pod("default", mig_pod("legacy"))
    failed = wait_for(lambda: events(cluster, "FailedScheduling"))
    assert failed[0]["message"] == "0/2 nodes are available: 2 Insufficient nvidia.com/mig-1g.10gb."
    pod = core.read_namespaced_pod("legacy", "default")
    assert pod.status.phase == "Pending" and pod.spec.node_name is None


def test_pods_asking_an_extended_resource_fill_the_node_that_advertises_it_and_the_next_waits(
    apiserver, run_scheduler, extenders
):
    apiserver.create(node("node-1"))
    apiserver.create(
        {**node("node-2"), "status": {**node("node-2")["status"], "allocatable": {"example.com/fpga": "2"}}}
    )
    ext = extenders(lambda args: {"NodeNames": args["NodeNames"], "Error": ""})
    run_scheduler(config(f"http://127.0.0.1:{ext.port}", bindVerb=""))
    core = client.CoreV1Api(apiserver.api_client("admin"))
    for name in ("fpga-1", "fpga-2", "fpga-3"):
        core.create_namespaced_pod("default", mig_pod(name, "example.com/fpga"))
    names = ("fpga-1", "fpga-2", "fpga-3")
    wait_for(lambda: events(apiserver, "FailedScheduling"))
    wait_for(lambda: sum(bool(core.read_namespaced_pod(n, "default").spec.node_name) for n in names) == 2)
    placed = {n: core.read_namespaced_pod(n, "default").spec.node_name for n in names}
    assert sorted(map(str, placed.values())) == ["None", "node-2", "node-2"]
    message = events(apiserver, "FailedScheduling")[0]["message"]
    assert message == "0/2 nodes are available: 2 Insufficient example.com/fpga."
    waiting = next(n for n, on in placed.items() if on is None)
    done = next(n for n, on in placed.items() if on)
    core.delete_namespaced_pod(done, "default", grace_period_seconds=0)
    wait_for(lambda: core.read_namespaced_pod(waiting, "default").spec.node_name == "node-2")


@pytest.mark.parametrize(("ignored", "scheduled"), [(True, True), (False, False)])
def test_a_managed_resource_is_left_to_the_extender_only_when_marked_ignored_by_scheduler(
    cluster, run_scheduler, extenders, ignored, scheduled
):
    ext = extenders(lambda args: {"NodeNames": args["NodeNames"], "Error": ""})
    managed = [{"name": "nvidia.com/gpumem", "ignoredByScheduler": ignored}]
    run_scheduler(config(f"http://127.0.0.1:{ext.port}", bindVerb="", managedResources=managed))
    core = client.CoreV1Api(cluster.api_client("admin"))
    core.create_namespaced_pod("default", GPU_POD)
    if scheduled:
        assert wait_for(lambda: core.read_namespaced_pod("train", "default").spec.node_name)
    else:
        failed = wait_for(lambda: events(cluster, "FailedScheduling"))
        assert failed[0]["message"] == "0/2 nodes are available: 2 Insufficient nvidia.com/gpumem."
        assert ext.calls == []
