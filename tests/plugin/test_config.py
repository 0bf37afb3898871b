"""Configuration: flags, environment, device config and node config; errors name file and field."""

from __future__ import annotations

import json

import pytest

from plugin.config import ConfigError, DeviceFilter, load_config, parse_node_config
from plugin.main import main

GOOD_POLICY = "nvidia:\n  migProfileAllowlist:\n    - models: [A100-SXM4-40GB]\n      profiles: [1g.5gb]\n"


@pytest.fixture
def policy(tmp_path):
    path = tmp_path / "device-config.yaml"
    path.write_text(GOOD_POLICY)
    return path


def test_a_node_config_entry_is_picked_by_node_name_with_its_filter():
    doc = {
        "nodeconfig": [
            {"name": "other", "operatingmode": "hami-core"},
            {"name": "n1", "operatingmode": "mig", "filterdevices": {"uuid": ["GPU-a"], "index": [3]}},
        ]
    }

    node = parse_node_config(doc, "n1", "config.json")

    assert node.mig
    assert node.filter == DeviceFilter(frozenset({"GPU-a"}), frozenset({3}))
    assert node.filter.excludes("GPU-b", 3) and node.filter.excludes("GPU-a", 0)
    assert not node.filter.excludes("GPU-b", 0)


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"nodeconfig": [{"name": "n1", "operatingmode": "turbo"}]}, "nodeconfig[0].operatingmode"),
        (
            {"nodeconfig": [{"name": "n1", "filterdevices": {"index": ["0"]}}]},
            "nodeconfig[0].filterdevices.index",
        ),
        (
            {"nodeconfig": [{"name": "n1", "filterdevices": {"uuid": "GPU-a"}}]},
            "nodeconfig[0].filterdevices.uuid",
        ),
        ({"nodeconfig": {"name": "n1"}}, "nodeconfig must be a list"),
    ],
)
def test_a_bad_node_config_names_the_file_and_field(doc, field):
    with pytest.raises(ConfigError) as error:
        parse_node_config(doc, "n1", "/config/config.json")

    assert "/config/config.json" in str(error.value)
    assert field in str(error.value)


def test_flags_and_files_make_a_complete_config(policy, tmp_path):
    node_config = tmp_path / "config.json"
    node_config.write_text(
        json.dumps({"nodeconfig": [{"name": "n1", "operatingmode": "mig", "filterdevices": {"index": [1]}}]})
    )

    config = load_config(
        [
            "--node-name",
            "n1",
            "--config-file",
            str(policy),
            "--node-config",
            str(node_config),
            "--kubelet-dir",
            str(tmp_path),
            "--device-list-strategy",
            "cdi-cri",
            "--reconcile-interval",
            "2.5",
        ]
    )

    assert config.node.mig and config.node.filter.indexes == {1}
    assert config.strategy == "cdi-cri" and config.reconcile_interval == 2.5
    assert config.resource_name == "nvidia.com/gpu"
    assert config.socket_path == tmp_path / "nvidia-gpu.sock"
    assert config.allowlist.profiles_for("NVIDIA A100-SXM4-40GB") == ("1g.5gb",)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--device-list-strategy", "volume-mounts"], "--device-list-strategy"),
        (["--reconcile-interval", "0"], "--reconcile-interval"),
        (["--socket-name", "a/b.sock"], "--socket-name"),
    ],
)
def test_a_bad_flag_is_named(policy, args, field):
    with pytest.raises(ConfigError) as error:
        load_config(["--node-name", "n1", "--config-file", str(policy), *args])

    assert field in str(error.value)


def test_the_node_name_is_required(policy, monkeypatch):
    monkeypatch.delenv("NODE_NAME", raising=False)

    with pytest.raises(ConfigError, match="NODE_NAME"):
        load_config(["--config-file", str(policy)])


def test_a_bad_device_config_exits_non_zero_naming_the_file_and_field(tmp_path, capsys):
    bad = tmp_path / "device-config.yaml"
    bad.write_text("nvidia:\n  migProfileAllowlist:\n    - models: [A100]\n      profiles: [7g]\n")

    code = main(["--node-name", "n1", "--config-file", str(bad)])

    err = capsys.readouterr().err
    assert code == 2
    assert str(bad) in err
    assert "nvidia.migProfileAllowlist[0].profiles[0]" in err


def test_a_node_that_is_not_in_mig_mode_is_refused_by_name(policy, tmp_path, capsys):
    node_config = tmp_path / "config.json"
    node_config.write_text(json.dumps({"nodeconfig": [{"name": "n1", "operatingmode": "hami-core"}]}))

    code = main(["--node-name", "n1", "--config-file", str(policy), "--node-config", str(node_config)])

    assert code == 2
    assert "operatingmode" in capsys.readouterr().err


def test_unreadable_node_config_json_is_reported_with_its_position(policy, tmp_path):
    node_config = tmp_path / "config.json"
    node_config.write_text('{"nodeconfig": [')

    with pytest.raises(ConfigError) as error:
        load_config(["--node-name", "n1", "--config-file", str(policy), "--node-config", str(node_config)])

    assert str(node_config) in str(error.value) and "line 1" in str(error.value)
