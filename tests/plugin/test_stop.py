"""A stopped device plugin leaves nothing running in its process: grpc's server.stop() does not end
the thread pool it serves from, so the plugin ends it itself."""

from __future__ import annotations

import re
import threading

from tests.plugin.conftest import Want

A100 = {"gpus": [{"model": "A100-SXM4-40GB"}]}


def test_a_stopped_device_plugin_leaves_none_of_its_grpc_threads_running(make_node):
    node = make_node(A100)
    node.start_plugin()
    node.add_pod("served", [[Want(0, "1g.5gb", 0, 1)]])
    assert node.admit("served").ok  # kubelet's Allocate, answered from the server's pool
    node.stop_plugin()
    left = [t.name for t in threading.enumerate() if re.fullmatch(r"dynmig-dp_\d+", t.name)]
    assert left == [], f"threads of the stopped plugin's gRPC server still run: {left}"
