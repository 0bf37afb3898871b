"""The device plugin's /metrics, as Prometheus scrapes it, exposes exactly the names the README
lists (counters with `_total`), including the process and Python runtime series."""

from __future__ import annotations

from tests.metrics_testkit import documented, exposed
from tests.plugin.conftest import Want
from tests.plugin.test_health import get, start_with_metrics

A100 = {"gpus": [{"model": "A100-SXM4-40GB"}]}


def test_the_plugins_metrics_are_the_readmes_list_both_ways(make_node):
    node = make_node(A100)
    _, port = start_with_metrics(node)
    node.add_pod("train", [[Want(0, "1g.5gb", 6, 1)]])
    assert node.admit("train").ok  # an Allocate, so its histogram and counters have samples

    status, page = get(port, "/metrics")

    assert status == 200
    names, listed = exposed(page), documented("device-plugin")
    assert names - listed == set(), "exposed but not in the README"
    assert listed - names == set(), "in the README but not exposed"
    assert "dynmig_plugin_instance_creates_total 1.0" in page
    assert "process_resident_memory_bytes" in names and "python_info" in names
