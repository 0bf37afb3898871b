"""`dynmig dra-plugin` on a simulated node: the simulated NVML under pynvml, the simulated API server
over HTTP, and kubelet's side of the wire over the plugin's real unix sockets (registration, then
NodePrepareResources / NodeUnprepareResources through the generated DRA stubs). The plugin runs
unchanged (`DraPluginApp`)."""

from __future__ import annotations

import ctypes
import json
import re
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pynvml
import pytest
from kubernetes import client
from sim.apiserver import ApiServer
from sim.nvml import SimulatedNvml
from sim.nvml.caps import write_mig_minors
from waiting_testkit import wait_for

from base.policyfiles import default_allowlist
from mig.allowlist import DeviceConfig
from plugin.api import dra_v1_pb2 as pb
from plugin.api import dra_v1_pb2_grpc as rpc
from plugin.api import dra_v1beta1_pb2 as beta
from plugin.api import dra_v1beta1_pb2_grpc as beta_rpc
from plugin.api import pluginregistration_pb2 as regpb
from plugin.api import pluginregistration_pb2_grpc as regrpc
from plugin.dra.config import DraConfig
from plugin.dra.main import DraPluginApp

NODE = "dra-node"
DRIVER = "mig.dynmig.io"
NS = "team"


class DraNode:
    """One DRA node: its simulated GPUs, the API, and the plugin; `kubelet_*` talk as kubelet does."""

    def __init__(self, api: ApiServer, sim: SimulatedNvml, root: Path):
        self.api, self.sim, self.root = api, sim, root
        self.admin = api.api_client("admin")
        self.resource = client.ResourceV1Api(self.admin)
        client.CoreV1Api(self.admin).create_node(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}
        )
        client.CoreV1Api(self.admin).create_namespace({"metadata": {"name": NS}})
        self.app: DraPluginApp | None = None

    def config(self) -> DraConfig:
        return DraConfig(
            driver=DRIVER,
            node_name=NODE,
            device_config=DeviceConfig(default_allowlist()),
            registry_dir=self.root / "registry",
            plugin_dir=self.root / "plugin",
            cdi_dir=self.root / "cdi",
            state_dir=self.root / "state",
            gpu_lock_dir=self.root / "gpus",
            resync_interval=0.2,
            mig_minors=write_mig_minors(self.root / "mig-minors", 8),
        )

    def start(self) -> DraPluginApp:
        self.app = DraPluginApp(self.config(), self.api.api_client("admin")).start()
        return self.app

    def stop(self) -> None:
        if self.app is not None:
            self.app.stop()
            self.app = None

    # ---- the API

    def slices(self) -> list[dict[str, Any]]:
        body = json.loads(self.resource.list_resource_slice(_preload_content=False).data)
        return [s for s in body["items"] if s["spec"]["driver"] == DRIVER]

    def first_fit(self, profile: str) -> dict[str, Any]:
        """The first listed device of `profile`: what kube-scheduler's first fit takes."""
        for s in self.slices():
            for d in s["spec"].get("devices", []):
                if d["attributes"]["profile"]["string"] == profile:
                    return d
        raise AssertionError(f"no {profile} device listed")

    def claim(self, name: str, *devices: str, driver: str = DRIVER, pool: str = NODE) -> dict[str, Any]:
        created = json.loads(
            self.resource.create_namespaced_resource_claim(
                NS,
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {"name": name},
                    "spec": {
                        "devices": {"requests": [{"name": "mig", "exactly": {"deviceClassName": DRIVER}}]}
                    },
                },
                _preload_content=False,
            ).data
        )
        results = [{"request": "mig", "driver": driver, "pool": pool, "device": d} for d in devices]
        status = {
            "allocation": {"devices": {"results": results}},
            "reservedFor": [{"resource": "pods", "name": name, "uid": "u-" + name}],
        }
        self.resource.patch_namespaced_resource_claim_status(name, NS, {"status": status})
        return created

    # ---- kubelet's side

    def registration(self) -> regpb.PluginInfo:
        path = self.root / "registry" / f"{DRIVER}-reg.sock"
        with grpc.insecure_channel(f"unix://{path}") as channel:
            stub = regrpc.RegistrationStub(channel)
            info = stub.GetInfo(regpb.InfoRequest(), timeout=5)
            stub.NotifyRegistrationStatus(regpb.RegistrationStatus(plugin_registered=True), timeout=5)
            return info

    def prepare(self, *claims: dict[str, Any], wire: Any = (pb, rpc)) -> Any:
        messages, stubs = wire
        with grpc.insecure_channel(f"unix://{self.root / 'plugin' / 'dra.sock'}") as channel:
            request = messages.NodePrepareResourcesRequest(claims=[self._ref(messages, c) for c in claims])
            return stubs.DRAPluginStub(channel).NodePrepareResources(request, timeout=30)

    def unprepare(self, *claims: dict[str, Any]) -> Any:
        with grpc.insecure_channel(f"unix://{self.root / 'plugin' / 'dra.sock'}") as channel:
            request = pb.NodeUnprepareResourcesRequest(claims=[self._ref(pb, c) for c in claims])
            return rpc.DRAPluginStub(channel).NodeUnprepareResources(request, timeout=30)

    @staticmethod
    def _ref(messages: Any, c: dict[str, Any]) -> Any:
        return messages.Claim(
            namespace=c["metadata"].get("namespace", NS), uid=c["metadata"]["uid"], name=c["metadata"]["name"]
        )

    # ---- the hardware

    def instances(self) -> list[tuple[str, str, int, int]]:
        """(GPU UUID, profile, start, size) of every GI, sorted."""
        return sorted(
            (g.uuid, gi.profile, gi.placement.start, gi.placement.size)
            for g in self.sim.gpus()
            for gi in g.gpu_instances
        )


def create_gi(handle: Any, profile_id: int, start: int, size: int) -> Any:
    """A GPU instance made through NVML directly, as another tool on the node would."""
    placement = pynvml.c_nvmlGpuInstancePlacement_t()
    placement.start, placement.size = start, size
    return pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, profile_id, ctypes.byref(placement))


def attrs(device: dict[str, Any]) -> tuple[str, str, int, int]:
    a = device["attributes"]
    return (
        a["parentUUID"]["string"],
        a["profile"]["string"],
        a["placementStart"]["int"],
        a["placementSize"]["int"],
    )


@pytest.fixture
def node(apiserver: ApiServer) -> Iterator[DraNode]:
    root = Path(tempfile.mkdtemp(prefix="dra-", dir="/tmp"))  # unix socket paths stay short
    sim = SimulatedNvml({"node": NODE, "gpus": [{"model": "A100-SXM4-40GB", "count": 2}]}).install()
    n = DraNode(apiserver, sim, root)
    try:
        n.start()
        yield n
    finally:
        n.stop()
        sim.uninstall()
        shutil.rmtree(root, ignore_errors=True)


def test_kubelet_finds_the_driver_and_both_dra_services_through_the_registration_socket(node):
    info = node.registration()
    assert (info.type, info.name) == ("DRAPlugin", DRIVER)
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    assert info.endpoint == str(node.root / "plugin" / "dra.sock")
    assert node.app is not None and node.app.ready()[0]


def test_the_pool_is_published_steered_and_valid_before_kubelet_is_told():
    from mig.dra.slices import validate_slice

    api = ApiServer().start()
    try:
        sim = SimulatedNvml({"node": NODE, "gpus": [{"model": "A100-SXM4-40GB", "count": 2}]}).install()
        root = Path(tempfile.mkdtemp(prefix="dra-", dir="/tmp"))
        n = DraNode(api, sim, root)
        n.start()
        try:
            slices = n.slices()
            assert slices and all(validate_slice(s) == [] for s in slices)
            assert {s["spec"]["pool"]["name"] for s in slices} == {NODE}
            assert all(s["metadata"]["ownerReferences"][0]["kind"] == "Node" for s in slices)
        finally:
            n.stop()
            sim.uninstall()
            shutil.rmtree(root, ignore_errors=True)
    finally:
        api.stop()


def test_prepare_creates_exactly_the_allocated_placement_and_returns_its_cdi_device(node):
    device = node.first_fit("3g.20gb")
    claim = node.claim("train", device["name"])
    answer = node.prepare(claim).claims[claim["metadata"]["uid"]]
    assert answer.error == ""
    (d,) = answer.devices
    assert (d.pool_name, d.device_name, list(d.request_names)) == (NODE, device["name"], ["mig"])
    assert node.instances() == [attrs(device)]
    (cdi_id,) = d.cdi_device_ids
    spec = json.loads(next((node.root / "cdi").glob(f"*_{claim['metadata']['uid']}.json")).read_text())
    assert cdi_id == f"{spec['kind']}={spec['devices'][0]['name']}"
    mig = next(u for g in node.sim.gpus() for u in g.mig_uuids)
    edits = spec["devices"][0]["containerEdits"]
    assert edits["env"] == [f"NVIDIA_VISIBLE_DEVICES={mig}"]
    # the same device edits as the device plugin's specs (plugin/cdi.py): the parent GPU and the
    # capability devices of its GPU instance and compute instance
    paths = [n["path"] for n in edits["deviceNodes"]]
    assert paths[0].startswith("/dev/nvidia") and len(paths) == 3
    assert all(p.startswith("/dev/nvidia-caps/nvidia-cap") for p in paths[1:])


def test_a_prepared_claim_reports_its_mig_uuid_in_the_claims_device_status(node):
    device = node.first_fit("1g.5gb")
    claim = node.claim("infer", device["name"])
    assert node.prepare(claim).claims[claim["metadata"]["uid"]].error == ""
    mig = next(u for g in node.sim.gpus() for u in g.mig_uuids)
    stored = node.resource.read_namespaced_resource_claim("infer", NS, _preload_content=False)
    (entry,) = json.loads(stored.data)["status"]["devices"]
    assert (entry["driver"], entry["pool"], entry["device"]) == (DRIVER, NODE, device["name"])
    assert entry["data"]["migUUID"] == mig and entry["data"]["gpuUUID"] == attrs(device)[0]
    assert entry["conditions"][0]["type"] == "Ready" and entry["conditions"][0]["status"] == "True"


def test_the_claims_pod_gets_mig_instance_created_and_reclaimed_events(node):
    claim = node.claim("evented", node.first_fit("1g.5gb")["name"])
    assert node.prepare(claim).claims[claim["metadata"]["uid"]].error == ""
    mig = next(u for g in node.sim.gpus() for u in g.mig_uuids)
    assert node.unprepare(claim).claims[claim["metadata"]["uid"]].error == ""

    def seen() -> dict[str, str]:
        items = client.CoreV1Api(node.admin).list_namespaced_event(NS).to_dict()["items"]
        return {e["reason"]: e["message"] for e in items if e["involved_object"]["name"] == "evented"}

    wait_for(lambda: set(seen()) == {"MigInstanceCreated", "MigInstanceReclaimed"}, "both events posted")
    events = seen()
    assert mig in events["MigInstanceCreated"] and "1g.5gb@" in events["MigInstanceCreated"]
    assert mig in events["MigInstanceReclaimed"]


def test_a_second_prepare_of_a_prepared_claim_creates_nothing_and_answers_the_same(node):
    claim = node.claim("twice", node.first_fit("1g.5gb")["name"])
    first = node.prepare(claim).claims[claim["metadata"]["uid"]]
    second = node.prepare(claim, wire=(beta, beta_rpc)).claims[claim["metadata"]["uid"]]
    assert [d.cdi_device_ids for d in first.devices] == [d.cdi_device_ids for d in second.devices]
    assert len(node.instances()) == 1


def test_unprepare_destroys_exactly_the_claims_instance_and_leaves_the_others(node):
    a = node.claim("a", node.first_fit("1g.5gb")["name"])
    node.prepare(a)
    wait_for(lambda: attrs(node.first_fit("1g.5gb")) not in node.instances(), what="a republished pool")
    b = node.claim("b", node.first_fit("1g.5gb")["name"])
    node.prepare(b)
    kept = [i for i in node.instances()]
    assert len(kept) == 2
    assert node.unprepare(a).claims[a["metadata"]["uid"]].error == ""
    assert len(node.instances()) == 1
    assert not list((node.root / "cdi").glob(f"*{a['metadata']['uid']}*"))
    assert node.unprepare(a).claims[a["metadata"]["uid"]].error == ""  # again: nothing left, success


def test_a_busy_instance_is_not_destroyed_and_unprepare_says_so(node):
    claim = node.claim("busy", node.first_fit("2g.10gb")["name"])
    node.prepare(claim)
    gpu = next(g for g in node.sim.gpus() if g.gpu_instances)
    gi = gpu.gpu_instances[0]
    node.sim.set_busy(gpu.uuid, gi_id=gi.gi_id, ci_id=gi.compute_instances[0].ci_id)
    answer = node.unprepare(claim).claims[claim["metadata"]["uid"]]
    assert "processes still run" in answer.error
    assert len(node.instances()) == 1
    node.sim.clear_busy(gpu.uuid)
    assert node.unprepare(claim).claims[claim["metadata"]["uid"]].error == ""
    assert node.instances() == []


def test_an_allocation_naming_a_device_this_node_never_publishes_is_refused_per_claim(node):
    good = node.claim("good", node.first_fit("1g.5gb")["name"])
    bad = node.claim("bad", "gpu-7-mig-1g5gb-19-0")
    other_pool = node.claim("elsewhere", node.first_fit("1g.5gb")["name"], pool="another-node")
    answer = node.prepare(good, bad, other_pool).claims
    assert answer[good["metadata"]["uid"]].error == ""
    assert "not a MIG device of this node" in answer[bad["metadata"]["uid"]].error
    assert "is not this node's pool" in answer[other_pool["metadata"]["uid"]].error
    assert len(node.instances()) == 1


def test_a_claim_prepared_for_another_claims_device_is_refused_and_shares_nothing(node):
    device = node.first_fit("3g.20gb")["name"]
    first = node.claim("first", device)
    node.prepare(first)
    thief = node.claim("thief", device)
    answer = node.prepare(thief).claims[thief["metadata"]["uid"]]
    assert "prepared for claim team/first" in answer.error and not answer.devices


def test_an_instance_someone_else_made_is_published_as_occupied_and_never_handed_out(node):
    device = node.first_fit("7g.40gb")
    gpu = node.sim.gpu(attrs(device)[0])
    handle = pynvml.nvmlDeviceGetHandleByUUID(gpu.uuid)
    create_gi(handle, 19, 0, 1)  # a 1g.5gb made behind the plugin's back
    claim = node.claim("whole", device["name"])
    answer = node.prepare(claim).claims[claim["metadata"]["uid"]]
    assert "which is not this claim's" in answer.error
    listed = lambda: [attrs(d) for s in node.slices() for d in s["spec"].get("devices", [])]  # noqa: E731
    wait_for(lambda: (gpu.uuid, "1g.5gb", 0, 1) in listed(), what="the foreign instance listed as occupied")


def test_a_stopped_plugin_leaves_none_of_its_grpc_threads_running(node):
    claim = node.claim("served", node.first_fit("1g.5gb")["name"])
    node.prepare(claim)  # the DRA socket's pool has run a call
    node.stop()
    left = [t.name for t in threading.enumerate() if re.fullmatch(r"dra(-reg)?_\d+", t.name)]
    assert left == [], f"threads of the stopped plugin's gRPC servers still run: {left}"


def test_a_restarted_plugin_adopts_a_prepared_claim_and_unprepare_still_destroys_exactly_it(node):
    claim = node.claim("kept", node.first_fit("3g.20gb")["name"])
    node.prepare(claim)
    before = node.instances()
    node.stop()
    node.start()
    assert node.instances() == before
    assert node.unprepare(claim).claims[claim["metadata"]["uid"]].error == ""
    assert node.instances() == []


def test_a_restarted_plugin_releases_the_instance_of_a_claim_deleted_while_it_was_down(node):
    claim = node.claim("gone", node.first_fit("1g.5gb")["name"])
    node.prepare(claim)
    node.stop()
    node.resource.delete_namespaced_resource_claim("gone", NS)
    node.start()
    assert node.instances() == []


def test_hostile_claim_references_get_their_own_error_and_break_nothing(node):
    with grpc.insecure_channel(f"unix://{node.root / 'plugin' / 'dra.sock'}") as channel:
        stub = rpc.DRAPluginStub(channel)
        claims = [
            pb.Claim(namespace="", uid="u1", name="x"),
            pb.Claim(namespace=NS, uid="u2" * 100, name="x"),
            pb.Claim(namespace=NS, uid="u3", name="../../etc"),
            pb.Claim(namespace=NS, uid="u4", name="not-there"),
        ] + [pb.Claim(namespace=NS, uid=f"n{i}", name=f"c{i}") for i in range(300)]
        answer = stub.NodePrepareResources(pb.NodePrepareResourcesRequest(claims=claims), timeout=60)
    assert "namespace" in answer.claims["u1"].error
    assert "uid" in answer.claims[("u2" * 100)[:64]].error
    assert "DNS subdomain" in answer.claims["u3"].error
    assert "not found" in answer.claims["u4"].error
    assert len(answer.claims) <= 256 + 4
    assert node.instances() == []


def _first_fit_allocation(node: DraNode, profile: str, count: int) -> list[str] | None:
    """What kube-scheduler's structured allocator (sim.dra, checked against upstream's) gives a claim
    for `count` devices of `profile` from the pool as published now, nothing else allocated."""
    from sim.dra.allocator import Allocator, parse_slice

    classes = {DRIVER: {"spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}}
    expr = f'device.attributes["{DRIVER}"].profile == "{profile}"'
    request = {"deviceClassName": DRIVER, "count": count, "selectors": [{"cel": {"expression": expr}}]}
    claim = {
        "metadata": {"name": "c", "namespace": NS},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": request}]}},
    }
    got = Allocator([parse_slice(s) for s in node.slices()], classes, ()).allocate(NODE, [claim])
    return None if got is None else [r["device"] for r in got[0]["devices"]["results"]]


def test_the_allocator_never_hands_out_the_placement_of_an_instance_someone_else_made(node):
    gpu = node.sim.gpus()[0]
    create_gi(pynvml.nvmlDeviceGetHandleByUUID(gpu.uuid), 19, 0, 1)  # a 1g.5gb behind the plugin's back
    node.app.sync()  # type: ignore[union-attr]
    listed = [
        d
        for s in node.slices()
        for d in s["spec"].get("devices", [])
        if attrs(d) == (gpu.uuid, "1g.5gb", 0, 1)
    ]
    assert listed, "the foreign instance is listed, so its slices count as occupied"
    candidates = [
        d["name"]
        for s in node.slices()
        for d in s["spec"].get("devices", [])
        if d["attributes"]["profile"]["string"] == "1g.5gb" and d not in listed
    ]
    # more 1g devices than the steered candidates: first fit goes on into the occupied devices
    got = _first_fit_allocation(node, "1g.5gb", len(candidates) + 1)
    assert got is None or listed[0]["name"] not in got
    # and nothing overlapping it either, while every free placement stays allocatable
    assert _first_fit_allocation(node, "7g.40gb", 2) is None
    assert _first_fit_allocation(node, "7g.40gb", 1) is not None


def test_nvml_failing_mid_call_is_each_claims_own_error_and_a_retry_succeeds(node):
    one = node.claim("one", node.first_fit("1g.5gb")["name"])
    two = node.claim("two", node.first_fit("2g.10gb")["name"])
    # NVML_ERROR_UNKNOWN after each GI is made: the create is rolled back, the GI destroyed
    node.sim.inject_error("nvmlGpuInstanceCreateComputeInstance", 999, times=50)
    answer = node.prepare(one, two).claims
    assert all("NVML" in answer[c["metadata"]["uid"]].error for c in (one, two))
    assert node.instances() == []
    node.sim.clear_faults()
    answer = node.prepare(one, two).claims
    assert [answer[c["metadata"]["uid"]].error for c in (one, two)] == ["", ""]
    node.sim.inject_error("nvmlDeviceGetGpuInstanceById", 999, times=50)
    gone = node.unprepare(one, two).claims
    assert all(gone[c["metadata"]["uid"]].error for c in (one, two))
    assert len(node.instances()) == 2  # NVML could not tell: nothing destroyed
    node.sim.clear_faults()
    gone = node.unprepare(one, two).claims
    assert [gone[c["metadata"]["uid"]].error for c in (one, two)] == ["", ""]
    assert node.instances() == []


def test_a_claim_deleted_while_the_plugin_was_down_is_released_once_the_api_answers_again(node):
    claim = node.claim("late", node.first_fit("1g.5gb")["name"])
    node.prepare(claim)
    node.stop()
    node.resource.delete_namespaced_resource_claim("late", NS)
    node.api.faults.fail_next(100000, verb="get", resource="resourceclaims")
    node.start()
    assert len(node.instances()) == 1  # the API could not say the claim is gone: nothing destroyed
    node.api.faults.clear()
    wait_for(lambda: node.instances() == [], what="the retried adoption to release the instance")


def test_a_gone_claims_busy_instance_is_kept_until_its_processes_end(node):
    claim = node.claim("lingering", node.first_fit("2g.10gb")["name"])
    node.prepare(claim)
    gpu = next(g for g in node.sim.gpus() if g.gpu_instances)
    gi = gpu.gpu_instances[0]
    node.sim.set_busy(gpu.uuid, gi_id=gi.gi_id, ci_id=gi.compute_instances[0].ci_id)
    node.stop()
    node.resource.delete_namespaced_resource_claim("lingering", NS)
    node.start()
    assert len(node.instances()) == 1
    node.sim.clear_busy(gpu.uuid)
    wait_for(lambda: node.instances() == [], what="the instance to go once idle")


def test_a_gpu_the_node_config_filters_out_is_never_published_nor_touched(node, tmp_path):
    import dataclasses

    from plugin.config import DeviceFilter

    node.stop()
    excluded = node.sim.gpus()[1]
    config = dataclasses.replace(node.config(), excluded=DeviceFilter(frozenset({excluded.uuid})))
    node.app = DraPluginApp(config, node.api.api_client("admin")).start()
    parents = {
        d["attributes"]["parentUUID"]["string"] for s in node.slices() for d in s["spec"].get("devices", [])
    }
    assert parents == {node.sim.gpus()[0].uuid}
    claim = node.claim("forbidden", f"gpu-{excluded.index}-mig-1g5gb-19-0")
    assert "not a MIG device of this node" in node.prepare(claim).claims[claim["metadata"]["uid"]].error
    assert node.instances() == []


def test_the_node_config_flag_reads_filterdevices_and_names_the_flag_when_broken(tmp_path):
    from plugin.dra.config import ConfigError, load_config

    policy = tmp_path / "device-config.yaml"
    policy.write_text(
        "nvidia:\n  migProfileAllowlist:\n    - models: [A100-SXM4-40GB]\n      profiles: [1g.5gb]\n"
    )
    good = tmp_path / "node.json"
    good.write_text(
        json.dumps({"nodeconfig": [{"name": NODE, "operatingmode": "mig", "filterdevices": {"index": [1]}}]})
    )
    base = ["--node-name", NODE, "--config-file", str(policy)]
    config = load_config([*base, "--node-config", str(good)], environ={})
    assert config.excluded.excludes("GPU-any", 1) and not config.excluded.excludes("GPU-any", 0)
    assert not load_config(base, environ={}).excluded.excludes("GPU-any", 1)
    bad = tmp_path / "broken.json"
    bad.write_text(json.dumps({"nodeconfig": [{"name": NODE, "filterdevices": "all"}]}))
    with pytest.raises(ConfigError, match=r"--node-config: .*filterdevices"):
        load_config([*base, "--node-config", str(bad)], environ={})


def _claim_with_results(node: DraNode, name: str, results: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A claim allocated `results` as written; None when the API itself refuses such an allocation."""
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "mig", "exactly": {"deviceClassName": DRIVER}}]}},
    }
    created = json.loads(
        node.resource.create_namespaced_resource_claim(NS, body, _preload_content=False).data
    )
    try:
        node.resource.patch_namespaced_resource_claim_status(
            name, NS, {"status": {"allocation": {"devices": {"results": results}}}}
        )
    except client.ApiException as error:
        assert error.status == 422, error
        return None
    return created


def test_hostile_allocations_other_drivers_results_and_too_many_devices(node):
    ours = node.first_fit("1g.5gb")["name"]
    mixed = _claim_with_results(
        node,
        "mixed",
        [
            {"request": "nic", "driver": "net.example.com", "pool": NODE, "device": "gpu-0-mig-7g40gb-0-0"},
            {"request": "mig", "driver": DRIVER, "pool": NODE, "device": ours},
        ],
    )
    answer = node.prepare(mixed).claims[mixed["metadata"]["uid"]]
    assert answer.error == "" and [d.device_name for d in answer.devices] == [ours]
    assert [i[1] for i in node.instances()] == ["1g.5gb"]  # another driver's result is not ours to make
    r = {"request": "mig", "driver": DRIVER, "pool": NODE}
    hostile = {
        "flood": ([{**r, "device": f"gpu-0-mig-1g5gb-19-{i % 7}"} for i in range(33)], "more than 32"),
        "twice": ([{**r, "device": ours}] * 2, "twice"),
        "garbage": ([{**r, "device": 7}], "device"),
        "no-request": ([{"driver": DRIVER, "pool": NODE, "device": ours}], "request"),
    }
    for name, (results, said) in hostile.items():
        claim = _claim_with_results(node, name, results)
        if claim is not None:  # the API let it through: the plugin refuses it, naming the field
            assert said in node.prepare(claim).claims[claim["metadata"]["uid"]].error, name
    assert [i[1] for i in node.instances()] == ["1g.5gb"]
    # none of them stops the pool from following the node: a prepare is still republished
    after = node.claim("after", node.first_fit("1g.5gb")["name"])
    taken = node.prepare(after).claims[after["metadata"]["uid"]].devices[0].device_name
    wait_for(lambda: node.first_fit("1g.5gb")["name"] != taken, what="a republished pool")
