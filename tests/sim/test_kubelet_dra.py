"""The simulated kubelet's DRA half: plugin registration through the registry directory, and
NodePrepareResources / NodeUnprepareResources around the containers of pods with ResourceClaims,
driven by a tiny DRA plugin written here over the real gRPC stubs (the kubelet's boundary)."""

from __future__ import annotations

import json
import threading
from concurrent import futures
from pathlib import Path
from types import SimpleNamespace

import grpc
import pynvml
import pytest
from kubernetes import client
from nvml_testkit import A100, create_gi, full_ci, gpu0
from sim.apiserver import ApiServer
from sim.kubelet import SimulatedKubelet, SimulatedPods
from sim.kubelet.dra import DraManager
from sim.kubelet.plugin_watcher import PluginWatcher
from waiting_testkit import wait_for

from plugin.api import dra_v1_pb2, dra_v1_pb2_grpc, dra_v1beta1_pb2, dra_v1beta1_pb2_grpc
from plugin.api import pluginregistration_pb2 as regpb
from plugin.api import pluginregistration_pb2_grpc as regrpc

DRIVER = "gpu.example.com"
NODE = "node-1"
WIRE = {
    "v1.DRAPlugin": (dra_v1_pb2, dra_v1_pb2_grpc),
    "v1beta1.DRAPlugin": (dra_v1beta1_pb2, dra_v1beta1_pb2_grpc),
}


class TinyDraPlugin:
    """A DRA driver's kubelet plugin: a registration socket in the registry, the DRA service on its
    own socket; each claim gets the next free MIG device, published as a CDI spec file."""

    def __init__(
        self, root: Path, migs: list[str], *, services=("v1.DRAPlugin",), type_="DRAPlugin", cdi=None
    ):
        self.root, self.free, self.services, self.type = root, list(migs), list(services), type_
        self.cdi = cdi
        self.registry_socket = root / "plugins_registry" / f"{DRIVER}-reg.sock"
        self.endpoint = root / "plugins" / DRIVER / "dra.sock"
        self.statuses: list[regpb.RegistrationStatus] = []
        self.prepared: dict[str, str] = {}  # claim uid -> MIG UUID
        self.calls: list[tuple[str, str, list[tuple[str, str, str]]]] = []  # (method, service, claims)
        self.fail_prepare = 0  # how many NodePrepareResources calls answer a claim error
        self.fail_unprepare = 0
        self._server: grpc.Server | None = None
        self._lock = threading.Lock()

    def start(self) -> TinyDraPlugin:
        self.endpoint.parent.mkdir(parents=True, exist_ok=True)
        self.registry_socket.parent.mkdir(parents=True, exist_ok=True)
        self._pool = futures.ThreadPoolExecutor(max_workers=4)  # shut down by stop()
        server = grpc.server(self._pool)
        regrpc.add_RegistrationServicer_to_server(_Registration(self), server)
        for service in [s for s in self.services if s in WIRE]:
            WIRE[service][1].add_DRAPluginServicer_to_server(_Dra(self, service), server)
        server.add_insecure_port(f"unix://{self.endpoint}")
        server.add_insecure_port(f"unix://{self.registry_socket}")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=0).wait(5)
            self._pool.shutdown(wait=True, cancel_futures=True)
        self.registry_socket.unlink(missing_ok=True)

    def methods(self, method: str) -> list[list[tuple[str, str, str]]]:
        return [claims for m, _, claims in self.calls if m == method]

    def prepare(self, service: str, request, wire):
        claims = [(c.namespace, c.uid, c.name) for c in request.claims]
        self.calls.append(("NodePrepareResources", service, claims))
        out = {}
        with self._lock:
            for c in request.claims:
                if self.fail_prepare > 0:
                    self.fail_prepare -= 1
                    out[c.uid] = wire.NodePrepareResourceResponse(error="GPU busy")
                    continue
                mig = self.prepared.get(c.uid) or self.free.pop(0)
                self.prepared[c.uid] = mig
                device = wire.Device(
                    request_names=["gpu"],
                    pool_name=NODE,
                    device_name=f"mig-{c.name}",
                    cdi_device_ids=[_cdi_id(c.uid)],
                )
                out[c.uid] = wire.NodePrepareResourceResponse(devices=[device])
                if self.cdi is not None:
                    self._write_spec()
        return wire.NodePrepareResourcesResponse(claims=out)

    def unprepare(self, service: str, request, wire):
        self.calls.append(
            ("NodeUnprepareResources", service, [(c.namespace, c.uid, c.name) for c in request.claims])
        )
        out = {}
        with self._lock:
            for c in request.claims:
                if self.fail_unprepare > 0:
                    self.fail_unprepare -= 1
                    out[c.uid] = wire.NodeUnprepareResourceResponse(error="still busy")
                    continue
                if c.uid in self.prepared:
                    self.free.append(self.prepared.pop(c.uid))
                out[c.uid] = wire.NodeUnprepareResourceResponse()
        return wire.NodeUnprepareResourcesResponse(claims=out)

    def _write_spec(self) -> None:
        devices = [
            {"name": uid, "containerEdits": {"env": [f"NVIDIA_VISIBLE_DEVICES={mig}"]}}
            for uid, mig in self.prepared.items()
        ]
        spec = {"cdiVersion": "0.6.0", "kind": "k8s.gpu.example.com/claim", "devices": devices}
        (self.cdi / "gpu.example.com.json").write_text(json.dumps(spec))


def _cdi_id(claim_uid: str) -> str:
    return f"k8s.gpu.example.com/claim={claim_uid}"


class _Registration(regrpc.RegistrationServicer):
    def __init__(self, plugin: TinyDraPlugin) -> None:
        self.plugin = plugin

    def GetInfo(self, request, context):
        p = self.plugin
        return regpb.PluginInfo(
            type=p.type, name=DRIVER, endpoint=str(p.endpoint), supported_versions=p.services
        )

    def NotifyRegistrationStatus(self, request, context):
        self.plugin.statuses.append(request)
        return regpb.RegistrationStatusResponse()


class _Dra:
    """One DRA service version of the plugin (v1 and v1beta1 carry the same messages)."""

    def __init__(self, plugin: TinyDraPlugin, service: str) -> None:
        self.plugin, self.service, self.wire = plugin, service, WIRE[service][0]

    def NodePrepareResources(self, request, context):
        return self.plugin.prepare(self.service, request, self.wire)

    def NodeUnprepareResources(self, request, context):
        return self.plugin.unprepare(self.service, request, self.wire)


@pytest.fixture
def world(node, socket_dir, tmp_path):
    """Two 1g MIG devices on an A100, an API server, kubelet's plugin watcher and DRA manager over
    `socket_dir`, and its pod side with a CDI spec dir; `plug(**kw)` starts a DRA plugin."""
    nvml = node(A100)
    info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(gpu0(), pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE)
    for start in (0, 1):
        full_ci(create_gi(gpu0(), info.id, start, 1), 1)
    migs = [ci.mig_uuid for gpu in nvml.gpus() for gi in gpu.gpu_instances for ci in gi.compute_instances]
    api = ApiServer(reap_after_grace=False).start()
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    dra = DraManager(api.api_client("kubelet"), state_file=tmp_path / "dra_manager_state")
    watcher = PluginWatcher(socket_dir / "plugins_registry", {"DRAPlugin": dra}, dial_timeout=2).start()
    kubelet = SimulatedKubelet(socket_dir / "device-plugins").start()
    lines: list[str] = []
    pods = SimulatedPods(
        NODE,
        api.api_client("kubelet"),
        kubelet,
        nvml,
        "nvidia.com/gpu",
        echo=lines.append,
        interval=0.05,
        dra=dra,
        cdi_dirs=[cdi],
        dra_retry=0.1,
    ).start()
    plugins: list[TinyDraPlugin] = []

    def plug(**kw) -> TinyDraPlugin:
        plugin = TinyDraPlugin(socket_dir, migs, cdi=cdi, **kw).start()
        plugins.append(plugin)
        return plugin

    yield SimpleNamespace(
        nvml=nvml,
        api=api,
        core=client.CoreV1Api(api.api_client()),
        custom=client.CustomObjectsApi(api.api_client()),
        dra=dra,
        watcher=watcher,
        pods=pods,
        plug=plug,
        migs=migs,
        lines=lines,
    )
    pods.stop()
    for plugin in plugins:
        plugin.stop()
    watcher.stop()
    dra.close()
    kubelet.stop()
    api.stop()


def _registered(world, plugin: TinyDraPlugin) -> None:
    wait_for(lambda: plugin.statuses, what="the plugin to hear from kubelet")


def _claim(world, name: str) -> dict:
    body = {
        "metadata": {"name": name},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "mig.example.com"}}]}
        },
    }
    return world.custom.create_namespaced_custom_object(
        "resource.k8s.io", "v1", "default", "resourceclaims", body
    )


def _allocate(world, name: str, *pods: dict) -> None:
    result = {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": f"mig-{name}"}
    status = {
        "allocation": {"devices": {"results": [result]}},
        "reservedFor": [
            {"resource": "pods", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]} for p in pods
        ],
    }
    world.custom.patch_namespaced_custom_object_status(
        "resource.k8s.io", "v1", "default", "resourceclaims", name, {"status": status}
    )


def _pod(world, name: str, claim: dict) -> dict:
    body = {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 2,
            "resourceClaims": [{"name": "gpu", **claim}],
            "containers": [{"name": "main", "image": "cuda", "resources": {"claims": [{"name": "gpu"}]}}],
        },
    }
    created = world.core.create_namespaced_pod("default", body)
    return {"metadata": {"name": name, "uid": created.metadata.uid}}


def _phase(world, name: str) -> str | None:
    pod = world.api.get("pods", name, "default")
    return None if pod is None else (pod.get("status") or {}).get("phase")


def _events(world, reason: str) -> list[str]:
    found = world.core.list_namespaced_event("default", field_selector=f"reason={reason}").items
    return [e.message for e in found]


def _busy_gpus(world) -> int:
    return sum(len(gpu.processes) for gpu in world.nvml.gpus())


def test_a_dra_plugin_in_the_registry_is_registered_and_told_so(world):
    plugin = world.plug(services=("v1beta1.DRAPlugin", "v1.DRAPlugin"))
    _registered(world, plugin)
    assert plugin.statuses[0].plugin_registered and not plugin.statuses[0].error
    # kubelet takes the first of the plugin's services it speaks (dra_plugin_manager.go)
    assert world.dra.drivers() == {DRIVER: "v1beta1.DRAPlugin"}
    assert world.watcher.registered() == [(DRIVER, str(plugin.endpoint))]


def test_a_plugin_kubelet_cannot_use_is_told_why(world):
    plugin = world.plug(services=("v9.DRAPlugin",))
    _registered(world, plugin)
    assert not plugin.statuses[0].plugin_registered
    assert "plugin validation failed" in plugin.statuses[0].error
    assert 'none of services supported by the plugin (["v9.DRAPlugin"])' in plugin.statuses[0].error
    assert world.dra.drivers() == {}


def test_a_plugin_of_an_unknown_type_is_refused(world):
    plugin = world.plug(type_="CSIPlugin")
    _registered(world, plugin)
    assert not plugin.statuses[0].plugin_registered
    assert "no handler registered for plugin type: CSIPlugin" in plugin.statuses[0].error


def test_removing_the_registration_socket_deregisters_the_driver(world):
    plugin = world.plug()
    _registered(world, plugin)
    plugin.registry_socket.unlink()
    wait_for(lambda: world.dra.drivers() == {}, what="the driver to be deregistered")


def test_a_pod_with_an_allocated_reserved_claim_runs_on_the_mig_device_its_driver_prepared(world):
    plugin = world.plug()
    _registered(world, plugin)
    claim = _claim(world, "c")
    pod = _pod(world, "trainer", {"resourceClaimName": "c"})
    _allocate(world, "c", pod)
    wait_for(lambda: _phase(world, "trainer") == "Running", what="the pod to run")
    assert plugin.methods("NodePrepareResources") == [[("default", claim["metadata"]["uid"], "c")]]
    record = world.pods.pods_by_name("default", "trainer")
    assert record.cdi_devices == {"main": [_cdi_id(claim["metadata"]["uid"])]}
    mig = plugin.prepared[claim["metadata"]["uid"]]
    assert record.env["main"] == mig
    assert f"running on {mig}" in world.pods.logs("default", "trainer")
    assert _busy_gpus(world) == 1


def test_a_pod_waits_until_its_claim_is_allocated_and_reserved_for_it(world):
    plugin = world.plug()
    _registered(world, plugin)
    _claim(world, "c")
    pod = _pod(world, "trainer", {"resourceClaimName": "c"})
    wait_for(lambda: _events(world, "FailedPrepareDynamicResources"), what="kubelet's complaint")
    message = _events(world, "FailedPrepareDynamicResources")[0]
    assert message.startswith("Failed to prepare dynamic resources: prepare dynamic resources: pod trainer")
    assert "is not allowed to use ResourceClaim c" in message
    assert _phase(world, "trainer") == "Pending" and not plugin.calls
    _allocate(world, "c", pod)
    wait_for(lambda: _phase(world, "trainer") == "Running", what="the pod to run once reserved")


def test_deleting_the_pod_unprepares_its_claim_after_its_containers_stopped(world):
    plugin = world.plug()
    _registered(world, plugin)
    claim = _claim(world, "c")
    pod = _pod(world, "trainer", {"resourceClaimName": "c"})
    _allocate(world, "c", pod)
    wait_for(lambda: _phase(world, "trainer") == "Running", what="the pod to run")
    world.core.delete_namespaced_pod("trainer", "default")
    wait_for(lambda: world.api.get("pods", "trainer", "default") is None, what="the pod to be gone")
    assert plugin.methods("NodeUnprepareResources") == [[("default", claim["metadata"]["uid"], "c")]]
    assert _busy_gpus(world) == 0 and plugin.prepared == {}
    assert not world.dra.claims()


def test_a_failing_unprepare_is_retried_and_the_pod_stays_until_it_succeeds(world):
    plugin = world.plug()
    _registered(world, plugin)
    _claim(world, "c")
    pod = _pod(world, "trainer", {"resourceClaimName": "c"})
    _allocate(world, "c", pod)
    wait_for(lambda: _phase(world, "trainer") == "Running", what="the pod to run")
    plugin.fail_unprepare = 2
    world.core.delete_namespaced_pod("trainer", "default")
    wait_for(lambda: world.api.get("pods", "trainer", "default") is None, what="the pod to be gone")
    assert len(plugin.methods("NodeUnprepareResources")) == 3 and plugin.prepared == {}


def test_a_failing_prepare_is_retried_with_an_event_on_the_pod(world):
    plugin = world.plug()
    _registered(world, plugin)
    _claim(world, "c")
    plugin.fail_prepare = 1
    pod = _pod(world, "trainer", {"resourceClaimName": "c"})
    _allocate(world, "c", pod)
    wait_for(lambda: _phase(world, "trainer") == "Running", what="the pod to run after a retry")
    assert len(plugin.methods("NodePrepareResources")) == 2
    assert any(
        "NodePrepareResources failed for ResourceClaim c: GPU busy" in m
        for m in _events(world, "FailedPrepareDynamicResources")
    )


def test_a_claim_shared_by_two_pods_is_prepared_once_and_unprepared_with_the_last(world):
    plugin = world.plug()
    _registered(world, plugin)
    _claim(world, "shared")
    first = _pod(world, "a", {"resourceClaimName": "shared"})
    second = _pod(world, "b", {"resourceClaimName": "shared"})
    _allocate(world, "shared", first, second)
    wait_for(lambda: _phase(world, "a") == _phase(world, "b") == "Running", what="both pods to run")
    assert len(plugin.methods("NodePrepareResources")) == 1
    world.core.delete_namespaced_pod("a", "default")
    wait_for(lambda: world.api.get("pods", "a", "default") is None, what="the first pod to be gone")
    assert plugin.methods("NodeUnprepareResources") == []
    world.core.delete_namespaced_pod("b", "default")
    wait_for(lambda: plugin.methods("NodeUnprepareResources"), what="the claim to be unprepared")


def test_a_template_claim_is_found_through_the_pods_status_and_must_belong_to_the_pod(world):
    plugin = world.plug(services=("v1beta1.DRAPlugin",))
    _registered(world, plugin)
    claim = _claim(world, "trainer-gpu-x7")
    pod = _pod(world, "trainer", {"resourceClaimTemplateName": "one-mig"})
    world.core.patch_namespaced_pod_status(
        "trainer",
        "default",
        {"status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "trainer-gpu-x7"}]}},
    )
    _allocate(world, "trainer-gpu-x7", pod)
    # kubelet may first see the pod before its status names the claim ("ResourceClaim not created
    # yet"), then retries: the ownership complaint is the one that must come
    said = "was not created for pod default/trainer (pod is not owner)"
    wait_for(
        lambda: any(said in e for e in _events(world, "FailedPrepareDynamicResources")),
        what="the ownership complaint",
    )
    owner = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "trainer",
        "uid": pod["metadata"]["uid"],
        "controller": True,
    }
    world.custom.patch_namespaced_custom_object(
        "resource.k8s.io",
        "v1",
        "default",
        "resourceclaims",
        "trainer-gpu-x7",
        {"metadata": {"ownerReferences": [owner]}},
    )
    wait_for(lambda: _phase(world, "trainer") == "Running", what="the pod to run")
    assert plugin.calls[0][:2] == ("NodePrepareResources", "v1beta1.DRAPlugin")
    assert plugin.calls[0][2] == [("default", claim["metadata"]["uid"], "trainer-gpu-x7")]


def test_a_pod_claim_naming_neither_a_claim_nor_a_template_fails_clearly(world):
    plugin = world.plug()
    _registered(world, plugin)
    _pod(world, "odd", {})
    wait_for(lambda: _events(world, "FailedPrepareDynamicResources"), what="kubelet's complaint")
    assert 'spec.resourceClaim "gpu": unsupported API' in _events(world, "FailedPrepareDynamicResources")[0]
    assert _phase(world, "odd") == "Pending" and not plugin.calls


def test_a_claim_of_an_unregistered_driver_keeps_the_pod_waiting(world):
    _claim(world, "c")
    pod = _pod(world, "trainer", {"resourceClaimName": "c"})
    _allocate(world, "c", pod)
    wait_for(lambda: _events(world, "FailedPrepareDynamicResources"), what="kubelet's complaint")
    assert f"DRA driver {DRIVER} is not registered" in _events(world, "FailedPrepareDynamicResources")[0]
    plugin = world.plug()
    wait_for(lambda: _phase(world, "trainer") == "Running", what="the pod to run once the driver is there")
    assert plugin.methods("NodePrepareResources")


def test_a_cdi_device_no_spec_names_keeps_the_container_from_starting(world):
    plugin = world.plug()
    plugin.cdi = None  # the driver writes no CDI spec
    _registered(world, plugin)
    _claim(world, "c")
    pod = _pod(world, "trainer", {"resourceClaimName": "c"})
    _allocate(world, "c", pod)
    wait_for(lambda: _events(world, "Failed"), what="the runtime's complaint")
    assert (
        "CDI device injection failed: unresolvable CDI devices k8s.gpu.example.com/claim="
        in _events(world, "Failed")[0]
    )
    assert _phase(world, "trainer") == "Pending" and _busy_gpus(world) == 0


def test_the_claim_cache_is_checkpointed_so_a_restarted_kubelet_still_unprepares(world, tmp_path):
    plugin = world.plug()
    _registered(world, plugin)
    claim = _claim(world, "c")
    pod = _pod(world, "trainer", {"resourceClaimName": "c"})
    _allocate(world, "c", pod)
    wait_for(lambda: _phase(world, "trainer") == "Running", what="the pod to run")
    restarted = DraManager(world.api.api_client("kubelet"), state_file=tmp_path / "dra_manager_state")
    (info,) = restarted.claims()
    assert (info.name, info.uid, info.pods, info.prepared) == (
        "c",
        claim["metadata"]["uid"],
        [pod["metadata"]["uid"]],
        True,
    )
    assert restarted.might_need_unprepare(pod["metadata"]["uid"])
    restarted.register_plugin(DRIVER, str(plugin.endpoint), ["v1.DRAPlugin"])
    restarted.unprepare({"metadata": {"uid": pod["metadata"]["uid"], "namespace": "default"}, "spec": {}})
    assert plugin.methods("NodeUnprepareResources") == [[("default", claim["metadata"]["uid"], "c")]]
    restarted.close()


def test_a_plugin_answering_for_claims_it_was_not_asked_about_fails_the_prepare(world):
    plugin = world.plug()
    _registered(world, plugin)
    _claim(world, "c")
    real = plugin.prepare

    def confused(service, request, wire):
        real(service, request, wire)  # the claim was prepared; the answer names another
        return wire.NodePrepareResourcesResponse(claims={"not-a-claim": wire.NodePrepareResourceResponse()})

    plugin.prepare = confused
    pod = _pod(world, "trainer", {"resourceClaimName": "c"})
    _allocate(world, "c", pod)
    # kubelet may first complain that the claim does not reserve the pod yet (it saw the pod before
    # the allocation), then retries: the confused answer's complaint is the one that must come
    said = "NodePrepareResources returned result for unknown claim UID not-a-claim"
    wait_for(
        lambda: any(said in e for e in _events(world, "FailedPrepareDynamicResources")), what="the complaint"
    )
    assert _phase(world, "trainer") == "Pending"
    plugin.prepare = real
    wait_for(lambda: _phase(world, "trainer") == "Running", what="the pod to run once the plugin answers")


def test_a_pod_deleted_while_its_prepare_fails_is_unprepared_before_it_goes(world):
    plugin = world.plug()
    _registered(world, plugin)
    claim = _claim(world, "c")
    plugin.fail_prepare = 1000
    pod = _pod(world, "trainer", {"resourceClaimName": "c"})
    _allocate(world, "c", pod)
    wait_for(lambda: plugin.methods("NodePrepareResources"), what="a prepare attempt")
    world.core.delete_namespaced_pod("trainer", "default")
    wait_for(lambda: world.api.get("pods", "trainer", "default") is None, what="the pod to be gone")
    # kubelet had referenced the pod in the claim's cache entry: the driver hears it may let go
    assert plugin.methods("NodeUnprepareResources")[-1] == [("default", claim["metadata"]["uid"], "c")]
    assert not world.dra.claims() and _busy_gpus(world) == 0
