"""A tiny device plugin, written against the generated stubs, to drive the simulated kubelet."""

from __future__ import annotations

import os
import threading
from concurrent import futures
from pathlib import Path

import grpc

from plugin.api import HEALTHY, KUBELET_SOCKET_NAME, VERSION
from plugin.api import deviceplugin_pb2 as pb
from plugin.api import deviceplugin_pb2_grpc as rpc


class TinyPlugin(rpc.DevicePluginServicer):
    """Serves a fixed device list (`ids`, else dev-0 ... dev-N); prefers devices from the end of the
    list; answers Allocate with NVIDIA_VISIBLE_DEVICES; re-registers when kubelet.sock is recreated (as HAMi does)."""

    def __init__(
        self,
        directory: Path,
        resource: str = "example.com/gpu",
        count: int = 4,
        *,
        preferred: bool = True,
        pre_start: bool = True,
        socket_name: str = "tiny.sock",
        version: str = VERSION,
        ids: list[str] | None = None,
    ) -> None:
        self.directory, self.resource, self.socket_name, self.version = (
            directory,
            resource,
            socket_name,
            version,
        )
        self.options = pb.DevicePluginOptions(
            pre_start_required=pre_start, get_preferred_allocation_available=preferred
        )
        self.health = {d: HEALTHY for d in (ids or [f"dev-{i}" for i in range(count)])}
        self.allocate_requests: list[pb.AllocateRequest] = []
        self.preferred_requests: list[pb.PreferredAllocationRequest] = []
        self.pre_start_requests: list[pb.PreStartContainerRequest] = []
        self.fail_allocate: str | None = None
        self.registrations = 0
        self._cond = threading.Condition()
        self._version = 0
        self._server: grpc.Server | None = None
        self._pools: list[futures.ThreadPoolExecutor] = []
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

    # --- the gRPC service --------------------------------------------------------------------
    def GetDevicePluginOptions(self, request, context):
        return self.options

    def ListAndWatch(self, request, context):
        sent = -1
        while context.is_active() and not self._stop.is_set():
            with self._cond:
                if sent == self._version:
                    self._cond.wait(0.05)
                    continue
                sent = self._version
                devices = [pb.Device(ID=d, health=h) for d, h in self.health.items()]
            yield pb.ListAndWatchResponse(devices=devices)

    def GetPreferredAllocation(self, request, context):
        self.preferred_requests.append(request)
        return pb.PreferredAllocationResponse(
            container_responses=[
                pb.ContainerPreferredAllocationResponse(
                    deviceIDs=sorted(r.available_deviceIDs, reverse=True)[: r.allocation_size]
                )
                for r in request.container_requests
            ]
        )

    def Allocate(self, request, context):
        self.allocate_requests.append(request)
        if self.fail_allocate:
            context.abort(grpc.StatusCode.INTERNAL, self.fail_allocate)
        return pb.AllocateResponse(
            container_responses=[
                pb.ContainerAllocateResponse(envs={"NVIDIA_VISIBLE_DEVICES": ",".join(r.devices_ids)})
                for r in request.container_requests
            ]
        )

    def PreStartContainer(self, request, context):
        self.pre_start_requests.append(request)
        return pb.PreStartContainerResponse()

    # --- lifecycle ---------------------------------------------------------------------------
    def set_health(self, device: str, health: str) -> None:
        with self._cond:
            self.health[device] = health
            self._version += 1
            self._cond.notify_all()

    def serve(self) -> None:
        self._pools.append(futures.ThreadPoolExecutor(max_workers=4))  # shut down by stop()
        server = grpc.server(self._pools[-1])
        rpc.add_DevicePluginServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{self.directory / self.socket_name}")
        server.start()
        self._server = server

    def register(self) -> None:
        with grpc.insecure_channel(f"unix://{self.directory / KUBELET_SOCKET_NAME}") as channel:
            rpc.RegistrationStub(channel).Register(
                pb.RegisterRequest(
                    version=self.version,
                    endpoint=self.socket_name,
                    resource_name=self.resource,
                    options=self.options,
                ),
                timeout=10,
            )
        self.registrations += 1

    def start(self, watch: bool = True) -> TinyPlugin:
        self.serve()
        self.register()
        if watch:
            self._watcher = threading.Thread(target=self._watch_kubelet, daemon=True)
            self._watcher.start()
        return self

    def _watch_kubelet(self) -> None:
        kubelet_sock = self.directory / KUBELET_SOCKET_NAME
        seen = _inode(kubelet_sock)
        while not self._stop.wait(0.05):
            now = _inode(kubelet_sock)
            if now is not None and now != seen:
                seen = now
                self._server.stop(grace=0).wait(5)
                self.serve()
                self.register()

    def stop_serving(self) -> None:
        if self._server is not None:
            self._server.stop(grace=0).wait(5)

    def stop(self) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=5)
        self.stop_serving()
        for pool in self._pools:
            pool.shutdown(wait=True, cancel_futures=True)


def _inode(path: Path) -> tuple[int, int] | None:
    """Identity of a file that survives inode-number reuse: (inode, change time)."""
    try:
        st = os.stat(path)
        return st.st_ino, st.st_ctime_ns
    except FileNotFoundError:
        return None
