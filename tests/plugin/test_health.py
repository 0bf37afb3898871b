"""The plugin's probes on its metrics port, as the chart's DaemonSet uses them: /readyz says whether
kubelet knows the plugin, /healthz whether its reconcile loop runs; /metrics is still served."""

from __future__ import annotations

import dataclasses
import time
import urllib.error
import urllib.request

from plugin.kube import Kube
from plugin.main import DevicePluginApp
from tests.plugin.conftest import NODE

A100 = {"gpus": [{"model": "A100-SXM4-40GB"}]}


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def eventually(port: int, path: str, status: int) -> str:
    deadline = time.monotonic() + 10
    while (got := get(port, path))[0] != status:
        assert time.monotonic() < deadline, f"{path}: {got}"
        time.sleep(0.05)
    return got[1]


def start_with_metrics(node) -> tuple[DevicePluginApp, int]:
    config = dataclasses.replace(node.config(), metrics_address="127.0.0.1:0")
    node.app = DevicePluginApp(config, Kube(node.apiserver.api_client("device-plugin"), NODE)).start()
    return node.app, node.app.metrics_port


def test_the_plugin_is_ready_only_once_kubelet_accepted_its_registration(make_node):
    node = make_node(A100)
    node.kubelet.stop()  # kubelet.sock is there but nobody answers: registration fails
    _, port = start_with_metrics(node)
    assert "not registered with kubelet" in eventually(port, "/readyz", 503)
    assert get(port, "/healthz")[0] == 200  # not ready is no reason to restart the plugin
    node.kubelet.start()
    assert "registered nvidia.com/gpu" in eventually(port, "/readyz", 200)
    status, text = get(port, "/metrics")
    assert status == 200 and "dynmig_plugin_managed_instances" in text


def test_the_plugin_is_not_alive_when_its_reconcile_loop_has_stopped(make_node):
    node = make_node(A100)
    app, port = start_with_metrics(node)
    assert "last reconcile pass" in eventually(port, "/healthz", 200)
    app._stop.set()  # what a wedged or dead loop looks like from outside: no more passes
    app._loop.join(5)
    assert "reconcile loop is not running" in eventually(port, "/healthz", 503)


def test_the_plugins_metrics_say_whether_kubelet_knows_it_so_an_alert_can_tell(make_node):
    node = make_node(A100)
    node.kubelet.stop()
    _, port = start_with_metrics(node)
    eventually(port, "/readyz", 503)
    assert "dynmig_plugin_registered 0.0" in get(port, "/metrics")[1]
    node.kubelet.start()
    eventually(port, "/readyz", 200)
    assert "dynmig_plugin_registered 1.0" in get(port, "/metrics")[1]
