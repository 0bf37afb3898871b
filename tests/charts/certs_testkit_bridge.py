"""A uvicorn server whose TLS context is a certs.reload.TLSReloader (same as tests/certs uses)."""

from __future__ import annotations

import asyncio
import threading
import time

import uvicorn

from certs.reload import TLSReloader


class RunningServer:
    def __init__(self, reloader: TLSReloader, app, port: int = 0) -> None:
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off",
                                timeout_graceful_shutdown=1, ssl_context_factory=reloader.ssl_context_factory)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=lambda: asyncio.run(self.server.serve()), daemon=True)

    def start(self) -> None:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
