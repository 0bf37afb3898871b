"""A real uvicorn server over real TLS whose context is owned by a certs.reload.TLSReloader, for
tests of certificate serving and reloading (tests/certs) and of the chart's extender TLS
(tests/charts). It lives at the top of tests/ so both folders import it by name."""

from __future__ import annotations

import asyncio
import threading
import time

import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from certs.reload import TLSReloader


def _app() -> Starlette:
    async def hello(request):
        return PlainTextResponse("ok")

    return Starlette(routes=[Route("/", hello)])


class RunningServer:
    """`start()` serves `app` (by default "ok" at /) on 127.0.0.1:`port` (0: chosen by the OS);
    `stop()` ends it."""

    def __init__(self, reloader: TLSReloader, app: Starlette | None = None, port: int = 0) -> None:
        self.reloader = reloader
        config = uvicorn.Config(
            app or _app(),
            host="127.0.0.1",
            port=port,
            log_level="warning",
            lifespan="off",
            # the API server keeps webhook connections alive; do not wait for it to close them
            timeout_graceful_shutdown=1,
            ssl_context_factory=reloader.ssl_context_factory,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.run(self.server.serve())

    def start(self) -> None:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        sock = self.server.servers[0].sockets[0]
        self.port = sock.getsockname()[1]
        self.url = f"https://127.0.0.1:{self.port}/"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
