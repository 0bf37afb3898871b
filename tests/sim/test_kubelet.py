"""The simulated kubelet against a tiny device plugin written with the generated stubs."""

from __future__ import annotations

import grpc
import pytest
from kubelet_testkit import TinyPlugin
from sim.kubelet import SimulatedKubelet
from sim.kubelet.status import NodeStatus
from waiting_testkit import eventually

from plugin.api import UNHEALTHY

RESOURCE = "example.com/gpu"


@pytest.fixture
def kubelet(socket_dir):
    k = SimulatedKubelet(socket_dir, dial_timeout=0.5).start()
    yield k
    k.stop()


@pytest.fixture
def plugin_factory(socket_dir):
    made = []

    def make(**kwargs):
        plugin = TinyPlugin(socket_dir, **kwargs)
        made.append(plugin)
        return plugin

    yield make
    for plugin in made:
        plugin.stop()


def test_a_plugin_registers_and_kubelet_streams_its_devices(kubelet, plugin_factory):
    plugin_factory(count=4).start()
    view = kubelet.wait_for_devices(RESOURCE, healthy=4)
    assert (view.capacity, view.allocatable, view.registrations) == (4, 4, 1)
    assert view.options.pre_start_required and view.options.get_preferred_allocation_available
    assert view.endpoint == "tiny.sock"


def test_an_unhealthy_device_lowers_allocatable_but_not_capacity(kubelet, plugin_factory):
    plugin = plugin_factory(count=3).start()
    kubelet.wait_for_devices(RESOURCE, healthy=3)
    plugin.set_health("dev-1", UNHEALTHY)
    view = kubelet.wait_for_devices(RESOURCE, healthy=2, unhealthy=1)
    assert (view.capacity, view.allocatable) == (3, 2)


def test_allocate_asks_for_a_preference_then_calls_allocate_once_per_container_and_pre_starts(
    kubelet, plugin_factory
):
    plugin = plugin_factory(count=4).start()
    kubelet.wait_for_devices(RESOURCE, healthy=4)
    result = kubelet.allocate(RESOURCE, [("main", 1), ("sidecar", 0), ("worker", 2)], pod_uid="pod-a")
    assert result.ok, result.error
    assert [c.name for c in result.containers] == ["main", "worker"]
    assert result.containers[0].devices == ["dev-3"]  # the plugin's preference is honoured
    assert result.containers[1].devices == ["dev-2", "dev-1"]
    assert len(plugin.allocate_requests) == 2
    assert all(len(r.container_requests) == 1 for r in plugin.allocate_requests)
    assert result.containers[1].response.envs["NVIDIA_VISIBLE_DEVICES"] == "dev-2,dev-1"
    assert [list(r.devices_ids) for r in plugin.pre_start_requests] == [["dev-3"], ["dev-2", "dev-1"]]
    second = kubelet.allocate(RESOURCE, [2], pod_uid="pod-b")
    assert not second.ok and "Requested: 2, Available: 1" in second.error
    kubelet.release("pod-a")
    assert kubelet.allocate(RESOURCE, [2], pod_uid="pod-c").ok


def test_without_preference_or_pre_start_kubelet_skips_those_calls(kubelet, plugin_factory):
    plugin = plugin_factory(count=2, preferred=False, pre_start=False).start()
    kubelet.wait_for_devices(RESOURCE, healthy=2)
    result = kubelet.allocate(RESOURCE, [1])
    assert result.ok and result.containers[0].devices == ["dev-0"]
    assert plugin.preferred_requests == [] and plugin.pre_start_requests == []


def test_unhealthy_devices_are_never_handed_out(kubelet, plugin_factory):
    plugin = plugin_factory(count=2, preferred=False).start()
    kubelet.wait_for_devices(RESOURCE, healthy=2)
    plugin.set_health("dev-0", UNHEALTHY)
    kubelet.wait_for_devices(RESOURCE, healthy=1)
    assert kubelet.allocate(RESOURCE, [1]).devices == ["dev-1"]


def test_a_failing_allocate_is_recorded_with_the_plugins_message(kubelet, plugin_factory):
    plugin = plugin_factory(count=2).start()
    kubelet.wait_for_devices(RESOURCE, healthy=2)
    plugin.fail_allocate = "placement 3:1 is taken"
    result = kubelet.allocate(RESOURCE, [1], pod_uid="pod-x")
    assert not result.ok and "placement 3:1 is taken" in result.error and "INTERNAL" in result.error
    assert kubelet.allocations[-1] is result
    plugin.fail_allocate = None
    assert kubelet.allocate(RESOURCE, [2], pod_uid="pod-y").ok  # the failed pod's devices were freed


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"version": "v1alpha"}, "not supported by kubelet"),
        ({"resource": "gpu"}, "is invalid"),
        ({"resource": "kubernetes.io/gpu"}, "is invalid"),
    ],
)
def test_kubelet_refuses_a_bad_version_or_resource_name(kubelet, plugin_factory, kwargs, message):
    plugin = plugin_factory(**kwargs)
    with pytest.raises(grpc.RpcError) as failure:
        plugin.start(watch=False)
    assert message in failure.value.details()
    assert kubelet.register_log[-1].error is not None


def test_register_fails_when_the_plugin_does_not_serve_its_socket(kubelet, plugin_factory):
    plugin = plugin_factory()
    with pytest.raises(grpc.RpcError) as failure:
        plugin.register()
    assert "failed to dial" in failure.value.details()
    assert kubelet.resource(RESOURCE) is None


def test_when_the_plugin_goes_away_its_devices_turn_unhealthy(kubelet, plugin_factory):
    plugin = plugin_factory(count=2).start(watch=False)
    kubelet.wait_for_devices(RESOURCE, healthy=2)
    plugin.stop_serving()
    view = kubelet.wait_for_resource(RESOURCE, lambda v: not v.connected, what="disconnect")
    assert (view.capacity, view.allocatable) == (2, 0)


def test_after_a_kubelet_restart_the_plugin_re_registers_and_serves_again(
    kubelet, plugin_factory, socket_dir
):
    plugin = plugin_factory(count=3).start()
    kubelet.wait_for_devices(RESOURCE, healthy=3)
    kubelet.restart()
    assert kubelet.restarts == 1 and (socket_dir / "kubelet.sock").is_socket()
    view = kubelet.wait_for_registration(RESOURCE, count=2)
    view = kubelet.wait_for_devices(RESOURCE, healthy=3)
    assert view.registrations == 2 and [r.error for r in kubelet.register_log] == [None, None]
    assert (socket_dir / plugin.socket_name).is_socket()
    assert kubelet.allocate(RESOURCE, [1]).ok


# ---- the node status sync (sim/kubelet/status.py)


def counts(apiserver, name: str = "n1") -> tuple[str, str]:
    status = apiserver.get("nodes", name)["status"]
    return status["capacity"].get(RESOURCE, ""), status["allocatable"].get(RESOURCE, "")


def test_a_dead_plugins_node_shows_no_allocatable_devices_until_the_plugin_serves_again(
    apiserver, kubelet, plugin_factory
):
    apiserver.create(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "n1"},
            "status": {"allocatable": {}, "capacity": {}},
        }
    )
    plugin = plugin_factory(count=2).start(watch=False)
    kubelet.wait_for_devices(RESOURCE, healthy=2)
    sync = NodeStatus("n1", apiserver.api_client("kubelet"), kubelet, RESOURCE, interval=0.05).start()
    try:
        assert eventually(lambda: counts(apiserver) == ("2", "2"))
        plugin.stop_serving()
        assert eventually(lambda: counts(apiserver) == ("2", "0"))
        plugin.serve()
        plugin.register()
        assert eventually(lambda: counts(apiserver) == ("2", "2"))
    finally:
        sync.stop()
