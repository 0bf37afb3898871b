"""`dynmig status` reads pods by the resource names of dynmig serve's device config (from its labelled
ConfigMap or `--device-config FILE`), so an install that renamed its resources still sees its pods;
disagreeing, broken or hostile device configs are named, never a crash."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from registration_testkit import registration
from sim.apiserver import ApiServer

from dynmig.status.main import main
from mig.annotations import NODE_REGISTER

RENAMED = """nvidia:
  resourceCountName: example.com/mig
  resourceMemoryName: example.com/vram
  migProfileAllowlist:
    - models: ["A100-SXM4-40GB"]
      profiles: ["1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb"]
"""


def config_map(name: str, text: str, namespace: str = "dynmig", labelled: bool = True) -> dict[str, Any]:
    labels = {"dynmig.io/device-config": "true"} if labelled else {}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "data": {"device-config.yaml": text},
    }


def waiting(name: str, limits: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}]},
    }


@pytest.fixture
def api() -> Iterator[ApiServer]:
    server = ApiServer().start()
    for ns in ("ml", "dynmig", "other"):
        server.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    gpus = registration(
        "", "A100-SXM4-40GB", 1, names=("1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb"), ids=("G",)
    )
    server.create(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "annotations": {NODE_REGISTER: gpus}}}
    )
    server.create(waiting("renamed", {"example.com/mig": "1", "example.com/vram": "80000"}))
    try:
        yield server
    finally:
        server.stop()


def status(api: ApiServer, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any], str]:
    code = main(["--kubeconfig", str(api.kubeconfig()), "-o", "json", *args])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out else {}), err


def pending(fleet: dict[str, Any]) -> list[str]:
    return [p["pod"] for p in fleet["pending"]]


def test_a_pod_asking_renamed_resources_is_shown_once_the_labelled_device_config_renames_them(api, capsys):
    code, fleet, _ = status(api, capsys)
    assert code == 0 and pending(fleet) == []  # by the default names it is no MIG pod
    api.create(config_map("dynmig-device-config", RENAMED))
    code, fleet, err = status(api, capsys)
    assert code == 0, err
    assert pending(fleet) == ["ml/renamed"]
    assert "80000 MiB" in fleet["pending"][0]["asks"]


def test_a_device_config_file_names_the_resources_and_a_broken_one_is_an_error_naming_it(
    api, capsys, tmp_path: Path
):
    good = tmp_path / "device-config.yaml"
    good.write_text(RENAMED)
    code, fleet, err = status(api, capsys, "--device-config", str(good))
    assert code == 0, err
    assert pending(fleet) == ["ml/renamed"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("nvidia:\n  migProfileAllowlist: 7\n")
    code, _, err = status(api, capsys, "--device-config", str(bad))
    assert code == 1
    assert f"--device-config {bad}" in err and "migProfileAllowlist" in err
    code, _, err = status(api, capsys, "--device-config", str(tmp_path / "absent.yaml"))
    assert code == 1 and "No such file or directory" in err


def test_device_configs_that_name_different_resources_ask_for_the_one_to_use(api, capsys):
    api.create(config_map("dynmig-device-config", RENAMED))
    api.create(
        config_map(
            "second-install",
            "nvidia:\n  resourceCountName: other.io/gpu\n  migProfileAllowlist: [{models: [A30], profiles: [1g.6gb]}]\n",
            namespace="other",
        )
    )
    code, fleet, err = status(api, capsys)
    assert code == 1 and fleet == {}
    assert "name different resources" in err
    assert "configmap dynmig/dynmig-device-config" in err and "configmap other/second-install" in err
    assert "--device-config FILE" in err


def test_an_unlabelled_config_map_is_not_a_device_config(api, capsys):
    api.create(config_map("lookalike", RENAMED, labelled=False))
    code, fleet, err = status(api, capsys)
    assert code == 0, err
    assert pending(fleet) == []


@pytest.mark.parametrize(
    "text",
    [
        "nvidia: [",  # not YAML
        "[" * 5000 + "]" * 5000,  # deeply nested
        "nvidia:\n  migProfileAllowlist:\n" + "    - {models: [A100], profiles: [bogus]}\n" * 2000,
    ],
    ids=["not yaml", "deeply nested", "thousands of bad entries"],
)
def test_a_broken_or_hostile_device_config_is_skipped_with_a_warning_naming_it(api, capsys, text):
    api.create(config_map("broken", text))
    code, fleet, err = status(api, capsys)
    assert code == 0, err
    assert pending(fleet) == []  # the defaults apply
    assert "warning: configmap dynmig/broken is skipped: device-config.yaml is invalid" in err
    assert len(err) < 2000


def test_status_still_works_by_the_default_names_when_config_maps_may_not_be_listed(api, capsys):
    api.create(config_map("dynmig-device-config", RENAMED))
    api.create(waiting("plain", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "80000"}))
    api.faults.fail_next(verb="list", resource="configmaps", code=403, message="configmaps is forbidden")
    code, fleet, err = status(api, capsys)
    assert code == 0, err
    assert pending(fleet) == ["ml/plain"]
