"""Run the HTTPS app and the metrics app on uvicorn, in the foreground (`dynmig serve`) or in a
background thread (`dynmig lab`, tests, benchmarks). Port 0 picks free ports; `ports` tells which."""

from __future__ import annotations

import asyncio
import signal
import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import uvicorn
from starlette.applications import Starlette

from certs.reload import TLSReloader

GRACEFUL_SHUTDOWN = (
    2  # whole seconds (uvicorn takes an int) an in-flight request gets to finish after SIGTERM or stop()
)


class ServingTLS(Protocol):
    """What a listener's TLS gives uvicorn: a TLSReloader, or webhooks.tls.ClientCertificateTLS."""

    def ssl_context_factory(
        self,
        config: uvicorn.Config | None = None,
        default_factory: Callable[[], ssl.SSLContext] | None = None,
    ) -> ssl.SSLContext: ...


@dataclass(frozen=True)
class Extender:
    """The scheduler-extender listener: its own app, address (loopback by default) and TLS."""

    app: Starlette
    host: str = "127.0.0.1"
    port: int = 0
    tls: ServingTLS | None = None  # None: plain HTTP


@dataclass(frozen=True)
class Page:
    """The live slice-map page's listener (webhooks/page): its app and port, on the main bind address."""

    app: Starlette
    port: int = 0


def _config(
    app: Starlette, host: str, port: int, tls: ServingTLS | None, log_level: str, graceful: int
) -> uvicorn.Config:
    # log_config=None: uvicorn's lines go through the process's handler and format (base/logs.py)
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        log_config=None,
        lifespan="off",
        ssl_context_factory=tls.ssl_context_factory if tls else None,
        timeout_graceful_shutdown=graceful,
        access_log=False,
    )


def _configs(
    app: Starlette,
    metrics_app: Starlette | None,
    host: str,
    port: int,
    metrics_port: int,
    tls: TLSReloader | None,
    log_level: str,
    graceful: int,
    extender: Extender | None,
    page: Page | None = None,
) -> list[uvicorn.Config]:
    configs = [_config(app, host, port, tls, log_level, graceful)]
    if metrics_app is not None:
        configs.append(_config(metrics_app, host, metrics_port, None, log_level, graceful))
    if page is not None:  # plain HTTP, like metrics: read-only, reached by port-forward or the Service
        configs.append(_config(page.app, host, page.port, None, log_level, graceful))
    if extender is not None:
        configs.append(_config(extender.app, extender.host, extender.port, extender.tls, log_level, graceful))
    return configs


class _Server(uvicorn.Server):
    """uvicorn's server, except that shutdown does not wait for clients that have nothing left to say.

    Why: uvicorn closes idle keep-alive connections on shutdown (and each busy one after its
    response), but over TLS a close sends close_notify and then waits for the client's, up to 30 s,
    which an idle pooled client (the API server calling webhooks, kube-scheduler calling the
    extender) never sends: every stop took the whole graceful timeout. A connection that we already
    closed and whose TLS layer holds no unsent bytes has nothing in flight, so it is dropped.
    Requests still being handled are untouched and get the graceful timeout to finish. (Bytes the
    TLS layer already passed to the socket are not re-checked: a response still draining to a
    client that stopped reading can be cut short; our responses are small.)"""

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # first the connections closed before (keep-alive timeout): closing one twice, as uvicorn's
        # shutdown would, detaches its TLS layer, which then lingers out of reach
        self._drop_closed_connections()
        reaper = asyncio.create_task(self._keep_dropping())
        try:
            await super().shutdown(sockets)
        finally:
            reaper.cancel()

    async def _keep_dropping(self) -> None:
        while True:
            await asyncio.sleep(0.02)
            self._drop_closed_connections()

    def _drop_closed_connections(self) -> None:
        for connection in list(self.server_state.connections):
            transport = getattr(connection, "transport", None)
            try:
                idle = (
                    transport is not None
                    and transport.is_closing()
                    and transport.get_write_buffer_size() == 0
                )
            except AttributeError:  # a TLS transport closed twice: nothing left to reach
                continue
            if idle and transport is not None:
                transport.abort()


async def serve_forever(servers: Sequence[uvicorn.Server], handle_signals: bool = True) -> None:
    """Serve until every server exits. One signal handler stops all of them (uvicorn's own per-server
    handlers would leave all but the last-installed one running), so `_serve` skips uvicorn's."""
    if handle_signals:

        def stop_all() -> None:
            for s in servers:
                s.should_exit = True

        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop_all)
    await asyncio.gather(*(s._serve() for s in servers))


class Listeners:
    """The uvicorn servers of one `dynmig serve`: HTTPS webhooks (or plain, without TLS), metrics,
    optionally the live page, and optionally the scheduler extender on its own address."""

    def __init__(
        self,
        app: Starlette,
        metrics_app: Starlette | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        metrics_port: int = 0,
        tls: TLSReloader | None = None,
        log_level: str = "warning",
        graceful_shutdown: int = GRACEFUL_SHUTDOWN,
        extender: Extender | None = None,
        page: Page | None = None,
    ):
        self.servers = [
            _Server(c)
            for c in _configs(
                app, metrics_app, host, port, metrics_port, tls, log_level, graceful_shutdown, extender, page
            )
        ]
        self.tls = tls
        self._metrics = metrics_app is not None
        self._page = page is not None
        self._extender = extender
        self._thread: threading.Thread | None = None

    def run(self) -> None:
        """Foreground: until SIGTERM or SIGINT."""
        asyncio.run(serve_forever(self.servers))

    def start(self, timeout: float = 10.0) -> Listeners:
        """Background thread; returns once every server listens."""
        self._thread = threading.Thread(
            target=lambda: asyncio.run(serve_forever(self.servers, False)), name="dynmig-serve", daemon=True
        )
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

    @property
    def page_url(self) -> str:
        """The live slice-map page (the listener after metrics)."""
        if not self._page:
            raise RuntimeError("these listeners serve no page")
        return f"http://127.0.0.1:{self.ports[1 + self._metrics]}/"

    @property
    def extender_url(self) -> str:
        """Where kube-scheduler reaches /filter and /bind."""
        if self._extender is None:
            raise RuntimeError("these listeners serve no extender")
        scheme = "https" if self._extender.tls else "http"
        return f"{scheme}://127.0.0.1:{self.ports[-1]}"

    def stop(self) -> None:
        for s in self.servers:
            s.should_exit = True
        if self._thread is not None:
            self._thread.join(10)
