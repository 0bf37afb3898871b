"""kill -9 of `dynmig dra-plugin` while NodePrepareResources is creating the GPU instance (the
simulated NVML at the driver's create latencies, so the create is in flight): after a restart the
claim is either prepared with exactly its device, or, deleted meanwhile, leaves nothing; the journal
ends empty. The plugin runs as its own process (`dynmig dra-plugin` under `sim.nvml.launch`)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from kubernetes import client
from sim.apiserver import ApiServer
from sim.nvml import SimulatedNvml
from sim.nvml.caps import write_mig_minors
from waiting_testkit import wait_for

from plugin.api import dra_v1_pb2 as pb
from plugin.api import dra_v1_pb2_grpc as rpc
from plugin.dra.main import READY_TEXT

NODE = "chaos-dra"
DRIVER = "mig.dynmig.io"
NS = "team"
ROOT = Path(__file__).resolve().parents[3]


class Process:
    def __init__(self, api: ApiServer, state: Path, root: Path):
        self.api, self.state, self.root = api, state, root
        self.child: subprocess.Popen[str] | None = None
        self.log = root / "plugin.log"
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        policy = ROOT / "policies" / "default.yaml"
        argv = [
            sys.executable, "-m", "sim.nvml.launch", "--state", str(self.state), "--",
            "dra-plugin", "--node-name", NODE, "--config-file", str(policy),
            "--registry-dir", str(self.root / "registry"), "--plugin-dir", str(self.root / "plugin"),
            "--cdi-dir", str(self.root / "cdi"), "--state-dir", str(self.root / "state"),
            "--gpu-lock-dir", str(self.root / "gpus"),
            "--mig-minors", str(write_mig_minors(self.root / "mig-minors", 8)),
            "--kubeconfig", str(self.api.kubeconfig()), "--resync-interval", "0.5",
        ]  # fmt: skip
        out = open(self.log, "a")  # noqa: SIM115 - the child writes to it until it dies
        self.child = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        wait_for(
            lambda: self.log.read_text().count(READY_TEXT) >= self.starts,
            what="the plugin to serve",
            timeout=60,
        )

    def kill9(self) -> None:
        assert self.child is not None
        os.killpg(self.child.pid, signal.SIGKILL)
        self.child.wait(10)

    def stop(self) -> None:
        if self.child is not None and self.child.poll() is None:
            os.killpg(self.child.pid, signal.SIGTERM)
            self.child.wait(20)


@pytest.fixture
def world(apiserver: ApiServer) -> Iterator[tuple[ApiServer, SimulatedNvml, Process]]:
    root = Path(tempfile.mkdtemp(prefix="drak-", dir="/tmp"))
    state = root / "nvml.json"
    sim = SimulatedNvml({"node": NODE, "gpus": [{"model": "A100-SXM4-40GB", "count": 1}]}, state_path=state)
    sim.set_timing("driver")  # creating a GI takes its estimated second or so: the kill lands inside it
    admin = apiserver.api_client("admin")
    client.CoreV1Api(admin).create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
    client.CoreV1Api(admin).create_namespace({"metadata": {"name": NS}})
    proc = Process(apiserver, state, root)
    try:
        yield apiserver, sim, proc
    finally:
        proc.stop()
        shutil.rmtree(root, ignore_errors=True)


def _first_device(api: ApiServer, profile: str) -> dict[str, Any]:
    resource = client.ResourceV1Api(api.api_client("admin"))
    for s in json.loads(resource.list_resource_slice(_preload_content=False).data)["items"]:
        for d in s["spec"].get("devices", []):
            if d["attributes"]["profile"]["string"] == profile:
                return d
    raise AssertionError(f"no {profile} listed")


def _claim(api: ApiServer, device: str) -> dict[str, Any]:
    resource = client.ResourceV1Api(api.api_client("admin"))
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "victim"},
        "spec": {"devices": {"requests": [{"name": "mig", "exactly": {"deviceClassName": DRIVER}}]}},
    }
    created = json.loads(resource.create_namespaced_resource_claim(NS, body, _preload_content=False).data)
    results = [{"request": "mig", "driver": DRIVER, "pool": NODE, "device": device}]
    resource.patch_namespaced_resource_claim_status(
        "victim", NS, {"status": {"allocation": {"devices": {"results": results}}}}
    )
    return created


def _call(proc: Process, method: str, claim: dict[str, Any]) -> Any:
    ref = pb.Claim(namespace=NS, uid=claim["metadata"]["uid"], name="victim")
    with grpc.insecure_channel(f"unix://{proc.root / 'plugin' / 'dra.sock'}") as channel:
        stub = rpc.DRAPluginStub(channel)
        if method == "prepare":
            return stub.NodePrepareResources(pb.NodePrepareResourcesRequest(claims=[ref]), timeout=60)
        return stub.NodeUnprepareResources(pb.NodeUnprepareResourcesRequest(claims=[ref]), timeout=60)


def _intent_written(proc: Process) -> bool:
    path = proc.root / "state" / "instances.json"
    try:
        entries = json.loads(path.read_text())["entries"]
    except (OSError, ValueError, KeyError):
        return False
    return any(e.get("gpuInstanceID") is None for e in entries)


def _instances(sim: SimulatedNvml) -> list[tuple[str, int, int]]:
    return sorted(
        (gi.profile, gi.placement.start, gi.placement.size) for g in sim.gpus() for gi in g.gpu_instances
    )


def _journal(proc: Process) -> list[Any]:
    path = proc.root / "state" / "instances.json"
    return json.loads(path.read_text())["entries"] if path.exists() else []


@pytest.mark.timeout(240)
@pytest.mark.parametrize("then", ["retried", "claim deleted"])
def test_kill_9_while_prepare_creates_leaks_nothing_and_a_retry_gets_exactly_the_allocated_device(
    world, then
):
    api, sim, proc = world
    proc.start()
    device = _first_device(api, "3g.20gb")
    claim = _claim(api, device["name"])
    caller = threading.Thread(target=lambda: _safe(lambda: _call(proc, "prepare", claim)), daemon=True)
    caller.start()
    wait_for(lambda: _intent_written(proc), what="the journal's intent (the create is under way)", timeout=30)
    proc.kill9()
    caller.join(30)

    if then == "claim deleted":
        client.ResourceV1Api(api.api_client("admin")).delete_namespaced_resource_claim("victim", NS)
        proc.start()
        assert _instances(sim) == [] and _journal(proc) == []
        return
    proc.start()
    answer = _call(proc, "prepare", claim).claims[claim["metadata"]["uid"]]
    assert answer.error == "" and [d.device_name for d in answer.devices] == [device["name"]]
    a = device["attributes"]
    assert _instances(sim) == [("3g.20gb", a["placementStart"]["int"], a["placementSize"]["int"])]
    assert _call(proc, "unprepare", claim).claims[claim["metadata"]["uid"]].error == ""
    assert _instances(sim) == [] and _journal(proc) == []


def _safe(call: Any) -> None:
    with contextlib.suppress(grpc.RpcError):  # the plugin died under the call, as kubelet sees it
        call()
