"""Serve holds its device config to `dynmig policy check --strict`: a changed file that fails is
refused, the last good config stays in force, and serve says why in an Event and a metric."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from prometheus_client import CollectorRegistry, generate_latest
from waiting_testkit import eventually

from mig.allowlist import DEFAULT_POLICY, PolicyError
from webhooks.config import DeviceConfigCollector, DeviceConfigFile

# 3g.20gb is an A100-40GB profile: a warning for `policy check`, an error under --strict
OTHER_MODELS_PROFILE = (
    "nvidia:\n  migProfileAllowlist:\n"
    '    - {models: ["H100 80GB HBM3"], profiles: ["1g.10gb", "3g.20gb"]}\n'
    "    - {models: [NVIDIA], migOff: true}\n"
)


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "device-config.yaml"
    path.write_text(DEFAULT_POLICY.read_text())
    return path


def change(path, text: str) -> None:
    path.write_text(text + "\n" * (1 + len(path.read_text()) % 3))  # a new size: a new stamp


def test_a_file_that_fails_the_strict_check_is_refused_at_startup(tmp_path):
    path = tmp_path / "device-config.yaml"
    path.write_text(OTHER_MODELS_PROFILE)
    with pytest.raises(PolicyError, match=r"3g\.20gb is not a profile of H100-SXM5-80GB"):
        DeviceConfigFile(path)


def test_a_reload_that_fails_the_strict_check_keeps_the_last_good_config_and_says_why(config_file):
    said: list[str] = []
    source = DeviceConfigFile(config_file, interval=0, on_refused=said.append)
    good = source.get()
    change(config_file, OTHER_MODELS_PROFILE)
    assert source.get() is good and source.refused and source.refusals == 1
    assert source.get() is good and source.refusals == 1  # the same file is refused once
    (message,) = said
    assert "dynmig policy check --strict" in message and "the previous one stays in force" in message
    assert "nvidia.migProfileAllowlist[0].profiles: 3g.20gb is not a profile of H100-SXM5-80GB" in message
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
    change(config_file, OTHER_MODELS_PROFILE)
    service.device_config.get()

    def refusals() -> list[dict]:
        found = client.CoreV1Api(apiserver.api_client("admin")).list_namespaced_event(
            "dynmig", _preload_content=False
        )
        return [e for e in json.loads(found.data)["items"] if e["reason"] == "DeviceConfigRefused"]

    assert eventually(lambda: refusals())
    (event,) = refusals()
    assert event["type"] == "Warning" and event["involvedObject"]["name"] == "dynmig-scheduler-0"
    assert "3g.20gb is not a profile of H100-SXM5-80GB" in event["message"]
