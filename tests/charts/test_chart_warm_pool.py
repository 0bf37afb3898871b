"""The chart's warm pool: off by default, a number split by demand, or exact counts per profile for a
known burst, on every node or one node's entry; the device plugin accepts what the chart passes and
the values schema refuses a profile or count it would not."""

from __future__ import annotations

import json

import pytest
from chart_testkit import CHART, arg, container, helm, one, render

from plugin.config import ConfigError, parse_node_config, warm_size


def plugin_args(*sets: str) -> list[str]:
    return container(one(render("1.35", *sets), "DaemonSet", "-device-plugin"), "device-plugin")["args"]


def test_the_warm_pool_is_off_unless_asked_for():
    assert not [a for a in plugin_args() if a.startswith("--warm-")]


def test_a_pool_by_profile_is_passed_as_the_flag_the_plugin_reads():
    args = plugin_args(
        r"devicePlugin.warmPool.profiles.1g\.5gb=56", r"devicePlugin.warmPool.profiles.2g\.10gb=4"
    )
    pool = arg({"args": args}, "warm-pool")
    assert pool == "1g.5gb=56,2g.10gb=4"
    assert warm_size(pool).profiles == (("1g.5gb", 56), ("2g.10gb", 4))
    assert arg({"args": plugin_args("devicePlugin.warmPool.size=4")}, "warm-pool") == "4"


def test_a_nodes_pool_by_profile_reaches_its_node_config_entry():
    docs = render(
        "1.35", "devicePlugin.nodeConfig[0].name=gpu-1", r"devicePlugin.nodeConfig[0].warmPool.1g\.5gb=56"
    )
    config = json.loads(one(docs, "ConfigMap", "-node-config")["data"]["config.json"])
    assert config["nodeconfig"][0]["warmPool"] == {"1g.5gb": 56}
    node = parse_node_config(config, "gpu-1", "config.json")
    assert node.warm_pool is not None and node.warm_pool.profiles == (("1g.5gb", 56),)


@pytest.mark.parametrize(
    ("value", "named"),
    [
        (r"devicePlugin.warmPool.profiles.rm-rf=3", "rm-rf"),
        (r"devicePlugin.warmPool.profiles.1g\.5gb=65", "maximum"),
        (r"devicePlugin.warmPool.profiles.1g\.5gb=-1", "minimum"),
        ("devicePlugin.nodeConfig[0].name=n1,devicePlugin.nodeConfig[0].warmPool=100", "warmPool"),
    ],
)
def test_the_values_schema_refuses_a_bad_pool(value, named):
    done = helm("template", "dynmig", str(CHART), "--set", value)
    assert done.returncode != 0
    assert named in done.stderr


def test_a_total_the_schema_cannot_bound_is_refused_by_the_plugin():
    # the schema bounds each count; the plugin bounds the sum (64 per node)
    docs = render(
        "1.35",
        "devicePlugin.nodeConfig[0].name=n1",
        r"devicePlugin.nodeConfig[0].warmPool.1g\.5gb=40",
        r"devicePlugin.nodeConfig[0].warmPool.2g\.10gb=40",
    )
    config = json.loads(one(docs, "ConfigMap", "-node-config")["data"]["config.json"])
    with pytest.raises(ConfigError) as error:
        parse_node_config(config, "n1", "config.json")
    assert "nodeconfig[0].warmPool" in str(error.value)
