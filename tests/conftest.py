"""Project-wide fixtures.

`apiserver`: a simulated Kubernetes API server on loopback for this test (sim.apiserver.ApiServer),
stopped at teardown. Use it through the official client, as production code does:

    def test_x(apiserver):
        core = kubernetes.client.CoreV1Api(apiserver.api_client("scheduler"))  # or "admin", ...
        path = apiserver.kubeconfig("device-plugin")   # kubeconfig file for a process or kubectl

Identities (bearer tokens -> userInfo): admin (system:masters), scheduler
(system:serviceaccount:dynmig:dynmig-scheduler), device-plugin (...:dynmig-device-plugin), certs,
kube-scheduler, kubelet, alice. Add more with `apiserver.add_identity(...)`. Test hooks:
`register_service(ns, name, host, port)` for webhook services, `faults.fail_next(...)`,
`faults.add_latency(...)`, `faults.cut_watches()`, `down()`/`up()`, `finish_deletions()`,
`compact()`, and in-process `create(obj)`/`get(kind, name, ns)` for fast seeding.

`kubectl`: path of the kubectl binary from .cache/tools (the test is skipped if it is missing).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from sim.apiserver import ApiServer

TOOLS = Path(os.environ.get("DYNMIG_TOOLS", Path(__file__).resolve().parent.parent / ".cache" / "tools"))


@pytest.fixture
def apiserver(tmp_path: Path) -> Iterator[ApiServer]:
    server = ApiServer(workdir=tmp_path / "apiserver").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def kubectl() -> str:
    found = shutil.which("kubectl", path=f"{TOOLS}{os.pathsep}{os.environ.get('PATH', '')}")
    if not found:
        pytest.skip(f"kubectl not found in {TOOLS} or PATH (run `make tools`)")
    return found
