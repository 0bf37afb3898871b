"""The GPU Operator 25.10+ preset, charts/dynmig/values-gpu-operator.yaml: it lints, renders valid
objects for Kubernetes 1.28 and 1.35, and gives the device plugin what such a node needs (NVIDIA's
runtime, the toolkit's readiness, a CDI spec per instance in the runtime's spec dir, a socket name
NVIDIA's device plugin does not use)."""

from __future__ import annotations

import pytest
import yaml
from chart_testkit import CHART, container, helm, one
from test_chart_schemas import problems

PRESET = CHART / "values-gpu-operator.yaml"


def render(kube_version: str, *more: str) -> list[dict]:
    done = helm("template", "dynmig", str(CHART), "-f", str(PRESET), "--kube-version", kube_version, *more)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def test_the_preset_lints_strictly():
    done = helm("lint", "--strict", str(CHART), "-f", str(PRESET))
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("kube_version", ["1.28", "1.35"])
def test_the_preset_renders_valid_objects(kube_version):
    assert not problems(kube_version, render(kube_version))


def test_with_the_preset_the_plugin_writes_cdi_specs_into_the_hosts_spec_dir_under_nvidias_runtime():
    daemonset = one(render("1.35"), "DaemonSet")
    spec = daemonset["spec"]["template"]["spec"]
    plugin = container(daemonset, "device-plugin")
    assert spec["runtimeClassName"] == "nvidia"
    assert [c["name"] for c in spec["initContainers"]] == ["toolkit-validation"]
    args = plugin["args"]
    assert {"--device-list-strategy=cdi", "--cdi-dir=/var/run/cdi", "--driver-root=/"} <= set(args)
    assert "--socket-name=dynmig-gpu.sock" in args  # NVIDIA's plugin's is nvidia-gpu.sock
    mount = next(m for m in plugin["volumeMounts"] if m["name"] == "cdi")
    volume = next(v for v in spec["volumes"] if v["name"] == "cdi")
    assert mount["mountPath"] == volume["hostPath"]["path"] == "/var/run/cdi"


def test_the_driver_root_of_gpu_operators_driver_container_reaches_the_cdi_specs():
    daemonset = one(render("1.35", "--set", "devicePlugin.nvidiaDriverRoot=/run/nvidia/driver"), "DaemonSet")
    assert "--driver-root=/run/nvidia/driver" in container(daemonset, "device-plugin")["args"]
