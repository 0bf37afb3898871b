"""A simulated GPU node for device-plugin tests: simulated NVML (installed under pynvml), simulated
kubelet on unix sockets, the simulated API server, and our DevicePluginApp running unchanged.

Pods are written the way the scheduler writes them (logical reservation, vgpu-node,
devices-to-allocate, bind-phase allocating, node lock), then kubelet admits them through the plugin.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from sim.kubelet import SimulatedKubelet
from sim.nvml import SimulatedNvml

from base.policyfiles import default_allowlist
from mig.allowlist import DeviceConfig
from mig.annotations import (
    BIND_PHASE,
    BIND_TIME,
    DEVICES_ALLOCATED,
    DEVICES_TO_ALLOCATE,
    MIG_ALLOCATIONS,
    NODE_LOCK,
    VGPU_NODE,
    VGPU_TIME,
    ContainerDevice,
    MigAllocation,
    decode_allocations,
    encode_allocations,
    encode_devices,
)
from plugin.config import DeviceFilter, NodeConfig, PluginConfig
from plugin.kube import Kube
from plugin.main import DevicePluginApp

NODE = "gpu-node-1"
RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True)
class Want:
    """One reserved device: the GPU (index into the node's GPUs), profile and placement."""

    gpu: int
    profile: str
    start: int
    size: int


class Node:
    def __init__(self, apiserver: Any, sim: SimulatedNvml, plugin_dir: Path):
        self.apiserver = apiserver
        self.sim = sim
        self.plugin_dir = plugin_dir
        self.core = k8s.CoreV1Api(apiserver.api_client("scheduler"))
        self.kubelet = SimulatedKubelet(plugin_dir).start()
        self.app: DevicePluginApp | None = None
        self.uuids = sim.gpu_uuids
        self.core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})

    # ---- the plugin

    def config(
        self,
        strategy: str = "envvar",
        excluded: DeviceFilter | None = None,
        device_config: DeviceConfig | None = None,
        **more: Any,
    ) -> PluginConfig:
        return PluginConfig(
            node_name=NODE,
            device_config=device_config or DeviceConfig(default_allowlist()),
            node=NodeConfig("mig", excluded or DeviceFilter()),
            kubelet_dir=self.plugin_dir,
            strategy=strategy,
            reconcile_interval=3600.0,
            state_dir=self.plugin_dir / "state",
            precreate=more.pop("precreate", False),  # tests of pre-creation turn it on
            **more,
        )

    def start_plugin(self, **kwargs: Any) -> DevicePluginApp:
        kube = Kube(self.apiserver.api_client("device-plugin"), NODE)
        self.app = DevicePluginApp(self.config(**kwargs), kube).start()
        # kubelet can allocate only after the first ListAndWatch message has arrived
        replicas = sum(g.count for g in self.app.inventory.managed)
        self.kubelet.wait_for_resource(
            RESOURCE, lambda v: v.connected and v.healthy == replicas, what=f"{replicas} healthy replicas"
        )
        return self.app

    @property
    def journal_path(self) -> Path:
        return self.plugin_dir / "state" / "instances.json"

    def lose_journal(self) -> None:
        """The state directory is lost (a new node disk, or a chart without the hostPath)."""
        self.journal_path.unlink(missing_ok=True)

    def stop_plugin(self) -> None:
        if self.app is not None:
            self.app.stop()
            self.app = None

    # ---- pods as the scheduler writes them

    def add_pod(
        self,
        name: str,
        containers: list[list[Want]],
        phase: str | None = None,
        lock: bool = True,
        allocations: str | None = None,
        namespace: str = "default",
    ) -> dict[str, Any]:
        devices, reservations = [], []
        for c, wants in enumerate(containers):
            devices.append([ContainerDevice(self.uuids[w.gpu], "NVIDIA", 1000, 10) for w in wants])
            reservations += [
                MigAllocation.model_validate(
                    {
                        "containerIndex": c,
                        "deviceIndex": d,
                        "gpuUUID": self.uuids[w.gpu],
                        "profile": w.profile,
                        "placement": {"start": w.start, "size": w.size},
                    }
                )
                for d, w in enumerate(wants)
            ]
        text = encode_devices(devices)
        annotations = {
            VGPU_NODE: NODE,
            VGPU_TIME: "1700000000",
            DEVICES_TO_ALLOCATE: text,
            DEVICES_ALLOCATED: text,
            MIG_ALLOCATIONS: allocations
            if allocations is not None
            else (encode_allocations(reservations) or ""),
            BIND_PHASE: "allocating",
            BIND_TIME: "1700000000",
        }
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
            "spec": {
                "nodeName": NODE,
                "containers": [
                    {"name": f"c{c}", "image": "cuda", "resources": {"limits": {RESOURCE: str(len(w))}}}
                    for c, w in enumerate(containers)
                ],
            },
        }
        created = self.core.create_namespaced_pod(namespace, pod)
        if phase:
            self.set_phase(name, phase, namespace)
        if lock:
            self.core.patch_node(
                NODE, {"metadata": {"annotations": {NODE_LOCK: f"2026-01-01T00:00:00Z,{namespace},{name}"}}}
            )
        return {"uid": created.metadata.uid, "containers": [len(w) for w in containers]}

    def admit(self, name: str, namespace: str = "default") -> Any:
        """kubelet admits the pod: one Allocate per container that requests GPUs."""
        pod = self.core.read_namespaced_pod(name, namespace)
        counts = [(c.name, int(c.resources.limits.get(RESOURCE, 0))) for c in pod.spec.containers]
        return self.kubelet.allocate(RESOURCE, counts, pod_uid=pod.metadata.uid, pod_ref=(namespace, name))

    def annotations(self, name: str, namespace: str = "default") -> dict[str, str]:
        return dict(self.core.read_namespaced_pod(name, namespace).metadata.annotations or {})

    def reservations(self, name: str, namespace: str = "default") -> tuple[MigAllocation, ...]:
        return decode_allocations(self.annotations(name, namespace).get(MIG_ALLOCATIONS))

    def set_phase(self, name: str, phase: str, namespace: str = "default") -> None:
        self.core.patch_namespaced_pod_status(name, namespace, {"status": {"phase": phase}})

    def patch_annotations(self, name: str, annotations: dict[str, str | None]) -> None:
        self.core.patch_namespaced_pod(name, "default", {"metadata": {"annotations": annotations}})

    def node_annotations(self) -> dict[str, str]:
        return dict(self.core.read_node(NODE).metadata.annotations or {})

    def tick(self) -> Any:
        assert self.app is not None
        return self.app.tick()

    # ---- hardware

    def instances(self, gpu: int = 0) -> list[tuple[str, int, int, str]]:
        """(profile, start, size, MIG UUID) of every GI+CI on a GPU, sorted by placement."""
        return sorted(
            (
                (
                    gi.profile,
                    gi.placement.start,
                    gi.placement.size,
                    gi.compute_instances[0].mig_uuid if gi.compute_instances else "",
                )
                for gi in self.sim.gpu(gpu).gpu_instances
            ),
            key=lambda t: t[1],
        )

    def destroys(self) -> list[dict[str, Any]]:
        return [e for e in self.sim.events() if e["op"].startswith("destroy")]

    def close(self) -> None:
        self.stop_plugin()
        self.kubelet.stop()


@pytest.fixture
def plugin_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="dp-", dir="/tmp"))  # unix socket paths must stay short
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def make_node(apiserver: Any, plugin_dir: Path) -> Iterator[Any]:
    nodes: list[Node] = []
    sims: list[SimulatedNvml] = []

    def make(spec: dict[str, Any], shuffle_gi_ids: int | None = None) -> Node:
        sim = SimulatedNvml({"node": NODE, **spec}, shuffle_gi_ids=shuffle_gi_ids).install()
        sims.append(sim)
        node = Node(apiserver, sim, plugin_dir)
        nodes.append(node)
        return node

    try:
        yield make
    finally:
        for node in nodes:
            node.close()
        for sim in sims:
            sim.uninstall()
