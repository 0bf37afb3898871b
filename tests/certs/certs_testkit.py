"""Helpers for certs tests: the service identity certificates are made for. The uvicorn server
over real TLS whose context is owned by a TLSReloader is tests/tls_server_testkit.RunningServer."""

from __future__ import annotations

from certs.authority import ServiceIdentity

IDENTITY = ServiceIdentity("dynmig", "dynmig-system")
