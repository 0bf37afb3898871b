"""Run the HTTPS app and the metrics app on uvicorn, in the foreground (`dynmig serve`) or in a
background thread (`dynmig lab`, tests, benchmarks). Port 0 picks free ports; `ports` tells which."""

from __future__ import annotations

import asyncio
import signal
import threading
import time

import uvicorn
from starlette.applications import Starlette

from certs.reload import TLSReloader

GRACEFUL_SHUTDOWN = 2.0  # seconds an in-flight request gets to finish after SIGTERM or stop()


def _configs(app: Starlette, metrics_app: Starlette | None, host: str, port: int, metrics_port: int,
             tls: TLSReloader | None, log_level: str, graceful: float) -> list[uvicorn.Config]:
    configs = [uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="off",
                              ssl_context_factory=tls.ssl_context_factory if tls else None,
                              timeout_graceful_shutdown=graceful, access_log=False)]
    if metrics_app is not None:
        configs.append(uvicorn.Config(metrics_app, host=host, port=metrics_port, log_level=log_level,
                                      lifespan="off", timeout_graceful_shutdown=graceful, access_log=False))
    return configs


class _Server(uvicorn.Server):
    """uvicorn's server, except that shutdown does not wait for clients that have nothing left to say.

    Why: on shutdown uvicorn closes idle keep-alive connections (and, after its response, each
    in-flight one); over TLS that close sends close_notify and then waits for the client's, which an
    idle pooled client (the API server calling webhooks, kube-scheduler calling the extender) never
    sends, so every stop took the whole graceful timeout. A connection we already closed whose
    bytes are all handed to the kernel has nothing in flight: drop it. Requests still running are
    untouched and get the graceful timeout to finish."""

    async def shutdown(self, sockets=None) -> None:
        reaper = asyncio.create_task(self._drop_closed_connections())
        try:
            await super().shutdown(sockets)
        finally:
            reaper.cancel()

    async def _drop_closed_connections(self) -> None:
        while True:
            for connection in list(self.server_state.connections):
                transport = getattr(connection, "transport", None)
                if transport is not None and transport.is_closing() and transport.get_write_buffer_size() == 0:
                    transport.abort()
            await asyncio.sleep(0.02)


async def serve_forever(servers: list[uvicorn.Server], handle_signals: bool = True) -> None:
    """Serve until every server exits. One signal handler stops all of them (uvicorn's own per-server
    handlers would leave all but the last-installed one running), so `_serve` skips uvicorn's."""
    if handle_signals:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda: [setattr(s, "should_exit", True) for s in servers])
    await asyncio.gather(*(s._serve() for s in servers))


class Listeners:
    """The uvicorn servers of one `dynmig serve`: HTTPS (or plain, without TLS) and metrics."""

    def __init__(self, app: Starlette, metrics_app: Starlette | None = None, host: str = "127.0.0.1",
                 port: int = 0, metrics_port: int = 0, tls: TLSReloader | None = None, log_level: str = "warning",
                 graceful_shutdown: float = GRACEFUL_SHUTDOWN):
        self.servers = [_Server(c) for c in _configs(app, metrics_app, host, port, metrics_port, tls, log_level,
                                                     graceful_shutdown)]
        self.tls = tls
        self._thread: threading.Thread | None = None

    def run(self) -> None:
        """Foreground: until SIGTERM or SIGINT."""
        asyncio.run(serve_forever(self.servers))

    def start(self, timeout: float = 10.0) -> Listeners:
        """Background thread; returns once every server listens."""
        self._thread = threading.Thread(target=lambda: asyncio.run(serve_forever(self.servers, False)),
                                        name="dynmig-serve", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not all(s.started for s in self.servers):
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("dynmig serve did not start listening")
            time.sleep(0.01)
        return self

    @property
    def ports(self) -> list[int]:
        return [s.servers[0].sockets[0].getsockname()[1] for s in self.servers]

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.ports[0]}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.ports[1]}/metrics"

    def stop(self) -> None:
        for s in self.servers:
            s.should_exit = True
        if self._thread is not None:
            self._thread.join(10)
