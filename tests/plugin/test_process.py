"""`dynmig device-plugin` as its own process (simulated NVML via the launcher's shared state file),
with the simulated kubelet and API server: register, allocate, reclaim on its own loop, stop cleanly."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from kubernetes import client as k8s
from sim.kubelet import SimulatedKubelet
from sim.nvml import SimulatedNvml
from waiting_testkit import wait_for

from base.policyfiles import DEFAULT_POLICY
from tests.plugin.conftest import NODE, RESOURCE, Node, Want

ROOT = Path(__file__).resolve().parents[2]


def plugin_argv(state, plugin_dir, apiserver, *extra: str) -> list[str]:
    """The device plugin's console entry in a child process, on the simulated NVML kept in `state`."""
    return [
        sys.executable,
        *("-m", "sim.nvml.launch", "--state", str(state), "--", "device-plugin", "--node-name", NODE),
        *("--config-file", str(DEFAULT_POLICY), "--kubelet-dir", str(plugin_dir)),
        *("--kubeconfig", str(apiserver.kubeconfig("device-plugin")), *extra),
    ]


def test_the_console_script_serves_allocates_and_reclaims_in_its_own_process(apiserver, plugin_dir, tmp_path):
    state = tmp_path / "node.json"
    sim = SimulatedNvml({"node": NODE, "gpus": [{"model": "H100 80GB HBM3"}]}, state_path=state)
    node = Node.__new__(Node)  # the same helpers, but the plugin runs in the child process
    node.apiserver, node.sim, node.plugin_dir = apiserver, sim, plugin_dir
    node.core = k8s.CoreV1Api(apiserver.api_client("scheduler"))
    node.kubelet = SimulatedKubelet(plugin_dir).start()
    node.app, node.uuids = None, sim.gpu_uuids
    node.core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
    argv = plugin_argv(state, plugin_dir, apiserver, "--reconcile-interval", "0.2")
    child = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        node.kubelet.wait_for_devices(RESOURCE, healthy=7, timeout=30)
        published = json.loads(node.node_annotations()["hami.io/node-nvidia-register"])
        assert [p["name"] for p in published[0]["migProfiles"]] == [
            "1g.10gb",
            "2g.20gb",
            "3g.40gb",
            "7g.80gb",
        ]

        node.add_pod("job", [[Want(0, "3g.40gb", 4, 4)]])
        result = node.admit("job")
        assert result.ok, result.error
        [(profile, start, _, mig_uuid)] = node.instances(0)
        assert (profile, start) == ("3g.40gb", 4)
        assert result.containers[0].response.envs["NVIDIA_VISIBLE_DEVICES"] == mig_uuid

        node.set_phase("job", "Succeeded")
        wait_for(lambda: node.instances(0) == [], what="the reconcile loop to reclaim the instance")
    finally:
        child.send_signal(signal.SIGTERM)
        try:
            output, _ = child.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            child.kill()
            output, _ = child.communicate()
        node.kubelet.stop()
    assert child.returncode == 0, output


def test_a_burst_of_stop_signals_still_stops_the_plugin(apiserver, plugin_dir, tmp_path):
    """Several SIGTERMs in a row (a dying parent's death signal plus an operator's) must not wedge
    the process: a handler that takes a lock the main thread holds would hang it forever."""
    state = tmp_path / "node.json"
    SimulatedNvml({"node": NODE, "gpus": [{"model": "A100-SXM4-40GB"}]}, state_path=state)
    kubelet = SimulatedKubelet(plugin_dir).start()
    argv = plugin_argv(state, plugin_dir, apiserver)
    child = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        kubelet.wait_for_devices(RESOURCE, healthy=7, timeout=30)
        for _ in range(200):
            child.send_signal(signal.SIGTERM)
        output, _ = child.communicate(timeout=20)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
        kubelet.stop()
    assert child.returncode == 0, output
