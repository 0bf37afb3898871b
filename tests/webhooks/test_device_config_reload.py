"""Serve holds its device config to `dynmig policy check`: a changed file with an error is refused,
the last good config stays in force, and serve says why in an Event and a metric; a file that only
warns (HAMi's own device config, a one-model policy) loads."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from prometheus_client import CollectorRegistry, generate_latest
from waiting_testkit import eventually

from mig.allowlist import DEFAULT_POLICY, PolicyError
from webhooks.config import DeviceConfigCollector, DeviceConfigFile

# a profile not shaped <N>g.<x>: an error (HAMi refuses it too)
NOT_A_PROFILE = (
    "nvidia:\n  migProfileAllowlist:\n"
    '    - {models: ["H100 80GB HBM3"], profiles: ["1g.10gb", "3g-40gb"]}\n'
    "    - {models: [NVIDIA], migOff: true}\n"
)
# 3g.20gb is an A100-40GB profile: a warning (it resolves by slice key to the H100's 3g.40gb)
OTHER_MODELS_PROFILE = (
    "nvidia:\n  migProfileAllowlist:\n"
    '    - {models: ["H100 80GB HBM3"], profiles: ["1g.10gb", "3g.20gb"]}\n'
    "    - {models: [NVIDIA], migOff: true}\n"
)
FIXTURES = DEFAULT_POLICY.parents[1] / "tests" / "fixtures"


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "device-config.yaml"
    path.write_text(DEFAULT_POLICY.read_text())
    return path


def change(path, text: str) -> None:
    path.write_text(text + "\n" * (1 + len(path.read_text()) % 3))  # a new size: a new stamp


def test_a_file_with_an_error_is_refused_at_startup(tmp_path):
    path = tmp_path / "device-config.yaml"
    path.write_text(NOT_A_PROFILE)
    with pytest.raises(PolicyError, match=r"profile '3g-40gb' has no '\.'"):
        DeviceConfigFile(path)


@pytest.mark.parametrize(
    "name", ["hami-v2.10-chart-device-config.yaml", "hami-docs-two-entry.yaml", "one-model.yaml"]
)
def test_serve_loads_hamis_device_configs_and_a_one_model_policy(name):
    config = DeviceConfigFile(FIXTURES / name).get()
    assert config.allowlist.profiles_for("NVIDIA A100-SXM4-40GB")[0] == "1g.5gb"


def test_a_reload_that_only_warns_is_taken(config_file):
    source = DeviceConfigFile(config_file, interval=0)
    change(config_file, OTHER_MODELS_PROFILE)
    assert source.get().allowlist.profiles_for("NVIDIA H100 80GB HBM3") == ("1g.10gb", "3g.20gb")
    assert not source.refused and source.refusals == 0


def test_a_reload_with_an_error_keeps_the_last_good_config_and_says_why(config_file):
    said: list[str] = []
    source = DeviceConfigFile(config_file, interval=0, on_refused=said.append)
    good = source.get()
    change(config_file, NOT_A_PROFILE)
    assert source.get() is good and source.refused and source.refusals == 1
    assert source.get() is good and source.refusals == 1  # the same file is refused once
    (message,) = said
    assert "dynmig policy check reports an error" in message and "the previous one stays in force" in message
    assert "nvidia.migProfileAllowlist[0].profiles[1]: profile '3g-40gb' has no '.'" in message
    change(config_file, DEFAULT_POLICY.read_text())
    assert source.get() is not good and not source.refused


def test_the_refusal_shows_in_the_metrics(config_file):
    source = DeviceConfigFile(config_file, interval=0)
    registry = CollectorRegistry()
    registry.register(DeviceConfigCollector(source))
    change(config_file, "nvidia:\n  migProfileAllowList: []\n")
    source.get()
    page = generate_latest(registry).decode()
    assert "dynmig_device_config_refused 1.0" in page and "dynmig_device_config_refusals_total 1.0" in page


@pytest.fixture
def device_config(config_file):  # serve's Service reads this file (overrides the conftest's)
    return DeviceConfigFile(config_file, interval=0)


def test_serve_posts_a_warning_event_about_its_own_pod_when_it_refuses_a_reload(
    apiserver, start_service, config_file
):
    service = start_service(namespace="dynmig", identity="dynmig-scheduler-0")
    change(config_file, NOT_A_PROFILE)
    service.device_config.get()

    def refusals() -> list[dict]:
        found = client.CoreV1Api(apiserver.api_client("admin")).list_namespaced_event(
            "dynmig", _preload_content=False
        )
        return [e for e in json.loads(found.data)["items"] if e["reason"] == "DeviceConfigRefused"]

    assert eventually(lambda: refusals())
    (event,) = refusals()
    assert event["type"] == "Warning" and event["involvedObject"]["name"] == "dynmig-scheduler-0"
    assert "profile '3g-40gb' has no '.'" in event["message"]
