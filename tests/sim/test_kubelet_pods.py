"""The pod side of the simulated kubelet: pods bound to its node run a workload on their MIG
devices, and the workload stops however the pod goes away (deleted, force-deleted, namespace
deleted), as a real kubelet stops the containers of a pod that is gone."""

from __future__ import annotations

import re
import signal
from types import SimpleNamespace

import pynvml
import pytest
from kubelet_testkit import TinyPlugin
from kubernetes import client
from nvml_testkit import A100, create_gi, full_ci, gpu0
from sim.apiserver import ApiServer
from sim.kubelet import IGNORE_SIGTERM, SimulatedKubelet, SimulatedPods
from sim.kubelet.pods import backoff_delay, device_count, grace_period
from sim.kubelet.runtime import mig_uuids
from waiting_testkit import wait_for

from plugin.api import deviceplugin_pb2 as pb

RESOURCE = "example.com/gpu"
NODE = "node-1"


@pytest.fixture
def world(node, socket_dir):
    """Three 1g MIG devices on one A100, a device plugin that hands them out, an API server that
    never removes a pod by itself (only the kubelet does), and the kubelet's pod side."""
    nvml = node(A100)
    handle = gpu0()
    info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE)
    for start in (0, 1, 2):
        full_ci(create_gi(handle, info.id, start, 1), 1)
    migs = [ci.mig_uuid for gpu in nvml.gpus() for gi in gpu.gpu_instances for ci in gi.compute_instances]
    api = ApiServer(reap_after_grace=False).start()
    kubelet = SimulatedKubelet(socket_dir, dial_timeout=2).start()
    plugin = TinyPlugin(socket_dir, RESOURCE, ids=migs).start()
    kubelet.wait_for_devices(RESOURCE, healthy=3)
    lines: list[str] = []
    pods = SimulatedPods(
        NODE,
        api.api_client("kubelet"),
        kubelet,
        nvml,
        RESOURCE,
        echo=lines.append,
        interval=0.05,
        log_path=api.log_path,
    ).start()
    yield SimpleNamespace(
        nvml=nvml, api=api, core=client.CoreV1Api(api.api_client()), pods=pods, lines=lines, migs=migs
    )
    pods.stop()
    plugin.stop()
    kubelet.stop()
    api.stop()


def _pod(
    name: str, namespace: str = "default", grace: int | None = 30, annotations: dict | None = None
) -> dict:
    spec = {
        "nodeName": NODE,
        "containers": [{"name": "main", "image": "cuda", "resources": {"limits": {RESOURCE: "1"}}}],
    }
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "spec": spec,
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
    }


def _busy(world) -> set[int]:
    return {p.pid for gpu in world.nvml.gpus() for p in gpu.processes}


def _gone(world, name: str, namespace: str = "default") -> bool:
    try:
        world.core.read_namespaced_pod(name, namespace)
    except client.ApiException as error:
        return error.status == 404
    return False


def _running(world, name: str, namespace: str = "default"):
    wait_for(
        lambda: world.core.read_namespaced_pod(name, namespace).status.phase == "Running", f"{name} Running"
    )
    record = world.pods.pods_by_name(namespace, name)
    assert record.processes, f"{name} has no workload process on its MIG device"
    return record


def test_a_running_pods_workload_runs_on_the_mig_device_the_plugin_handed_it(world):
    world.core.create_namespaced_pod("default", _pod("train"))
    record = _running(world, "train")
    device = record.env["main"]
    on = [
        (gpu.uuid, ci.mig_uuid)
        for gpu in world.nvml.gpus()
        for gi in gpu.gpu_instances
        for ci in gi.compute_instances
        for p in gpu.processes
        if (p.gi_id, p.ci_id) == (gi.gi_id, ci.ci_id)
    ]
    assert [m for _, m in on] == [device]


def test_a_containers_output_goes_to_the_log_file_the_api_server_serves(world):
    world.core.create_namespaced_pod("default", _pod("train"))
    record = _running(world, "train")
    world.core.delete_namespaced_pod("train", "default")
    wait_for(lambda: _gone(world, "train"), "the pod to be gone")
    text = world.api.log_path("default", "train", record.uid, "main").read_text()
    assert text.splitlines()[-2:] == [
        f"NVIDIA_VISIBLE_DEVICES={record.env['main']}; working",
        "SIGTERM: shut down cleanly",
    ]


def test_a_deleted_pods_workload_stops_and_the_kubelet_then_removes_the_pod(world):
    world.core.create_namespaced_pod("default", _pod("train"))
    _running(world, "train")
    world.core.delete_namespaced_pod("train", "default")  # graceful: 30 s, and the API server never reaps
    wait_for(lambda: _gone(world, "train"), "the kubelet to delete the pod once its workload stopped")
    assert _busy(world) == set()
    assert any(
        "default/train was deleted: stopping its containers (SIGTERM, 30s grace period)" in line
        for line in world.lines
    )


@pytest.mark.parametrize("how", ["force-deleted", "namespace deleted"])
def test_a_pod_that_vanishes_from_the_api_has_its_workload_stopped(world, how):
    world.core.create_namespace({"metadata": {"name": "team"}})
    world.core.create_namespaced_pod("team", _pod("train", "team"))
    _running(world, "train", "team")
    if how == "force-deleted":
        world.core.delete_namespaced_pod("train", "team", grace_period_seconds=0)
    else:
        world.core.delete_namespace("team")
    wait_for(lambda: not _busy(world), "the workload of the vanished pod to stop")
    wait_for(lambda: world.pods.pods_by_name("team", "train") is None, "the kubelet to be done with the pod")
    # force-deleted: gone at once; namespace deleted: gone, or (graceful, as kube-apiserver's
    # namespace controller deletes pods) marked for deletion first
    assert any(
        line.startswith(f"{NODE}: team/train ") and "stopping its containers (SIGTERM" in line
        for line in world.lines
    ), world.lines


def test_the_devices_of_a_stopped_pod_go_to_the_next_pod(world):
    for name in ("a", "b", "c"):
        world.core.create_namespaced_pod("default", _pod(name))
    for name in ("a", "b", "c"):
        _running(world, name)
    world.core.delete_namespaced_pod("a", "default", grace_period_seconds=0)
    wait_for(lambda: world.pods.pods_by_name("default", "a") is None, "the kubelet to be done with pod a")
    world.core.create_namespaced_pod("default", _pod("d"))
    record = _running(world, "d")
    assert record.allocation.ok and len(_busy(world)) == 3


def test_a_workload_that_ignores_sigterm_is_killed_once_the_grace_period_is_over(world):
    world.core.create_namespaced_pod(
        "default", _pod("stubborn", grace=2, annotations={IGNORE_SIGTERM: "true"})
    )
    record = _running(world, "stubborn")
    world.core.delete_namespaced_pod("stubborn", "default")
    wait_for(lambda: _gone(world, "stubborn"), "the kubelet to delete the pod after SIGKILL")
    assert _busy(world) == set()
    log = record.containers.logs()
    assert log.index("SIGTERM ignored") < log.index("killed (SIGKILL)")


class Crashy:
    """A pod's containers that exit whenever the test says so."""

    restartable = True

    def __init__(self) -> None:
        self.code: int | None = None
        self.starts = 1
        self.crash_on_start = 0  # this many restarts die at once (SIGKILL), like a crash loop

    def signal(self, sig: int) -> None:
        self.code = -sig

    def exit_code(self) -> int | None:
        return self.code

    def ready(self) -> bool:
        return self.code is None

    def restart(self) -> None:
        self.starts += 1
        self.code = None
        if self.crash_on_start > 0:
            self.crash_on_start -= 1
            self.code = -signal.SIGKILL

    def logs(self) -> str:
        return ""


def _daemon(world, crashy: Crashy, backoff=(0.1, 0.4)) -> SimulatedPods:
    world.pods.stop()
    world.pods = SimulatedPods(
        NODE,
        world.api.api_client("kubelet"),
        world.pods.kubelet,
        world.nvml,
        RESOURCE,
        runtime=lambda pod: crashy if pod["metadata"]["name"] == "daemon" else None,
        backoff=backoff,
        echo=world.lines.append,
        interval=0.05,
    ).start()
    daemon = _pod("daemon")
    del daemon["spec"]["containers"][0]["resources"]
    world.core.create_namespaced_pod("default", daemon)
    wait_for(
        lambda: world.core.read_namespaced_pod("daemon", "default").status.phase == "Running",
        "daemon Running",
    )
    return world.pods


def test_a_container_that_dies_is_restarted_after_a_back_off_that_doubles_up_to_its_cap(world):
    crashy = Crashy()
    _daemon(world, crashy)
    crashy.crash_on_start = 3
    crashy.code = -signal.SIGKILL
    wait_for(lambda: crashy.starts == 5, "four restarts")
    restarts = [line.split("restarting in ")[1] for line in world.lines if "restarting in" in line]
    assert restarts == ["0.1s", "0.2s", "0.4s", "0.4s"]
    assert any("main of default/daemon exited (signal 9); restarting in 0.1s" in line for line in world.lines)
    wait_for(
        lambda: (
            world.core.read_namespaced_pod("daemon", "default").status.container_statuses[0].restart_count
            == 4
        ),
        "restartCount 4 in the pod's status",
    )


def test_with_the_api_server_down_a_dead_container_is_still_restarted(world):
    crashy = Crashy()
    _daemon(world, crashy)
    world.api.down("refuse")
    try:
        crashy.code = 0
        wait_for(lambda: crashy.starts == 2, "the restart without the API")
    finally:
        world.api.up()
    wait_for(
        lambda: (
            world.core.read_namespaced_pod("daemon", "default").status.container_statuses[0].restart_count
            == 1
        ),
        "the restart to reach the pod's status once the API is back",
    )


@pytest.mark.parametrize(
    ("meta", "spec", "seconds"),
    [
        ({}, {}, 30.0),  # terminationGracePeriodSeconds defaults to 30
        ({}, {"terminationGracePeriodSeconds": 5}, 5.0),
        (
            {"deletionGracePeriodSeconds": 7},
            {"terminationGracePeriodSeconds": 60},
            7.0,
        ),  # the deletion's wins
        ({"deletionGracePeriodSeconds": 0}, {}, 2.0),  # kubelet's 2 s minimum
    ],
)
def test_the_grace_period_is_the_deletions_else_the_pods_and_at_least_two_seconds(meta, spec, seconds):
    assert grace_period({"metadata": meta, "spec": spec}) == seconds


def test_the_back_off_doubles_from_its_start_and_stops_at_its_cap():
    assert [backoff_delay(n, (10.0, 300.0)) for n in range(7)] == [10, 20, 40, 80, 160, 300, 300]


def test_the_mig_devices_are_read_from_the_env_var_cdi_names_or_cdi_annotations():
    env = pb.ContainerAllocateResponse(envs={"NVIDIA_VISIBLE_DEVICES": "MIG-aaa,MIG-bbb"})
    cdi = pb.ContainerAllocateResponse(cdi_devices=[pb.CDIDevice(name="nvidia.com/gpu=MIG-ccc")])
    notes = pb.ContainerAllocateResponse(annotations={"cdi.k8s.io/x": "nvidia.com/gpu=MIG-ddd"})
    assert mig_uuids([env, cdi, notes, None]) == ["MIG-aaa", "MIG-bbb", "MIG-ccc", "MIG-ddd"]


@pytest.mark.parametrize(
    ("value", "count"), [(1, 1), ("2", 2), ("1e0", 1), ("0.5", 1), ("1k", 1000), ("0", 0)]
)
def test_a_device_count_is_read_as_a_kubernetes_quantity_rounded_up(value, count):
    assert device_count(value) == count


@pytest.mark.parametrize("value", ["one", "1e999", "-1", "2Ki", "1.5.5", True, None, "9" * 5000])
def test_a_device_count_that_is_no_quantity_or_absurd_is_refused(value):
    with pytest.raises(ValueError):
        device_count(value)


def test_a_pod_with_a_bad_device_count_fails_alone_and_the_next_pod_still_runs(world):
    bad = _pod("bad")
    bad["spec"]["containers"][0]["resources"]["limits"][RESOURCE] = "5000"  # a quantity, but no device count
    world.core.create_namespaced_pod("default", bad)
    world.core.create_namespaced_pod("default", _pod("good"))
    _running(world, "good")
    wait_for(lambda: world.core.read_namespaced_pod("bad", "default").status.phase == "Failed", "bad to fail")
    message = world.core.read_namespaced_pod("bad", "default").status.message
    # the API server may store 5000 in canonical form (5k): the same quantity either way
    assert re.search(
        r"container 'main': example.com/gpu: '(5000|5k)' is not a device count between 0 and 1024", message
    ), message


def test_pending_pods_are_admitted_one_at_a_time_oldest_first(world, socket_dir):
    """kubelet's HandlePodAdditions sorts new pods by creation time and admits each in turn, its
    Allocate calls inside the admission (pkg/kubelet/kubelet.go, pkg/kubelet/cm)."""
    world.pods.paused.set()  # the running kubelet admits nothing; this one is driven by hand
    agent = SimulatedPods(NODE, world.api.api_client("kubelet"), world.pods.kubelet, world.nvml, RESOURCE)
    listed = [
        {
            **_pod(name),
            "metadata": {
                "name": name,
                "namespace": "default",
                "uid": f"uid-{name}",
                "creationTimestamp": stamp,
            },
        }
        for name, stamp in (
            ("late", "2026-01-01T00:00:09Z"),
            ("early", "2026-01-01T00:00:01Z"),
            ("middle", "2026-01-01T00:00:05Z"),
        )
    ]
    agent._list = lambda: [dict(p) for p in listed]
    before = len(world.pods.kubelet.allocations)
    agent.sync()
    admitted = [a.pod_uid for a in world.pods.kubelet.allocations[before:]]
    assert admitted == ["uid-early", "uid-middle", "uid-late"]
    assert all(
        c.allocate_seconds is not None for a in world.pods.kubelet.allocations[before:] for c in a.containers
    )
