"""`dynmig dra-plugin` behind the simulated kubelet: kubelet's plugin watcher finds it in the
registry dir, its DRA manager prepares a pod's ResourceClaim through the plugin before the
containers start and unprepares it after they stopped; the container runtime resolves the CDI
device the plugin returned from the spec it wrote. kube-scheduler's part (the claim's allocation and
reservation) is written here as the scheduler writes it, from the pool the plugin published."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes import client
from sim.apiserver import ApiServer
from sim.kubelet import SimulatedKubelet, SimulatedPods
from sim.kubelet.dra import DraManager
from sim.kubelet.plugin_watcher import PluginWatcher
from sim.nvml import SimulatedNvml
from waiting_testkit import wait_for

from base.policyfiles import default_allowlist
from mig.allowlist import DeviceConfig
from plugin.dra.config import DraConfig
from plugin.dra.main import DraPluginApp

NODE = "dra-node"
DRIVER = "mig.dynmig.io"


@pytest.fixture
def world() -> Iterator[SimpleNamespace]:
    root = Path(tempfile.mkdtemp(prefix="dra-", dir="/tmp"))  # unix socket paths stay short
    sim = SimulatedNvml({"node": NODE, "gpus": [{"model": "A100-SXM4-40GB", "count": 2}]}).install()
    api = ApiServer(reap_after_grace=False).start()  # kubelet finishes a pod's deletion, as for real
    admin = api.api_client("admin")
    client.CoreV1Api(admin).create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
    cdi = root / "cdi"
    cdi.mkdir()
    dra = DraManager(api.api_client("kubelet"), state_file=root / "dra_manager_state")
    watcher = PluginWatcher(root / "plugins_registry", {"DRAPlugin": dra}, dial_timeout=2).start()
    kubelet = SimulatedKubelet(root / "device-plugins").start()
    pods = SimulatedPods(
        NODE,
        api.api_client("kubelet"),
        kubelet,
        sim,
        "nvidia.com/gpu",
        interval=0.05,
        dra=dra,
        cdi_dirs=[cdi],
        dra_retry=0.1,
    ).start()
    config = DraConfig(
        driver=DRIVER,
        node_name=NODE,
        device_config=DeviceConfig(default_allowlist()),
        registry_dir=root / "plugins_registry",
        plugin_dir=root / "plugins" / DRIVER,
        cdi_dir=cdi,
        state_dir=root / "state",
        resync_interval=0.5,
    )
    app = DraPluginApp(config, api.api_client("admin")).start()
    try:
        wait_for(lambda: dra.drivers() == {DRIVER: "v1.DRAPlugin"}, what="kubelet to register the driver")
        yield SimpleNamespace(
            sim=sim,
            api=api,
            core=client.CoreV1Api(admin),
            resource=client.ResourceV1Api(admin),
            pods=pods,
            app=app,
        )
    finally:
        app.stop()
        pods.stop()
        watcher.stop()
        dra.close()
        kubelet.stop()
        api.stop()
        sim.uninstall()
        shutil.rmtree(root, ignore_errors=True)


def _first_fit(world: SimpleNamespace, profile: str) -> dict[str, Any]:
    slices = json.loads(world.resource.list_resource_slice(_preload_content=False).data)["items"]
    for s in slices:
        for d in s["spec"].get("devices", []):
            if d["attributes"]["profile"]["string"] == profile:
                return d
    raise AssertionError(f"no {profile} device published")


def _pod_with_claim(world: SimpleNamespace, name: str, device: str) -> dict[str, Any]:
    """A claim, its pod, and the allocation and reservation kube-scheduler would write."""
    world.resource.create_namespaced_resource_claim(
        "default",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "mig", "exactly": {"deviceClassName": DRIVER}}]}},
        },
    )
    pod = world.core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": name},
            "spec": {
                "nodeName": NODE,
                "terminationGracePeriodSeconds": 1,
                "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
                "containers": [{"name": "main", "image": "cuda", "resources": {"claims": [{"name": "gpu"}]}}],
            },
        },
    )
    status = {
        "allocation": {
            "devices": {"results": [{"request": "mig", "driver": DRIVER, "pool": NODE, "device": device}]}
        },
        "reservedFor": [{"resource": "pods", "name": name, "uid": pod.metadata.uid}],
    }
    world.resource.patch_namespaced_resource_claim_status(name, "default", {"status": status})
    return {"name": name, "uid": pod.metadata.uid}


def _phase(world: SimpleNamespace, name: str) -> str | None:
    pod = world.api.get("pods", name, "default")
    return None if pod is None else (pod.get("status") or {}).get("phase")


def _instances(world: SimpleNamespace) -> list[tuple[str, str, int, int]]:
    return sorted(
        (g.uuid, gi.profile, gi.placement.start, gi.placement.size)
        for g in world.sim.gpus()
        for gi in g.gpu_instances
    )


def test_a_pod_with_a_claim_runs_on_exactly_the_allocated_mig_device_and_leaves_nothing_when_deleted(world):
    device = _first_fit(world, "3g.20gb")
    a = device["attributes"]
    _pod_with_claim(world, "trainer", device["name"])
    wait_for(lambda: _phase(world, "trainer") == "Running", what="the pod to run")
    want = (a["parentUUID"]["string"], "3g.20gb", a["placementStart"]["int"], a["placementSize"]["int"])
    assert _instances(world) == [want]
    record = world.pods.pods_by_name("default", "trainer")
    [mig] = [ci.mig_uuid for g in world.sim.gpus() for gi in g.gpu_instances for ci in gi.compute_instances]
    assert record.env["main"] == mig  # the CDI device the plugin returned names that instance
    # the next allocation must not overlap: the pool was republished without that placement
    wait_for(lambda: _first_fit(world, "3g.20gb")["name"] != device["name"], what="a republished pool")
    world.core.delete_namespaced_pod("trainer", "default")
    wait_for(lambda: world.api.get("pods", "trainer", "default") is None, what="the pod to be gone")
    assert _instances(world) == []


def test_two_pods_get_two_disjoint_instances_and_deleting_one_keeps_the_other(world):
    first = _first_fit(world, "1g.5gb")
    _pod_with_claim(world, "one", first["name"])
    wait_for(lambda: _phase(world, "one") == "Running", what="the first pod to run")
    wait_for(lambda: _first_fit(world, "1g.5gb")["name"] != first["name"], what="a republished pool")
    _pod_with_claim(world, "two", _first_fit(world, "1g.5gb")["name"])
    wait_for(lambda: _phase(world, "two") == "Running", what="the second pod to run")
    assert len(_instances(world)) == 2
    kept = world.pods.pods_by_name("default", "two").env["main"]
    world.core.delete_namespaced_pod("one", "default")
    wait_for(lambda: len(_instances(world)) == 1, what="the first pod's instance to go")
    assert [
        ci.mig_uuid for g in world.sim.gpus() for gi in g.gpu_instances for ci in gi.compute_instances
    ] == [kept]
