"""The chart's alert rules in a real Prometheus server (Debian's) scraping a lab: a killed device
plugin fires DynmigDevicePluginDown for its node, and the alert resolves once kubelet has restarted
the plugin. The rules are the chart's own, rendered by helm with a short `for` through the values
(metrics.prometheusRule.for.pluginDown); the scrape jobs are named as the chart's ServiceMonitors
name them (their Service's name), with the device plugin's `node` label as their relabeling sets it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from lab.cluster import Lab
from waiting_testkit import wait_for

from tests import lab_testkit
from tests.charts.prometheus_testkit import PLUGIN_JOB, SERVE_JOB, Prometheus, binary, write_rules

NODE = "gpu-a"
WAIT = 60.0  # generous: a loaded CI machine; nothing here is timed


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    binary("prometheus")
    yield from lab_testkit.started(tmp_path_factory, "prometheus-lab", f"{NODE}=1xA100-SXM4-40GB")


def scrape_config(lab: Lab, rules: str) -> dict:
    plugin = lab.plugin_metrics_url(NODE).removeprefix("http://").removesuffix("/metrics")
    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [rules],
        "scrape_configs": [
            {"job_name": PLUGIN_JOB, "static_configs": [{"targets": [plugin], "labels": {"node": NODE}}]},
            {"job_name": SERVE_JOB, "static_configs": [{"targets": [f"127.0.0.1:{lab.metrics_port}"]}]},
        ],
    }


def test_a_killed_device_plugin_fires_plugin_down_for_its_node_and_it_resolves_when_the_plugin_is_back(
    lab: Lab, tmp_path
):
    rules = write_rules(
        tmp_path / "rules.yaml",
        "metrics.prometheusRule.for.pluginDown=2s",
        "metrics.prometheusRule.dcgmFields=null",
    )
    with Prometheus(scrape_config(lab, str(rules)), tmp_path) as prometheus:
        wait_for(lambda: prometheus.value(f'up{{job="{PLUGIN_JOB}"}}') == 1, "the plugin scraped", WAIT)
        assert prometheus.value("dynmig_plugin_registered") == 1
        wait_for(lambda: prometheus.value("dynmig_leader") == 1, "serve scraped, leading", WAIT)
        assert prometheus.alerts("DynmigDevicePluginDown", "pending") == []
        assert prometheus.alerts("DynmigDevicePluginDown") == []

        # a plugin that crashes again each time kubelet restarts it (kubelet's back-off doubles)
        def killed_until_firing() -> list[dict]:
            lab.kill_plugin(NODE)
            time.sleep(0.2)
            return prometheus.alerts("DynmigDevicePluginDown")

        firing = wait_for(killed_until_firing, "DynmigDevicePluginDown firing", WAIT)
        assert [a["labels"]["node"] for a in firing] == [NODE]
        assert firing[0]["labels"]["severity"] == "critical"
        assert NODE in firing[0]["annotations"]["summary"]

        # left alone, kubelet restarts it: the target is up again and the alert resolves
        wait_for(lambda: prometheus.alerts("DynmigDevicePluginDown") == [], "the alert resolved", WAIT)
        assert prometheus.value(f'up{{job="{PLUGIN_JOB}"}}') == 1
