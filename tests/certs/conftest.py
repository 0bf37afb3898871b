"""Fixtures for certs tests: certificates from our own authority, and a real uvicorn server."""

from __future__ import annotations

import datetime as dt

import pytest
from certs_testkit import IDENTITY
from tls_server_testkit import RunningServer

from certs.authority import make_ca, make_serving, utcnow
from certs.reload import TLSReloader


@pytest.fixture
def now() -> dt.datetime:
    return utcnow()


@pytest.fixture
def ca(now):
    return make_ca(now)


@pytest.fixture
def serving(ca, now):
    return make_serving(ca, IDENTITY, now)


@pytest.fixture
def tls_server(serving):
    """A uvicorn server on a loopback port, serving `serving` through a TLSReloader."""
    reloader = TLSReloader(required_names=["dynmig.dynmig-system.svc"])
    assert reloader.load(serving.cert_pem(), serving.key_pem())
    server = RunningServer(reloader)
    server.start()
    yield server
    server.stop()
