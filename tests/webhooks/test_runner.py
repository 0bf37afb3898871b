"""How `dynmig serve`'s listeners stop: requests in flight finish, idle keep-alive clients (the API
server's webhook pool, kube-scheduler's extender client) do not hold the shutdown."""

from __future__ import annotations

import asyncio
import datetime as dt
import http.client
import ssl
import threading

import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from certs.authority import ServiceIdentity, make_ca, make_serving
from certs.reload import FileSource, TLSReloader
from webhooks.runner import Listeners

STARTED = threading.Event()


async def _slow(request):
    STARTED.set()
    await asyncio.sleep(float(request.query_params.get("seconds", "0")))
    return PlainTextResponse("done")


APP = Starlette(routes=[Route("/slow", _slow)])


@pytest.fixture
def tls(tmp_path):
    now = dt.datetime.now(dt.UTC)
    ca = make_ca(now)
    pair = make_serving(ca, ServiceIdentity("dynmig", "dynmig"), now)
    (tmp_path / "tls.crt").write_bytes(pair.cert_pem())
    (tmp_path / "tls.key").write_bytes(pair.key_pem())
    reloader = TLSReloader(FileSource(tmp_path / "tls.crt", tmp_path / "tls.key"))
    reloader.start()
    trust = ssl.create_default_context(cadata=ca.cert_pem().decode())
    trust.check_hostname = False
    yield reloader, trust
    reloader.stop()


def _keep_alive_client(listeners: Listeners, trust: ssl.SSLContext) -> http.client.HTTPSConnection:
    conn = http.client.HTTPSConnection("127.0.0.1", listeners.ports[0], context=trust, timeout=5)
    conn.request("GET", "/slow")
    response = conn.getresponse()
    assert (response.status, response.read(), response.will_close) == (200, b"done", False)
    return conn


def test_stop_ends_the_server_while_a_keep_alive_client_sits_idle(tls):
    reloader, trust = tls
    # a graceful timeout longer than stop() waits: an idle connection holding the shutdown shows as a live thread
    listeners = Listeners(APP, tls=reloader, graceful_shutdown=60).start()
    idle = _keep_alive_client(listeners, trust)
    try:
        listeners.stop()  # joins the serving thread for up to 10 s
        assert not listeners._thread.is_alive()
        with pytest.raises(
            (OSError, http.client.HTTPException)
        ):  # the idle connection was closed by the server
            idle.request("GET", "/slow")
            idle.getresponse()
    finally:
        idle.close()


def test_a_request_in_flight_when_the_server_stops_still_gets_its_answer(tls):
    reloader, trust = tls
    listeners = Listeners(APP, tls=reloader).start()
    answers: list[tuple[int, bytes]] = []

    def call() -> None:
        conn = http.client.HTTPSConnection("127.0.0.1", listeners.ports[0], context=trust, timeout=10)
        try:
            conn.request("GET", "/slow?seconds=0.5")
            response = conn.getresponse()
            answers.append((response.status, response.read()))
        finally:
            conn.close()

    STARTED.clear()
    caller = threading.Thread(target=call)
    caller.start()
    assert STARTED.wait(5)  # the request is being handled
    listeners.stop()
    caller.join(10)
    assert answers == [(200, b"done")]
    assert not listeners._thread.is_alive()
