"""`--device-list-strategy=cdi`: the device plugin writes a CDI spec per MIG instance before kubelet
hears its name, and the spec leaves with the instance, also across a crash and restart. Each spec is
read back the way the container runtime reads it (sim.kubelet.cdi: the CDI library's resolution)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sim.kubelet import cdi as runtime
from sim.nvml.caps import write_mig_minors

from tests.plugin.conftest import Want

A100 = {"gpus": [{"model": "A100-SXM4-40GB"}, {"model": "A100-SXM4-40GB"}]}
KIND = "k8s.dynmig.io/mig"


@pytest.fixture
def cdi(plugin_dir: Path) -> dict[str, Path]:
    """The node's CDI spec dir and the driver's MIG capability table, as the plugin is given them."""
    return {"cdi_dir": plugin_dir / "cdi", "mig_minors": write_mig_minors(plugin_dir / "mig-minors", 2)}


def running(node, name: str, want: Want) -> None:
    node.add_pod(name, [[want]])
    assert node.admit(name).ok
    node.set_phase(name, "Running")


def specs(cdi: dict[str, Path]) -> list[str]:
    return sorted(p.name for p in cdi["cdi_dir"].glob("*.json")) if cdi["cdi_dir"].is_dir() else []


def test_allocate_answers_a_cdi_name_the_runtime_resolves_to_the_mig_device_from_the_plugins_spec(
    make_node, cdi
):
    node = make_node(A100)
    node.start_plugin(strategy="cdi", **cdi)
    node.add_pod("a", [[Want(1, "3g.20gb", 4, 4)]])

    result = node.admit("a")

    assert result.ok, result.error
    [r] = node.reservations("a")
    [name] = [d.name for d in result.containers[0].response.cdi_devices]
    assert name == f"{KIND}={r.migUUID}"
    env, _ = runtime.inject([cdi["cdi_dir"]], [name])
    assert env["NVIDIA_VISIBLE_DEVICES"] == r.migUUID
    spec = json.loads((cdi["cdi_dir"] / f"k8s.dynmig.io-mig_{r.migUUID}.json").read_text())
    assert (spec["cdiVersion"], spec["kind"]) == ("0.6.0", KIND)
    nodes = [n["path"] for n in spec["devices"][0]["containerEdits"]["deviceNodes"]]
    # GPU minor 1; its GI and CI capability minors as the driver's table numbers them
    gi_cap = 3 + 1 * 135 + r.gpuInstanceID * 9
    assert nodes == [
        "/dev/nvidia1",
        f"/dev/nvidia-caps/nvidia-cap{gi_cap}",
        f"/dev/nvidia-caps/nvidia-cap{gi_cap + 1 + r.computeInstanceID}",
    ]
    assert [n["path"] for n in spec["containerEdits"]["deviceNodes"]] == [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
    ]


def test_device_nodes_in_the_spec_are_under_the_configured_driver_root(make_node, cdi):
    node = make_node(A100)
    node.start_plugin(strategy="cdi", driver_root=Path("/run/nvidia/driver"), **cdi)
    node.add_pod("a", [[Want(0, "1g.5gb", 0, 1)]])
    assert node.admit("a").ok
    [path] = cdi["cdi_dir"].glob("*.json")
    edits = json.loads(path.read_text())["devices"][0]["containerEdits"]
    assert edits["deviceNodes"][0] == {"path": "/dev/nvidia0", "hostPath": "/run/nvidia/driver/dev/nvidia0"}


def test_the_spec_of_an_instance_leaves_with_the_instance_when_its_pod_is_deleted(make_node, cdi):
    node = make_node(A100)
    node.start_plugin(strategy="cdi", **cdi)
    node.add_pod("a", [[Want(0, "1g.5gb", 0, 1)]])
    node.add_pod("b", [[Want(0, "1g.5gb", 1, 1)]], lock=False)
    assert node.admit("a").ok and node.admit("b").ok
    [a], [b] = node.reservations("a"), node.reservations("b")
    assert specs(cdi) == sorted(f"k8s.dynmig.io-mig_{r.migUUID}.json" for r in (a, b))

    node.core.delete_namespaced_pod("a", "default")
    node.tick()

    assert specs(cdi) == [f"k8s.dynmig.io-mig_{b.migUUID}.json"]


def test_a_failed_spec_write_fails_the_allocate_and_leaves_no_instance(make_node, cdi):
    node = make_node(A100)
    cdi["cdi_dir"].parent.mkdir(parents=True, exist_ok=True)
    cdi["cdi_dir"].write_text("not a directory")  # the spec dir cannot be made
    node.start_plugin(strategy="cdi", **cdi)
    node.add_pod("a", [[Want(0, "1g.5gb", 0, 1)]])

    result = node.admit("a")

    assert not result.ok
    assert "cannot write CDI spec" in result.error
    assert node.instances(0) == []


def test_after_a_crash_the_restarted_plugin_keeps_the_specs_of_live_instances_and_removes_the_rest(
    make_node, cdi
):
    node = make_node(A100)
    node.start_plugin(strategy="cdi", **cdi)
    running(node, "a", Want(0, "1g.5gb", 0, 1))
    running(node, "b", Want(0, "1g.5gb", 1, 1))
    [a], [b] = node.reservations("a"), node.reservations("b")
    node.stop_plugin()  # as after kill -9: the journal and the spec files stay as they were
    node.core.delete_namespaced_pod("a", "default", grace_period_seconds=0)  # deleted while no plugin ran
    (cdi["cdi_dir"] / "k8s.dynmig.io-mig_MIG-left-by-an-earlier-run.json").write_text("{}")
    (cdi["cdi_dir"] / "nvidia.com-gpu.json").write_text("{}")  # the toolkit's own spec: not ours

    node.start_plugin(strategy="cdi", **cdi)

    assert [u for _, _, _, u in node.instances(0)] == [b.migUUID]
    assert specs(cdi) == [f"k8s.dynmig.io-mig_{b.migUUID}.json", "nvidia.com-gpu.json"]
    assert a.migUUID != b.migUUID


def test_a_restart_rewrites_a_lost_spec_of_an_instance_still_in_use(make_node, cdi):
    node = make_node(A100)
    node.start_plugin(strategy="cdi", **cdi)
    running(node, "a", Want(0, "1g.5gb", 0, 1))
    [a] = node.reservations("a")
    node.stop_plugin()
    (cdi["cdi_dir"] / f"k8s.dynmig.io-mig_{a.migUUID}.json").unlink()  # /var/run is a tmpfs: a node reboot

    node.start_plugin(strategy="cdi", **cdi)

    env, _ = runtime.inject([cdi["cdi_dir"]], [f"{KIND}={a.migUUID}"])
    assert env["NVIDIA_VISIBLE_DEVICES"] == a.migUUID
