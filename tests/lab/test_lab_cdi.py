"""The lab with `devicePlugin.deviceListStrategy=cdi`, as on a GPU Operator 25.10+ node: the node's
container runtime injects devices only from the CDI specs in its spec dir (sim.kubelet.cdi, as
containerd does), so a container runs on a MIG device only through a spec the device plugin wrote."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from lab.cluster import Lab
from lab.kit import Kit
from lab.nodes import DEFAULT_NODES

from dynmig.status.main import main as status_main
from tests import lab_testkit
from tests.sim.kubelet_testkit import TinyPlugin

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
KIND = "k8s.dynmig.io/mig"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    yield from lab_testkit.started(
        tmp_path_factory, "cdi-lab", DEFAULT_NODES, values=("devicePlugin.deviceListStrategy=cdi",)
    )


@pytest.fixture
def kit(lab: Lab) -> Iterator[Kit]:
    k = Kit(lab)
    yield k
    for name in [
        d.metadata.name
        for d in client.AppsV1Api(lab.api_client()).list_namespaced_deployment("default").items
    ]:
        client.AppsV1Api(lab.api_client()).delete_namespaced_deployment(name, "default")
    k.delete_all()


def examples() -> list[dict[str, Any]]:
    """Every pod and Deployment of the device-plugin examples (dra-claim.yaml is DRA's), limits as
    the API writes them (strings)."""
    docs = []
    for path in sorted(p for p in EXAMPLES.glob("*.yaml") if p.name != "dra-claim.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] in ("Pod", "Deployment"):
                spec = doc["spec"]["template"]["spec"] if doc["kind"] == "Deployment" else doc["spec"]
                for c in spec["containers"]:
                    limits = c.get("resources", {}).get("limits", {})
                    c["resources"]["limits"] = {k: str(v) for k, v in limits.items()}
                docs.append(doc)
    return docs


def specs(lab: Lab) -> list[str]:
    return sorted(p.name for r in lab.nodes.values() if r.cdi_dir for p in r.cdi_dir.glob("*.json"))


def record(lab: Lab, pod: dict[str, Any]) -> Any:
    node = lab.nodes[pod["spec"]["nodeName"]]
    assert node.agent is not None
    return node.agent.pods_by_name(pod["metadata"]["namespace"], pod["metadata"]["name"])


def test_every_container_of_every_example_gets_its_mig_device_through_a_spec_the_plugin_wrote(lab, kit):
    apps = client.AppsV1Api(lab.api_client())
    for doc in examples():
        if doc["kind"] == "Deployment":
            apps.create_namespaced_deployment("default", doc)
        else:
            kit.create(doc)
    kit.wait(
        lambda: len(kit.pods()) == 6 and all(p["status"].get("phase") == "Running" for p in kit.pods()),
        90,
        "the examples' six pods Running",
    )

    seen = 0
    for pod in kit.pods():
        allocations = kit.allocations(pod["metadata"]["name"])
        r = record(lab, pod)
        for index, container in enumerate(pod["spec"]["containers"]):
            mine = [a.migUUID for a in allocations if a.containerIndex == index]
            assert mine, f"{pod['metadata']['name']}/{container['name']} got no MIG device"
            assert r.cdi_devices[container["name"]] == [f"{KIND}={u}" for u in mine]
            assert r.env[container["name"]] == ",".join(mine)  # what the spec injected
            seen += 1
    assert seen == 6  # one-1g, the mixed pair, the 3g-preferring pod, the Deployment's two replicas
    assert len(specs(lab)) == seen


def test_a_container_whose_spec_the_runtime_cannot_find_fails_with_containerds_error_then_runs_once_it_can(
    lab, kit, tmp_path
):
    runtime = lab.nodes["gpu-rtx"].agent
    assert runtime is not None
    where = runtime.cdi_dirs
    runtime.cdi_dirs = [tmp_path]  # the runtime reads another spec dir than the plugin writes
    try:
        (pod,) = [d for d in examples() if d["metadata"]["name"] == "one-1g"]
        kit.create(pod)
        event = kit.wait_event("one-1g", "Failed", 60, contains="unresolvable CDI devices")
    finally:
        runtime.cdi_dirs = where
    [a] = kit.allocations("one-1g")
    assert event["message"] == (
        "Error: failed to create containerd container: CDI device injection failed: "
        f"unresolvable CDI devices {KIND}={a.migUUID}"
    )
    kit.wait_phase("one-1g", "Running", 60)


def test_specs_leave_with_their_instances_across_a_kill_9_and_restart_of_the_plugin(lab, kit):
    (pod,) = [d for d in examples() if d["metadata"]["name"] == "one-1g"]
    kit.create(pod)
    kit.wait_phase("one-1g", "Running", 60)
    [a] = kit.allocations("one-1g")
    assert specs(lab) == [f"k8s.dynmig.io-mig_{a.migUUID}.json"]

    lab.restart_plugin("gpu-rtx", delete_pod=False, sig=signal.SIGKILL)

    assert specs(lab) == [f"k8s.dynmig.io-mig_{a.migUUID}.json"]  # adopted: its spec stays
    kit.delete("one-1g")
    kit.wait(lambda: not specs(lab) and not kit.instances(), 30, "the instance and its spec gone")


def test_a_pod_deleted_while_the_plugins_were_uninstalled_has_its_instance_and_spec_gone_when_they_return(
    lab, kit
):
    (pod,) = [d for d in examples() if d["metadata"]["name"] == "one-1g"]
    kit.create(pod)
    kit.wait_phase("one-1g", "Running", 60)
    lab.uninstall_plugins()
    kit.delete("one-1g")  # kubelet stops its container; no plugin runs to reclaim the instance
    assert len(kit.instances()) == 1 and len(specs(lab)) == 1

    lab.install_plugins()  # returns once each plugin registered: after its start-up pass

    assert kit.instances() == [] and specs(lab) == []


def node_events(kit: Kit, node: str, reason: str) -> list[str]:
    return [
        e["message"]
        for e in kit.events()
        if e["involvedObject"].get("kind") == "Node"
        and e["involvedObject"]["name"] == node
        and e["reason"] == reason
    ]


def test_mig_managers_label_on_a_lab_node_makes_its_plugin_refuse_and_say_so_until_it_goes(lab, kit, capsys):
    core = client.CoreV1Api(lab.api_client())
    core.patch_node("gpu-a100", {"metadata": {"labels": {"nvidia.com/mig.config": "all-1g.5gb"}}})
    try:
        (message,) = kit.wait(
            lambda: node_events(kit, "gpu-a100", "MigNodeRefused"), 30, "a MigNodeRefused event"
        )
        assert (
            "NVIDIA MIG Manager manages this node's MIG layout (nvidia.com/mig.config=all-1g.5gb)" in message
        )
        assert "migManager.enabled=false" in message
        assert status_main(["--kubeconfig", str(lab.kubeconfig())]) == 0
        assert (
            "device plugin leaves these GPUs alone: mig-manager: NVIDIA MIG Manager"
            in capsys.readouterr().out
        )
    finally:
        core.patch_node("gpu-a100", {"metadata": {"labels": {"nvidia.com/mig.config": None}}})
    kit.wait(lambda: node_events(kit, "gpu-a100", "MigNodeResumed"), 30, "a MigNodeResumed event")
    (pod,) = [d for d in examples() if d["metadata"]["name"] == "prefers-3g"]  # pinned to gpu-a100
    kit.create(pod)
    kit.wait_phase("prefers-3g", "Running", 60)


def test_a_second_registration_of_nvidia_gpu_on_a_lab_node_makes_its_plugin_refuse_and_say_so(lab, kit):
    # (last in this module: the simulated kubelet, like kubelet, keeps the other plugin's devices)
    node = lab.nodes["gpu-a100"]
    other = TinyPlugin(
        node.plugin_dir, "nvidia.com/gpu", socket_name="nvidia-device-plugin.sock", ids=["GPU-0", "GPU-1"]
    )
    other.start(watch=False)  # NVIDIA's device plugin: devices named by GPU UUID
    try:
        (message,) = kit.wait(
            lambda: [
                m for m in node_events(kit, "gpu-a100", "MigNodeRefused") if "another device plugin" in m
            ],
            30,
            "a MigNodeRefused event about it",
        )
    finally:
        other.stop()
    assert message.startswith(
        "dynmig leaves this node's GPUs alone: another device plugin is registered with kubelet for "
        "nvidia.com/gpu on this node (kubelet lists devices GPU-0, GPU-1, which are not dynmig's)"
    )
    assert "devicePlugin.enabled=false" in message
    view = node.kubelet.resource("nvidia.com/gpu")
    assert view is not None and view.endpoint == "nvidia-device-plugin.sock"  # dynmig did not register back
