"""Serve holds its device config to `dynmig policy check`: a changed file with an error is refused,
the last good config stays in force, and serve says why in an Event and a metric; a file that only
warns (HAMi's own device config, a one-model policy) loads."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from prometheus_client import CollectorRegistry, generate_latest
from waiting_testkit import eventually
from webhooks_testkit import node

from base.policyfiles import DEFAULT_POLICY
from mig.allowlist import PolicyError
from mig.annotations import MIG_ALLOCATIONS, VGPU_NODE, MigAllocation, encode_allocations
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


RTX_ONLY = 'nvidia:\n  migProfileAllowlist:\n    - {models: ["RTX PRO 6000"], profiles: ["1g.24gb"]}\n'


def test_serve_says_which_nodes_a_reloaded_policy_leaves_without_mig_and_which_pods_hold_what_it_drops(
    apiserver, start_service, config_file
):
    apiserver.create(node("gpu-a100", "A100-SXM4-40GB", 1))
    apiserver.create(node("gpu-rtx", "RTX-PRO-6000", 1))
    held = MigAllocation.model_validate(
        {
            "containerIndex": 0,
            "deviceIndex": 0,
            "gpuUUID": "GPU-gpu-a100-0",
            "profile": "3g.20gb",
            "placement": {"start": 0, "size": 4},
        }
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "train",
            "namespace": "team",
            "annotations": {VGPU_NODE: "gpu-a100", MIG_ALLOCATIONS: encode_allocations([held])},
        },
        "spec": {"nodeName": "gpu-a100", "containers": [{"name": "main", "image": "cuda"}]},
    }
    apiserver.create(pod)
    service = start_service(namespace="dynmig", identity="dynmig-scheduler-0")
    assert service.device_config.fleet.nodes == 2 and not service.device_config.fleet

    change(config_file, RTX_ONLY)
    config = service.device_config.get()

    assert config.allowlist.profiles_for("NVIDIA A100-SXM4-40GB") == () and not service.device_config.refused
    assert [b.node for b in service.device_config.fleet.bare] == ["gpu-a100"]
    assert [h.pod for h in service.device_config.fleet.held] == ["team/train"]

    def findings() -> list[dict]:
        found = client.CoreV1Api(apiserver.api_client("admin")).list_namespaced_event(
            "dynmig", _preload_content=False
        )
        return [e for e in json.loads(found.data)["items"] if e["reason"] == "DeviceConfigFleetFindings"]

    assert eventually(lambda: findings())
    (event,) = findings()
    assert event["type"] == "Warning" and event["involvedObject"]["name"] == "dynmig-scheduler-0"
    assert "node gpu-a100 (1 × NVIDIA A100-SXM4-40GB) would publish no MIG profile" in event["message"]
    assert (
        "pod team/train holds a 3g.20gb on gpu-a100" in event["message"]
        and "it keeps running" in event["message"]
    )
    page = generate_latest(service.metrics.registry).decode()
    assert "dynmig_device_config_bare_nodes 1.0" in page
    assert "dynmig_device_config_disallowed_reservations 1.0" in page
    assert apiserver.get("pods", "train", "team") is not None
