"""The chart's alerts, recording rules and Grafana dashboard, checked by Prometheus' own `promtool`:
the rendered PrometheusRule passes `promtool check rules`; `promtool test rules` feeds it series named
and labelled as dynmig and NVIDIA's DCGM exporter emit them and sees each alert fire when it should
and stay quiet when it should not, and the recording rule join DCGM's per-instance series to pods;
every dashboard query passes promtool's parser; every dynmig series they read is one dynmig exports.

DCGM exporter's labels are those of its metric template (dcgm-exporter
internal/pkg/collector/gpu_collector.go `toMetric` and the exporter's format string): `gpu`, `UUID`
(the GPU's, also for a MIG instance), `pci_bus_id`, `device`, `modelName`, `GPU_I_PROFILE` and
`GPU_I_ID` (the NVML GPU instance ID) on MIG instances only, `Hostname` (its NODE_NAME, the node's
name: internal/pkg/hostname/hostname.go), and in Kubernetes the scrape's `namespace`/`pod`/`container`.
"""

from __future__ import annotations

import json
import re

import yaml

from tests.charts.chart_testkit import one, render
from tests.charts.prometheus_testkit import PLUGIN_JOB, SERVE_JOB, promtool, rule_groups, write_rules
from tests.metrics_testkit import documented

# DCGM exporter's labels on a MIG instance's series, as it writes them on node gpu-a
DCGM = (
    'gpu="0",UUID="GPU-a0",pci_bus_id="00000000:07:00.0",device="nvidia0",'
    'modelName="NVIDIA A100-SXM4-40GB",Hostname="gpu-a",'
    'container="nvidia-dcgm-exporter",namespace="gpu-operator",pod="nvidia-dcgm-exporter-7x2kq",'
    'instance="10.0.0.9:9400",job="nvidia-dcgm-exporter"'
)
# dynmig serve's instance series for the 1g.5gb at GI 7 of that GPU, scraped from two replicas
OWNER = (
    'node="gpu-a",gpu_uuid="GPU-a0",gpu_instance_id="7",compute_instance_id="0",profile="1g.5gb",'
    'mig_uuid="MIG-7a",namespace="team",pod="train"'
)
PLUGIN = f'job="{PLUGIN_JOB}",instance="10.0.0.5:9394",node="gpu-a"'
SERVE = f'job="{SERVE_JOB}",instance="a"'
OTHER_PLUGIN = f'job="{PLUGIN_JOB}",instance="10.0.0.6:9394",node="gpu-b"'


def alert(name: str, at: str, *labels: dict, **common: str) -> dict:
    """A promtool alert_rule_test: `name` fires at `at` with exactly these labels (none: it does not)."""
    return {
        "eval_time": at,
        "alertname": name,
        "exp_alerts": [{"exp_labels": {"alertname": name, **common, **each}} for each in labels],
    }


def cases() -> list[dict]:
    severity = {"warning": {"severity": "warning"}, "critical": {"severity": "critical"}}
    node_a = {"job": PLUGIN_JOB, "instance": "10.0.0.5:9394", "node": "gpu-a"}
    return [
        {
            "name": "device plugin down and back (for 5m)",
            "interval": "1m",
            "input_series": [
                {"series": f"up{{{PLUGIN}}}", "values": "1 1 0 0 0 0 0 0 0 0 1 1 1"},
                {"series": f"up{{{OTHER_PLUGIN}}}", "values": "1x12"},
            ],
            "alert_rule_test": [
                alert("DynmigDevicePluginDown", "5m"),  # down 3 minutes: not yet
                alert("DynmigDevicePluginDown", "8m", {**node_a, **severity["critical"]}),
                alert("DynmigDevicePluginDown", "11m"),  # back: resolved
            ],
        },
        {
            "name": "device plugin not registered with kubelet",
            "interval": "1m",
            "input_series": [
                {"series": f"dynmig_plugin_registered{{{PLUGIN}}}", "values": "0x10"},
                {"series": f"dynmig_plugin_registered{{{OTHER_PLUGIN}}}", "values": "1x10"},
            ],
            "alert_rule_test": [
                alert("DynmigDevicePluginNotRegistered", "3m"),
                alert("DynmigDevicePluginNotRegistered", "6m", {**node_a, **severity["critical"]}),
            ],
        },
        {
            "name": "create and destroy failures, per node and reason",
            "interval": "1m",
            "input_series": [
                {
                    "series": f'dynmig_plugin_failures_total{{{PLUGIN},op="create",reason="nvml"}}',
                    "values": "0 0 0 1 1 1",
                },
                {
                    "series": f'dynmig_plugin_failures_total{{{PLUGIN},op="destroy",reason="in-use"}}',
                    "values": "0 0 0 0 2 2",
                },
                {  # a pod gone before Allocate is no create failure
                    "series": f'dynmig_plugin_failures_total{{{OTHER_PLUGIN},op="allocate",reason="pod-not-found"}}',
                    "values": "0 1 2 3 4 5",
                },
            ],
            "alert_rule_test": [
                alert("DynmigInstanceCreateFailures", "2m"),
                alert(
                    "DynmigInstanceCreateFailures",
                    "5m",
                    {"node": "gpu-a", "reason": "nvml", **severity["warning"]},
                ),
                alert("DynmigReclaimFailures", "3m"),
                alert(
                    "DynmigReclaimFailures",
                    "5m",
                    {"node": "gpu-a", "reason": "in-use", **severity["warning"]},
                ),
            ],
        },
        {
            "name": "instances no owner proves, and reclaims that keep failing",
            "interval": "1m",
            "input_series": [
                {
                    "series": f'dynmig_plugin_unowned_placements{{{PLUGIN},reason="unowned"}}',
                    "values": "1x20",
                },
                {
                    "series": f'dynmig_plugin_unowned_placements{{{OTHER_PLUGIN},reason="reclaiming"}}',
                    "values": "2x20",
                },
                {"series": f"dynmig_plugin_reclaims_stuck{{{OTHER_PLUGIN}}}", "values": "0x20"},
            ],
            "alert_rule_test": [
                alert("DynmigUnprovenInstances", "10m"),
                alert(
                    "DynmigUnprovenInstances", "16m", {**node_a, "reason": "unowned", **severity["warning"]}
                ),
                alert("DynmigReclaimStuck", "20m"),
            ],
        },
        {
            "name": "MIG pods pending longer than 15 minutes, by reason",
            "interval": "1m",
            "input_series": [
                {  # the oldest fragmented pod: waiting since t=0, growing a minute per minute
                    "series": f'dynmig_pods_pending_oldest_seconds{{{SERVE},reason="fragmented"}}',
                    "values": "0+60x20",
                },
                {  # pods short of slices come and go: the oldest never waits long
                    "series": f'dynmig_pods_pending_oldest_seconds{{{SERVE},reason="not-enough-free-slices"}}',
                    "values": "120x20",
                },
            ],
            "alert_rule_test": [
                alert("DynmigPodsPendingTooLong", "14m"),
                alert("DynmigPodsPendingTooLong", "16m", {"reason": "fragmented", **severity["warning"]}),
            ],
        },
        {
            "name": "a refused device config",
            "interval": "1m",
            "input_series": [
                {
                    "series": f'dynmig_device_config_refused{{job="{SERVE_JOB}",instance="a"}}',
                    "values": "0 0 1x10",
                },
                {
                    "series": f'dynmig_device_config_refused{{job="{SERVE_JOB}",instance="b"}}',
                    "values": "0x12",
                },
            ],
            "alert_rule_test": [
                alert("DynmigDeviceConfigRefused", "4m"),
                alert(
                    "DynmigDeviceConfigRefused",
                    "8m",
                    {"job": SERVE_JOB, "instance": "a", **severity["warning"]},
                ),
            ],
        },
        {
            "name": "certificate near expiry (14 days)",
            "interval": "1m",
            "input_series": [
                {  # expires 13 days 23 hours after t=0
                    "series": f'dynmig_tls_certificate_expiry_timestamp_seconds{{job="{SERVE_JOB}",instance="a"}}',
                    "values": f"{14 * 86400 - 3600}x20",
                },
                {  # renewed: 60 days left
                    "series": f'dynmig_tls_certificate_expiry_timestamp_seconds{{job="{SERVE_JOB}",instance="b"}}',
                    "values": f"{60 * 86400}x20",
                },
            ],
            "alert_rule_test": [
                alert("DynmigCertificateExpiresSoon", "5m"),
                alert(
                    "DynmigCertificateExpiresSoon",
                    "15m",
                    {"job": SERVE_JOB, "instance": "a", **severity["warning"]},
                ),
            ],
        },
        {
            "name": "serve without a leader",
            "interval": "1m",
            "input_series": [
                {"series": f'dynmig_leader{{job="{SERVE_JOB}",instance="a"}}', "values": "1 1 1 1 1 0x10"},
                {"series": f'dynmig_leader{{job="{SERVE_JOB}",instance="b"}}', "values": "0x15"},
            ],
            "alert_rule_test": [
                alert("DynmigNoLeader", "4m"),  # a leads
                alert("DynmigNoLeader", "6m"),  # nobody for 1m: not yet
                alert("DynmigNoLeader", "9m", severity["critical"]),
            ],
        },
        {
            "name": "DCGM exporter's per-instance series joined to the pod the instance serves",
            "interval": "1m",
            "input_series": [
                {
                    "series": f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{DCGM},GPU_I_PROFILE="1g.5gb",GPU_I_ID="7"}}',
                    "values": "0.42x5",
                },
                # an instance of the same GPU that no pod holds (e.g. idle): no pod to name
                {
                    "series": f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{DCGM},GPU_I_PROFILE="1g.5gb",GPU_I_ID="8"}}',
                    "values": "0x5",
                },
                # the whole GPU's series carries no GPU_I_ID: not an instance
                {"series": f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{DCGM}}}", "values": "0.9x5"},
                {
                    "series": f'dynmig_mig_instance_info{{{OWNER},job="{SERVE_JOB}",instance="a"}}',
                    "values": "1x5",
                },
                {
                    "series": f'dynmig_mig_instance_info{{{OWNER},job="{SERVE_JOB}",instance="b"}}',
                    "values": "1x5",
                },
            ],
            "promql_expr_test": [
                {
                    "expr": "pod:DCGM_FI_PROF_GR_ENGINE_ACTIVE:mig_instance",
                    "eval_time": "3m",
                    "exp_samples": [
                        {
                            "labels": (
                                'pod:DCGM_FI_PROF_GR_ENGINE_ACTIVE:mig_instance{gpu="0",UUID="GPU-a0",'
                                'pci_bus_id="00000000:07:00.0",device="nvidia0",modelName="NVIDIA A100-SXM4-40GB",'
                                'Hostname="gpu-a",GPU_I_PROFILE="1g.5gb",GPU_I_ID="7",instance="10.0.0.9:9400",'
                                'job="nvidia-dcgm-exporter",node="gpu-a",gpu_uuid="GPU-a0",gpu_instance_id="7",'
                                'namespace="team",pod="train",profile="1g.5gb",mig_uuid="MIG-7a"}'
                            ),
                            "value": 0.42,
                        }
                    ],
                }
            ],
        },
    ]


def test_the_charts_prometheus_rule_passes_promtool_check_rules(tmp_path):
    rules = write_rules(tmp_path / "rules.yaml")
    done = promtool("check", "rules", str(rules))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 18 rules found" in done.stdout


def test_each_alert_fires_when_it_should_and_not_otherwise_and_dcgm_series_get_their_pod(tmp_path):
    # promtool compares annotations too; theirs are Prometheus templates `check rules` parses
    groups = rule_groups()
    for group in groups["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(groups))
    (tmp_path / "tests.yaml").write_text(
        yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": cases()})
    )
    done = promtool("test", "rules", "tests.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_alert_thresholds_and_waits_come_from_the_values(tmp_path):
    groups = rule_groups(
        "metrics.prometheusRule.for.pluginDown=10s",
        "metrics.prometheusRule.pendingMinutes=30",
        "metrics.prometheusRule.disabled={DynmigServeDown}",
        "metrics.prometheusRule.dcgmFields=null",
        "metrics.prometheusRule.alertLabels.team=gpu",
    )
    rules = {r["alert"]: r for g in groups["groups"] for r in g["rules"] if "alert" in r}
    assert rules["DynmigDevicePluginDown"]["for"] == "10s"
    assert rules["DynmigPodsPendingTooLong"]["expr"].endswith("> 1800")
    assert "DynmigServeDown" not in rules
    assert [g["name"] for g in groups["groups"]] == ["dynmig.alerts"]  # no DCGM fields: no recording rules
    assert all(r["labels"]["team"] == "gpu" for r in rules.values())


def dashboard() -> dict:
    docs = render(
        "1.35",
        "metrics.grafanaDashboard.enabled=true",
        "metrics.grafanaDashboard.annotations.grafana_folder=GPUs",
    )
    cm = one(docs, "ConfigMap", "-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "GPUs"}
    return json.loads(cm["data"]["dynmig.json"])


def queries(board: dict) -> list[str]:
    """Every panel's query, with Grafana's interval variable replaced as Grafana does before sending it."""
    return [t["expr"].replace("$__rate_interval", "5m") for p in board["panels"] for t in p["targets"]]


def test_the_dashboard_renders_from_the_chart_and_every_query_passes_promtools_parser(tmp_path):
    board = dashboard()
    titles = [p["title"] for p in board["panels"]]
    for wanted in (
        "Slices used per model and node",
        "Slices free per model and node",
        "Pending MIG pods by reason",
        "Time to Running",
        "Instance creates and destroys",
        "Reuse of idle instances",
    ):
        assert wanted in titles
    rules = [{"record": f"dashboard:query_{i}", "expr": e} for i, e in enumerate(queries(board))]
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = promtool("check", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules)} rules found" in done.stdout


def test_a_broken_dashboard_query_would_fail_that_check(tmp_path):
    path = tmp_path / "broken.yaml"
    rules = [{"record": "dashboard:query_0", "expr": "sum by (node (dynmig_gpu_free_slices)"}]
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    assert promtool("check", "rules", str(path)).returncode != 0


SERIES = re.compile(r"\b((?:dynmig|hami)_[a-z0-9_]+)")
SUFFIXES = ("_bucket", "_sum", "_count")


def test_every_dynmig_series_the_rules_and_the_dashboard_read_is_one_dynmig_exports():
    exported = documented("serve") | documented("device-plugin")
    exprs = [r["expr"] for g in rule_groups()["groups"] for r in g["rules"]] + queries(dashboard())
    read = {m for e in exprs for m in SERIES.findall(e)}
    unknown = {
        m
        for m in read
        if m not in exported and not any(m.endswith(s) and m[: -len(s)] in exported for s in SUFFIXES)
    }
    assert read and unknown == set()


def test_serves_service_monitor_keeps_the_namespace_and_pod_a_series_names():
    # else Prometheus Operator's target labels rename them exported_namespace/exported_pod, and the
    # recording rules would name serve's own pod instead of the workload's
    docs = render("1.35", "metrics.serviceMonitor.enabled=true")
    assert one(docs, "ServiceMonitor", "dynmig")["spec"]["endpoints"][0]["honorLabels"] is True
