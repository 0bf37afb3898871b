"""End-to-end fixtures: one whole lab per test module (API server, kube-scheduler, kubelets and GPUs
simulated; `dynmig serve` and one `dynmig device-plugin` per node as real child processes).

`lab` is module-scoped because starting it takes a few seconds; `kit` resets between tests by
deleting every pod and waiting until the GPUs hold no MIG instance, so each test starts empty.
A module picks its allowlist with `LAB_POLICY = Path(...)` at module level.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from lab.chart import ChartError, helm_binary
from lab.cluster import Lab
from lab.kit import Kit
from lab.nodes import DEFAULT_NODES, parse_nodes


@pytest.fixture(scope="module")
def lab(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    try:
        helm_binary()
    except ChartError as error:
        pytest.skip(str(error))
    policy = getattr(request.module, "LAB_POLICY", None)
    workdir = tmp_path_factory.mktemp("lab")
    lines: list[str] = []
    started = Lab(parse_nodes(DEFAULT_NODES), workdir, policy=policy, echo=lines.append).start()
    started.progress = lines  # type: ignore[attr-defined]
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
def kit(lab: Lab) -> Iterator[Kit]:
    k = Kit(lab)
    yield k
    k.delete_all()
