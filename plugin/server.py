"""The kubelet side: the v1beta1 DevicePlugin gRPC service on a unix socket, and registration.

The server serves before it registers (kubelet dials back inside Register). A watcher notices when
kubelet restarts (kubelet.sock recreated, or our socket deleted) and serves again and re-registers,
within a fraction of a second. No RPC can crash the process: every error becomes a gRPC status.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path

import grpc

from plugin.allocate import AllocateError, Allocator, ContainerAnswer, preferred
from plugin.api import HEALTHY, VERSION
from plugin.api import deviceplugin_pb2 as pb
from plugin.api import deviceplugin_pb2_grpc as rpc
from plugin.config import PluginConfig
from plugin.discovery import Inventory

log = logging.getLogger("dynmig.plugin.server")

WATCH_PERIOD_S = 0.2
REGISTER_TIMEOUT_S = 10.0


def replica_ids(inventory: Inventory) -> list[tuple[str, int]]:
    """(`<GPU-UUID>-<i>`, NUMA node) for each managed GPU, as many as its largest instance count."""
    return [(f"{g.uuid}-{i}", g.device.numa) for g in inventory.managed for i in range(g.count)]


def to_response(found: ContainerAnswer) -> pb.ContainerAllocateResponse:
    return pb.ContainerAllocateResponse(
        envs=found.envs,
        annotations=found.annotations,
        cdi_devices=[pb.CDIDevice(name=name) for name in found.cdi_devices],
    )


class DevicePluginService(rpc.DevicePluginServicer):
    def __init__(self, allocator: Allocator, inventory: Callable[[], Inventory]):
        self.allocator = allocator
        self.inventory = inventory
        self._changed = threading.Condition()
        self._version = 0
        self.stopping = threading.Event()
        # why this plugin leaves the node's GPUs alone now (plugin/neighbours.py); None: it serves them
        self.refusal: Callable[[], str | None] = lambda: None

    def devices_changed(self) -> None:
        with self._changed:
            self._version += 1
            self._changed.notify_all()

    def _device_list(self) -> pb.ListAndWatchResponse:
        return pb.ListAndWatchResponse(
            devices=[
                pb.Device(ID=device_id, health=HEALTHY) for device_id, _ in replica_ids(self.inventory())
            ]
        )

    def GetDevicePluginOptions(
        self, request: pb.Empty, context: grpc.ServicerContext
    ) -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    def ListAndWatch(
        self, request: pb.Empty, context: grpc.ServicerContext
    ) -> Iterator[pb.ListAndWatchResponse]:
        seen = -1
        while not self.stopping.is_set() and context.is_active():
            with self._changed:
                if seen == self._version:
                    self._changed.wait(timeout=0.5)
                    if seen == self._version:
                        continue
                seen = self._version
            yield self._device_list()

    def GetPreferredAllocation(
        self, request: pb.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> pb.PreferredAllocationResponse:
        reserved = self.allocator.reserved_gpus()
        return pb.PreferredAllocationResponse(
            container_responses=[
                pb.ContainerPreferredAllocationResponse(
                    deviceIDs=preferred(
                        list(r.available_deviceIDs),
                        list(r.must_include_deviceIDs),
                        r.allocation_size,
                        reserved,
                    )
                )
                for r in request.container_requests
            ]
        )

    def Allocate(self, request: pb.AllocateRequest, context: grpc.ServicerContext) -> pb.AllocateResponse:
        responses = []
        refused = self.refusal()
        if refused:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"dynmig: neighbour: {refused}")
        for container in request.container_requests:
            try:
                responses.append(to_response(self.allocator.allocate(list(container.devices_ids))))
            except AllocateError as error:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"dynmig: {error.reason}: {error}")
            except Exception as error:
                log.exception("Allocate failed unexpectedly")
                context.abort(grpc.StatusCode.INTERNAL, f"dynmig: internal error: {error}")
        return pb.AllocateResponse(container_responses=responses)

    def PreStartContainer(
        self, request: pb.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_ctime_ns)


class PluginServer:
    """Serves the DevicePlugin service on `<kubelet_dir>/<socket_name>` and keeps it registered."""

    def __init__(self, service: DevicePluginService, config: PluginConfig):
        self.service = service
        self.config = config  # the socket paths and the resource name are the config's
        self.registrations = 0
        self._server: grpc.Server | None = None
        self._kubelet_seen: tuple[int, int] | None = None
        self._registered = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.may_register: Callable[[], bool] = lambda: True  # False while a neighbour serves the name

    @property
    def socket_path(self) -> Path:
        return self.config.socket_path

    @property
    def registered(self) -> bool:
        """kubelet accepted our registration and has not restarted since."""
        return self._registered

    @property
    def kubelet_socket(self) -> Path:
        return self.config.kubelet_socket

    def start(self) -> PluginServer:
        self._serve()
        self._try_register()
        self._thread = threading.Thread(target=self._watch, name="dynmig-kubelet-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.service.stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._shutdown_server()

    def _serve(self) -> None:
        self.config.kubelet_dir.mkdir(parents=True, exist_ok=True)
        # grpc's server.stop() leaves its thread pool running: _shutdown_server shuts it down itself
        self._pool = futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="dynmig-dp")
        server = grpc.server(self._pool)
        rpc.add_DevicePluginServicer_to_server(self.service, server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        server.start()
        self._server = server
        log.info("serving the device plugin on %s", self.socket_path)

    def _shutdown_server(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.stop(grace=0.5).wait(5)
            self._pool.shutdown(wait=True, cancel_futures=True)

    def lost(self) -> None:
        """kubelet no longer counts on us (another plugin took the resource name): not registered
        and not ready, and the watch registers again once `may_register` allows it."""
        self._registered = False

    def _try_register(self) -> bool:
        """Register with kubelet (it dials back before answering); False when it is not there yet
        or may not be (a neighbour serves the resource name)."""
        if not self.may_register():
            return False
        seen = _identity(self.kubelet_socket)
        if seen is None:
            return False
        request = pb.RegisterRequest(
            version=VERSION,
            endpoint=self.config.socket_name,
            resource_name=self.config.resource_name,
            options=pb.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True),
        )
        try:
            with grpc.insecure_channel(f"unix://{self.kubelet_socket}") as channel:
                rpc.RegistrationStub(channel).Register(request, timeout=REGISTER_TIMEOUT_S)
        except grpc.RpcError as error:
            log.warning("registration with kubelet failed: %s", error)
            return False
        self._kubelet_seen = seen
        self._registered = True
        self.registrations += 1
        log.info("registered %s with kubelet (%d)", self.config.resource_name, self.registrations)
        return True

    def _watch(self) -> None:
        while not self._stop.wait(WATCH_PERIOD_S):
            kubelet = _identity(self.kubelet_socket)
            ours = _identity(self.socket_path)
            if kubelet is None:
                continue
            moved = self._kubelet_seen is not None and kubelet != self._kubelet_seen
            if ours is None or moved:
                log.info("kubelet restarted (kubelet.sock recreated or our socket removed): serving again")
                self._registered = False
                self._shutdown_server()
                self.service.stopping.clear()
                self._serve()
                self._try_register()
            elif not self._registered:
                self._try_register()
