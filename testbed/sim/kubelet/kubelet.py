"""`SimulatedKubelet`: the device-plugin half of kubelet, on unix sockets in a directory.

kubelet = SimulatedKubelet(plugin_dir).start()      # serves Registration on kubelet.sock
...  plugin registers ...
kubelet.wait_for_devices("nvidia.com/gpu", healthy=4)
result = kubelet.allocate("nvidia.com/gpu", [1, 2], pod_uid="pod-a")   # one Allocate per container
kubelet.restart()                                   # sockets deleted, kubelet.sock recreated
kubelet.stop()
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

import grpc

from plugin.api import HEALTHY, KUBELET_SOCKET_NAME, UNHEALTHY
from plugin.api import deviceplugin_pb2 as pb
from plugin.api import deviceplugin_pb2_grpc as rpc
from plugin.api import podresources_pb2 as prpb
from plugin.api import podresources_pb2_grpc as prrpc
from sim.kubelet.endpoint import DIAL_TIMEOUT_S, PluginEndpoint
from sim.kubelet.names import resource_name_error, version_error

MAX_UNIX_PATH = 107
# kubelet serves PodResources at /var/lib/kubelet/pod-resources/kubelet.sock, beside device-plugins/;
# the lab gives each node its own device-plugin dir, so here it is inside it (the plugin's
# `--pod-resources-socket pod-resources/kubelet.sock`, relative to its --kubelet-dir)
POD_RESOURCES_SOCKET = "pod-resources/kubelet.sock"
RPC_TIMEOUT_S = 30.0  # kubelet sets none on Allocate; a bound keeps a broken test from hanging


@dataclass(frozen=True)
class Options:
    pre_start_required: bool
    get_preferred_allocation_available: bool


@dataclass(frozen=True)
class ResourceView:
    """What kubelet knows about one extended resource right now."""

    name: str
    endpoint: str
    connected: bool  # the ListAndWatch stream is open
    registrations: int  # successful Register calls for this resource so far
    options: Options
    devices: dict[str, str]  # device ID -> "Healthy" / "Unhealthy"
    numa: dict[str, tuple[int, ...]] = field(default_factory=dict)
    updates: int = 0  # ListAndWatch messages received

    @property
    def healthy(self) -> int:
        return sum(1 for h in self.devices.values() if h == HEALTHY)

    @property
    def unhealthy(self) -> int:
        return len(self.devices) - self.healthy

    capacity = property(lambda self: len(self.devices))
    allocatable = property(lambda self: self.healthy)

    def healthy_ids(self) -> list[str]:
        return sorted(d for d, h in self.devices.items() if h == HEALTHY)


@dataclass(frozen=True)
class RegisterRecord:
    version: str
    endpoint: str
    resource_name: str
    error: str | None


@dataclass
class ContainerAllocation:
    name: str
    requested: int
    preferred: list[str] | None = None  # GetPreferredAllocation's answer, if asked
    devices: list[str] = field(default_factory=list)
    response: pb.ContainerAllocateResponse | None = None
    pre_started: bool = False
    allocate_seconds: float | None = None  # how long the plugin's Allocate took (None: not called)
    started_at: float = 0.0  # time.monotonic() when kubelet called Allocate


@dataclass
class PodAllocation:
    pod_uid: str
    resource: str
    containers: list[ContainerAllocation] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def devices(self) -> list[str]:
        return [d for c in self.containers for d in c.devices]


@dataclass
class _Resource:
    name: str
    endpoint: PluginEndpoint
    registrations: int = 1
    connected: bool = True
    devices: dict[str, str] = field(default_factory=dict)
    numa: dict[str, tuple[int, ...]] = field(default_factory=dict)
    updates: int = 0


class SimulatedKubelet:
    def __init__(self, plugin_dir: str | Path, *, dial_timeout: float = DIAL_TIMEOUT_S) -> None:
        """dial_timeout: how long Register waits to reach the plugin's socket (kubelet: 10 s)."""
        self.plugin_dir = Path(plugin_dir)
        self.dial_timeout = dial_timeout
        self.socket_path = self.plugin_dir / KUBELET_SOCKET_NAME
        if len(str(self.socket_path)) > MAX_UNIX_PATH:
            raise ValueError(
                f"device-plugin dir {self.plugin_dir} is too long for a unix socket path; use a shorter one"
            )
        self.register_log: list[RegisterRecord] = []
        self.allocations: list[PodAllocation] = []
        self._resources: dict[str, _Resource] = {}
        self._in_use: dict[str, set[str]] = {}  # pod uid -> device IDs (all resources)
        self._cond = threading.Condition()
        self._admitting = threading.Lock()  # kubelet admits one pod at a time
        # kubelet's pod manager as PodResources List shows it: uid -> (namespace, name, container ->
        # device IDs). A pod is added just before its admission, as HandlePodAdditions adds each pod
        # to the pod manager before canAdmitPod; a container's devices appear once its Allocate has
        # returned (the device manager inserts podDevices after the plugin's Allocate answers); the
        # pod stays until it is gone from the API (`forget`), as a rejected or ended pod stays.
        self._pod_manager: dict[str, tuple[str, str, dict[str, list[str]]]] = {}
        self.pod_resources_path = self.plugin_dir / POD_RESOURCES_SOCKET
        self._server: grpc.Server | None = None
        self.restarts = 0

    # ---- lifecycle ------------------------------------------------------------------------------

    def start(self) -> SimulatedKubelet:
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        # grpc's server.stop() leaves its thread pool running: stop() shuts it down as well
        self._pool = futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="sim-kubelet")
        server = grpc.server(self._pool)
        rpc.add_RegistrationServicer_to_server(_Registration(self), server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        if len(str(self.pod_resources_path)) <= MAX_UNIX_PATH:
            self.pod_resources_path.parent.mkdir(parents=True, exist_ok=True)
            self.pod_resources_path.unlink(missing_ok=True)
            prrpc.add_PodResourcesListerServicer_to_server(_PodResources(self), server)
            server.add_insecure_port(f"unix://{self.pod_resources_path}")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=1).wait(5)
            self._server = None
            self._pool.shutdown(wait=True, cancel_futures=True)
        with self._cond:
            endpoints = [r.endpoint for r in self._resources.values()]
        for endpoint in endpoints:
            endpoint.close()

    def restart(self) -> None:
        """As a kubelet restart: connections drop, socket files in the directory are deleted
        (directories and other files stay), resources keep their names with no devices until
        their plugins register again, and a fresh kubelet.sock appears."""
        self.stop()
        for path in self.plugin_dir.iterdir():
            if path.is_socket():
                path.unlink(missing_ok=True)
        with self._cond:
            for resource in self._resources.values():
                resource.devices.clear()
                resource.numa.clear()
                resource.connected = False
            self.restarts += 1
            self._cond.notify_all()
        self.start()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- registration (called by the gRPC servicer) ---------------------------------------------

    def _register(self, request: pb.RegisterRequest) -> str | None:
        error = version_error(request.version) or resource_name_error(request.resource_name)
        if error is None and ("/" in request.endpoint or not request.endpoint):
            error = f"endpoint {request.endpoint!r} must be a socket file name in {self.plugin_dir}"
        endpoint = None
        if error is None:
            endpoint = PluginEndpoint(
                request.resource_name,
                self.plugin_dir / request.endpoint,
                self._devices_changed,
                self._stream_closed,
                self.dial_timeout,
            )
            try:
                endpoint.dial()
            except (grpc.RpcError, grpc.FutureTimeoutError) as failure:
                endpoint.close()
                error = f"failed to dial device plugin at {request.endpoint}: {_describe(failure)}"
        record = RegisterRecord(request.version, request.endpoint, request.resource_name, error)
        if error is not None:
            with self._cond:
                self.register_log.append(record)
                self._cond.notify_all()
            return error
        self._adopt_endpoint(request.resource_name, endpoint, record)
        return None

    def _adopt_endpoint(self, name: str, endpoint: PluginEndpoint, record: RegisterRecord) -> None:
        with self._cond:
            old = self._resources.get(name)
            count = old.registrations + 1 if old else 1
            self._resources[name] = _Resource(name, endpoint, registrations=count)
            self.register_log.append(record)
            self._cond.notify_all()
        if old is not None:
            old.endpoint.close()  # a new registration replaces the endpoint
        endpoint.start_watch()

    def _devices_changed(self, endpoint: PluginEndpoint, devices: list) -> None:
        with self._cond:
            resource = self._resources.get(endpoint.resource)
            if resource is None or resource.endpoint is not endpoint:
                return
            # Each message is the complete list: devices missing from it disappear.
            resource.devices = {d.ID: d.health for d in devices}
            resource.numa = {d.ID: tuple(n.ID for n in d.topology.nodes) for d in devices}
            resource.connected = True
            resource.updates += 1
            self._cond.notify_all()

    def _stream_closed(self, endpoint: PluginEndpoint, reason: str) -> None:
        with self._cond:
            resource = self._resources.get(endpoint.resource)
            if resource is None or resource.endpoint is not endpoint:
                return
            # kubelet marks every device of a disconnected plugin unhealthy (allocatable 0).
            resource.devices = dict.fromkeys(resource.devices, UNHEALTHY)
            resource.connected = False
            self._cond.notify_all()

    # ---- observing ------------------------------------------------------------------------------

    def resource(self, name: str) -> ResourceView | None:
        with self._cond:
            return self._view(name)

    def _view(self, name: str) -> ResourceView | None:
        r = self._resources.get(name)
        if r is None:
            return None
        opts = Options(
            r.endpoint.options.pre_start_required, r.endpoint.options.get_preferred_allocation_available
        )
        return ResourceView(
            name,
            r.endpoint.socket_path.name,
            r.connected,
            r.registrations,
            opts,
            dict(r.devices),
            dict(r.numa),
            r.updates,
        )

    def wait_for(
        self, condition: Callable[[SimulatedKubelet], bool], timeout: float = 30.0, what: str = ""
    ) -> None:
        """Block until `condition(kubelet)` holds; TimeoutError says what was awaited and what is."""
        with self._cond:
            if not self._cond.wait_for(lambda: condition(self), timeout=timeout):
                seen = {n: self._view(n) for n in self._resources}
                raise TimeoutError(
                    f"kubelet: timed out after {timeout}s waiting for {what or condition}; "
                    f"resources now: {seen}; registrations: {self.register_log}"
                )

    def wait_for_resource(
        self, name: str, predicate: Callable[[ResourceView], bool], timeout: float = 30.0, what: str = ""
    ) -> ResourceView:
        def check(k: SimulatedKubelet) -> bool:
            view = k._view(name)
            return view is not None and predicate(view)

        self.wait_for(check, timeout, what or f"{name} to satisfy {predicate}")
        return self.resource(name)

    def wait_for_devices(
        self, name: str, healthy: int, unhealthy: int | None = None, timeout: float = 30.0
    ) -> ResourceView:
        return self.wait_for_resource(
            name,
            lambda v: (
                v.connected and v.healthy == healthy and (unhealthy is None or v.unhealthy == unhealthy)
            ),
            timeout,
            f"{name} with {healthy} healthy" + ("" if unhealthy is None else f", {unhealthy} unhealthy"),
        )

    def wait_for_registration(self, name: str, count: int = 1, timeout: float = 30.0) -> ResourceView:
        return self.wait_for_resource(
            name,
            lambda v: v.registrations >= count and v.connected,
            timeout,
            f"{name} registered {count} time(s)",
        )

    # ---- allocation -----------------------------------------------------------------------------

    def allocate(
        self,
        resource: str,
        containers: Iterable[int] | Iterable[tuple[str, int]] | dict[str, int],
        pod_uid: str = "pod",
        pod_ref: tuple[str, str] | None = None,
    ) -> PodAllocation:
        """Admit a pod as kubelet does: per container that requests `resource`, choose healthy free
        devices (GetPreferredAllocation first when offered), call Allocate once, then
        PreStartContainer when the plugin asks for it. Failures are recorded, never raised. One pod
        at a time: kubelet admits pods in turn in its sync loop, and a second caller waits here."""
        with self._admitting:
            if pod_ref is not None:
                with self._cond:
                    self._pod_manager.setdefault(pod_uid, (pod_ref[0], pod_ref[1], {}))
            return self._admit(resource, containers, pod_uid)

    def take_in(self, pod_uid: str, namespace: str, name: str) -> None:
        """kubelet added the pod to its pod manager and rejected it before the device manager's
        Allocate (another admit handler said no): PodResources lists it, with no devices."""
        with self._cond:
            self._pod_manager.setdefault(pod_uid, (namespace, name, {}))

    def forget(self, pod_uid: str) -> None:
        """The pod is gone from the API: kubelet's pod manager drops it (PodResources no longer lists it)."""
        with self._cond:
            self._pod_manager.pop(pod_uid, None)

    def allocatable_devices(self) -> dict[str, list[str]]:
        """Resource name -> every device ID its current plugin listed (PodResources' allocatable)."""
        with self._cond:
            return {name: sorted(r.devices) for name, r in self._resources.items()}

    def pod_resources(self) -> list[tuple[str, str, dict[str, list[str]]]]:
        """What PodResources List answers now: (namespace, name, container -> device IDs) per pod."""
        with self._cond:
            return [
                (ns, name, {c: list(d) for c, d in devs.items()})
                for ns, name, devs in self._pod_manager.values()
            ]

    def _admit(
        self,
        resource: str,
        containers: Iterable[int] | Iterable[tuple[str, int]] | dict[str, int],
        pod_uid: str,
    ) -> PodAllocation:
        result = PodAllocation(pod_uid, resource)
        self.allocations.append(result)
        with self._cond:
            endpoint = self._resources[resource].endpoint if resource in self._resources else None
        if endpoint is None:
            result.error = f"resource {resource} is not registered"
            return result
        try:
            for name, count in _containers(containers):
                if count > 0:
                    result.containers.append(
                        self._allocate_container(endpoint, resource, pod_uid, name, count)
                    )
        except _AdmissionError as failure:
            result.error = str(failure)
            self.release(pod_uid)
        return result

    def release(self, pod_uid: str) -> None:
        """The pod is gone: its devices are free for the next pod."""
        with self._cond:
            self._in_use.pop(pod_uid, None)

    def _allocate_container(
        self, endpoint: PluginEndpoint, resource: str, pod_uid: str, name: str, count: int
    ) -> ContainerAllocation:
        entry = ContainerAllocation(name, count)
        available = self._free_healthy(resource)
        if count > len(available):
            raise _AdmissionError(
                f"requested number of devices unavailable for {resource}. "
                f"Requested: {count}, Available: {len(available)}"
            )
        chosen: list[str] = []
        if endpoint.options.get_preferred_allocation_available:
            request = pb.PreferredAllocationRequest(
                container_requests=[
                    pb.ContainerPreferredAllocationRequest(
                        available_deviceIDs=available, must_include_deviceIDs=[], allocation_size=count
                    )
                ]
            )
            response = _call(endpoint.stub.GetPreferredAllocation, request, "GetPreferredAllocation")
            entry.preferred = (
                list(response.container_responses[0].deviceIDs) if response.container_responses else []
            )
            chosen = [d for d in entry.preferred if d in available][:count]
        chosen += [d for d in available if d not in chosen][: count - len(chosen)]
        entry.devices = chosen
        with self._cond:
            self._in_use.setdefault(pod_uid, set()).update(chosen)
        request = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=chosen)])
        entry.started_at = time.monotonic()
        try:
            response = _call(endpoint.stub.Allocate, request, "Allocate")
        finally:
            entry.allocate_seconds = time.monotonic() - entry.started_at
        if not response.container_responses:
            raise _AdmissionError("Allocate returned no container responses")
        entry.response = response.container_responses[0]
        with self._cond:
            known = self._pod_manager.get(pod_uid)
            if known is not None:
                known[2].setdefault(name, []).extend(chosen)
        if endpoint.options.pre_start_required:
            _call(
                endpoint.stub.PreStartContainer,
                pb.PreStartContainerRequest(devices_ids=chosen),
                "PreStartContainer",
            )
            entry.pre_started = True
        return entry

    def _free_healthy(self, resource: str) -> list[str]:
        with self._cond:
            view = self._view(resource)
            used = set().union(*self._in_use.values()) if self._in_use else set()
            return [d for d in (view.healthy_ids() if view else []) if d not in used]


class _AdmissionError(Exception):
    pass


class _Registration(rpc.RegistrationServicer):
    def __init__(self, kubelet: SimulatedKubelet) -> None:
        self._kubelet = kubelet

    def Register(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.Empty:
        error = self._kubelet._register(request)
        if error is not None:
            context.abort(grpc.StatusCode.UNKNOWN, error)
        return pb.Empty()


class _PodResources(prrpc.PodResourcesListerServicer):
    """kubelet's PodResources v1 (pkg/kubelet/apis/podresources/server_v1.go). List: every pod of the
    pod manager with, per container, the devices the device manager recorded for it.
    GetAllocatableResources: every device of each resource's current plugin, healthy or not (the
    device manager's `GetAllocatableDevices`, its `allDevices`, which a new registration's
    ListAndWatch replaces), one ContainerDevices per device as `containerDevicesFromResourceDeviceInstances`
    writes them."""

    def __init__(self, kubelet: SimulatedKubelet) -> None:
        self.kubelet = kubelet

    def List(
        self, request: prpb.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> prpb.ListPodResourcesResponse:
        out = []
        for namespace, name, devices in self.kubelet.pod_resources():
            containers = [
                prpb.ContainerResources(
                    name=c, devices=[prpb.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=ids)]
                )
                for c, ids in devices.items()
            ]
            out.append(prpb.PodResources(name=name, namespace=namespace, containers=containers))
        return prpb.ListPodResourcesResponse(pod_resources=out)

    def GetAllocatableResources(
        self, request: prpb.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> prpb.AllocatableResourcesResponse:
        devices = [
            prpb.ContainerDevices(resource_name=name, device_ids=[device])
            for name, ids in self.kubelet.allocatable_devices().items()
            for device in ids
        ]
        return prpb.AllocatableResourcesResponse(devices=devices)


def _call(method: Callable, request: object, name: str) -> object:
    try:
        return method(request, timeout=RPC_TIMEOUT_S)
    except grpc.RpcError as error:
        raise _AdmissionError(f"{name} failed: {_describe(error)}") from None


def _describe(error: BaseException) -> str:
    if isinstance(error, grpc.RpcError) and hasattr(error, "code"):
        return f"{error.code().name}: {error.details()}"
    return type(error).__name__


def _containers(spec: Iterable[int] | Iterable[tuple[str, int]] | dict[str, int]) -> list[tuple[str, int]]:
    items = list(spec.items()) if isinstance(spec, dict) else list(spec)
    return [
        (f"c{i}", item) if isinstance(item, int) else (str(item[0]), int(item[1]))
        for i, item in enumerate(items)
    ]
