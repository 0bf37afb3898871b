"""Neighbours detected, not fought: with NVIDIA's device plugin registered for nvidia.com/gpu, or MIG
Manager's labels on the node, the plugin touches none of the node's GPUs, does not register over the
other plugin, fails Allocate, and says why and how to fix it (Node Event, metric, node annotation)."""

from __future__ import annotations

import pytest

from dynmig.status.main import main as status_main
from mig.annotations import PLUGIN_REFUSED
from plugin.kube import Kube
from plugin.main import DevicePluginApp
from plugin.neighbours import mig_manager, other_plugin
from tests.plugin.conftest import NODE, RESOURCE, Want
from tests.plugin.test_reclaim_and_restart import leftover
from tests.sim.kubelet_testkit import TinyPlugin
from tests.waiting_testkit import wait_for

A100 = {"gpus": [{"model": "A100-SXM4-40GB"}]}
SOCKET = "pod-resources/kubelet.sock"


def node_events(node, reason: str) -> list[str]:
    events = node.core.list_namespaced_event("default").items
    return [e.message for e in events if e.involved_object.kind == "Node" and e.reason == reason]


def label(node, labels: dict[str, str | None]) -> None:
    node.core.patch_node(NODE, {"metadata": {"labels": labels}})


@pytest.fixture
def nvidia_plugin(make_node):
    """NVIDIA's device plugin on the node: nvidia.com/gpu, devices named by GPU UUID."""
    made: list[TinyPlugin] = []

    def start(node):
        plugin = TinyPlugin(
            node.plugin_dir, RESOURCE, socket_name="nvidia-device-plugin.sock", ids=node.uuids
        )
        made.append(plugin.start(watch=False))
        return plugin

    yield start
    for plugin in made:
        plugin.stop()


def test_a_second_registration_of_nvidia_gpu_makes_the_plugin_leave_the_node_alone_and_say_why(
    make_node, nvidia_plugin, capsys
):
    node = make_node(A100)
    app = node.start_plugin(pod_resources_socket=SOCKET)
    node.add_pod("a", [[Want(0, "1g.5gb", 0, 1)]])
    assert node.admit("a").ok
    nvidia_plugin(node)  # kubelet now sends nvidia.com/gpu to NVIDIA's plugin
    node.kubelet.wait_for_resource(
        RESOURCE, lambda v: v.endpoint == "nvidia-device-plugin.sock", what="NVIDIA's"
    )
    node.core.delete_namespaced_pod("a", "default", grace_period_seconds=0)

    node.tick()

    assert app.metrics.value("dynmig_plugin_node_refused", reason="other-device-plugin") == 1
    refused = node.node_annotations()[PLUGIN_REFUSED]
    assert refused.startswith(
        "other-device-plugin: another device plugin is registered with kubelet for nvidia.com/gpu"
    )
    assert "devicePlugin.enabled=false" in refused and "nvidia.com/gpu.deploy.device-plugin=false" in refused
    wait_for(lambda: node_events(node, "MigNodeRefused"), what="a Node event")
    assert len(node.instances(0)) == 1  # the ended pod's instance stays: nothing is touched
    assert not app.ready()[0]  # not counted on by kubelet: readiness says so
    assert node.kubelet.resource(RESOURCE).endpoint == "nvidia-device-plugin.sock"  # never re-registered
    assert status_main(["--kubeconfig", str(node.apiserver.kubeconfig())]) == 0
    out = capsys.readouterr().out
    assert "device plugin leaves these GPUs alone: other-device-plugin: another device plugin" in out


def test_with_mig_managers_label_the_plugin_neither_cleans_nor_registers_until_the_label_goes(make_node):
    node = make_node(A100)
    stranger = leftover(0, "3g.20gb", 4, 4)  # an idle GPU: start-up would clean it
    label(node, {"nvidia.com/mig.config": "all-1g.5gb", "nvidia.com/mig.config.state": "success"})

    # started by hand: the helper waits for a registration, which must not come
    kube = Kube(node.apiserver.api_client("device-plugin"), NODE)
    node.app = started = DevicePluginApp(node.config(), kube).start()
    try:
        assert [u for *_, u in node.instances(0)] == [stranger]
        assert node.kubelet.resource(RESOURCE) is None
        assert started.metrics.value("dynmig_plugin_node_refused", reason="mig-manager") == 1
        assert "migManager.enabled=false" in node.node_annotations()[PLUGIN_REFUSED]
        node.add_pod("a", [[Want(0, "1g.5gb", 0, 1)]])

        label(node, {"nvidia.com/mig.config": None, "nvidia.com/mig.config.state": None})
        node.tick()

        assert started.metrics.value("dynmig_plugin_node_refused", reason="mig-manager") == 0
        assert PLUGIN_REFUSED not in node.node_annotations()
        node.kubelet.wait_for_registration(RESOURCE)
        wait_for(lambda: node_events(node, "MigNodeResumed"), what="a Node event")
    finally:
        node.stop_plugin()


def test_a_node_opted_out_of_mig_manager_is_served_though_its_config_label_stays():
    assert mig_manager("n", {"nvidia.com/mig.config": "all-disabled"}) is not None
    opted_out = {"nvidia.com/mig.config": "all-disabled", "nvidia.com/gpu.deploy.mig-manager": "false"}
    assert mig_manager("n", opted_out) is None


def test_kubelets_devices_of_this_plugins_own_gpus_are_no_neighbour():
    gpus = {"GPU-a", "GPU-b"}
    assert other_plugin("n", RESOURCE, ["GPU-a-0", "GPU-a-6", "GPU-b-1"], gpus) is None
    for foreign in (["GPU-a"], ["MIG-1234"], ["GPU-a::2"], ["GPU-c-0"]):
        assert other_plugin("n", RESOURCE, foreign, gpus) is not None


def test_an_allocate_while_refused_fails_and_names_the_neighbour(make_node):
    node = make_node(A100)
    node.start_plugin(pod_resources_socket=SOCKET)
    label(node, {"nvidia.com/mig.config": "all-1g.5gb"})
    node.tick()
    node.add_pod("a", [[Want(0, "1g.5gb", 0, 1)]])
    # kubelet still routes to us here (no other plugin registered): the call itself is refused
    result = node.admit("a")
    assert not result.ok and "neighbour: NVIDIA MIG Manager manages this node's MIG layout" in result.error
    assert node.instances(0) == []
