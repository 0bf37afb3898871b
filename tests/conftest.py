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


# The order files run in under `make test` (`-n 3 --dist loadfile --no-loadscope-reorder`: xdist hands
# each worker the next whole file in collection order once it is nearly done with its own). The files
# that run longest go first, so the run does not end with one worker alone on a long lab file while the
# other is idle; then every other file that starts a lab (a fixture of one of LAB_FIXTURES' names),
# then the rest, each group in pytest's own order. Measured with `pytest -n 0 --durations=0` on the
# lab-heavy folders; a file missing from the list only runs later, never less.
SLOWEST_FIRST = (
    "tests/packaging/test_image.py",
    "tests/packaging/test_wheel.py",
    "tests/e2e/test_e2e_kubectl.py",
    "tests/lab/test_messages_for_people.py",
    "tests/lab/test_lab_serve_failover.py",
    "tests/e2e/test_e2e_lab_cli.py",
    "tests/e2e/test_e2e_hami_handover.py",
    "tests/lab/test_lab_dra.py",
    "tests/lab/test_lab_dra_burst.py",
    "tests/e2e/test_e2e_hami_policies.py",
    "tests/e2e/test_e2e_migration_guide.py",
    "tests/charts/test_chart_release_on_lab.py",
    "tests/e2e/test_e2e_beyond_hami.py",
    "tests/plugin/test_chaos_precreate.py",
    "tests/plugin/test_chaos.py",
    "tests/plugin/test_chaos_reuse.py",
    "tests/e2e/test_e2e_explain.py",
    "tests/bench/test_eviction.py",
    "tests/lab/test_lab_cdi.py",
    "tests/page/test_page_browser.py",
    "tests/status/test_status_lab.py",
    "tests/charts/test_chart_helm4_lab.py",
    "tests/lab/test_lab_prometheus.py",
    "tests/lab/test_lab_dra_visible.py",
    "tests/lab/test_lab_dra_extended.py",
    "tests/lab/test_lab_mig_manager.py",
    "tests/lab/test_lab_jobs.py",
    "tests/lab/test_lab_mixed_pair.py",
)
LAB_FIXTURES = frozenset({"lab", "kit", "kc", "policy_lab"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Whole files in the order of SLOWEST_FIRST, then lab files, then the rest; a file's own tests
    keep their order."""
    rank: dict[str, tuple[int, int]] = {}
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        if path in SLOWEST_FIRST:
            mine = (0, SLOWEST_FIRST.index(path))
        else:
            mine = (1 if LAB_FIXTURES & set(getattr(item, "fixturenames", ())) else 2, 0)
        rank[path] = min(rank.get(path, mine), mine)
    items.sort(key=lambda item: rank[item.nodeid.split("::", 1)[0]])
