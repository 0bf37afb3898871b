"""kubelet's client side of one registered device plugin: the dialled channel, its options, and
the ListAndWatch stream read in a background thread."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import grpc

from plugin.api import deviceplugin_pb2 as pb
from plugin.api import deviceplugin_pb2_grpc as rpc

DIAL_TIMEOUT_S = 10.0


class PluginEndpoint:
    def __init__(
        self,
        resource: str,
        socket_path: Path,
        on_devices: Callable[[PluginEndpoint, list], None],
        on_closed: Callable[[PluginEndpoint, str], None],
        dial_timeout: float = DIAL_TIMEOUT_S,
    ) -> None:
        self.dial_timeout = dial_timeout
        self.resource = resource
        self.socket_path = socket_path
        self._on_devices = on_devices
        self._on_closed = on_closed
        self.channel = grpc.insecure_channel(
            f"unix://{socket_path}", options=[("grpc.default_authority", "localhost")]
        )
        self.stub = rpc.DevicePluginStub(self.channel)
        self.options = pb.DevicePluginOptions()
        self._stream: grpc.Future | None = None
        self._thread: threading.Thread | None = None
        self._closing = False

    def dial(self) -> None:
        """What kubelet does inside Register: connect (blocking, 10 s) and read the options."""
        grpc.channel_ready_future(self.channel).result(timeout=self.dial_timeout)
        self.options = self.stub.GetDevicePluginOptions(pb.Empty(), timeout=self.dial_timeout)

    def start_watch(self) -> None:
        self._stream = self.stub.ListAndWatch(pb.Empty())
        self._thread = threading.Thread(target=self._watch, name=f"listandwatch-{self.resource}", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        reason = "stream ended"
        try:
            for response in self._stream:
                self._on_devices(self, list(response.devices))
        except grpc.RpcError as error:
            reason = f"stream failed: {error.code().name} {error.details()}"
        self._on_closed(self, "kubelet closed the stream" if self._closing else reason)

    def close(self) -> None:
        self._closing = True
        if self._stream is not None:
            self._stream.cancel()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self.channel.close()
