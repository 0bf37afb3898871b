"""One whole lab for a test module, and a kit that empties it between tests.

    @pytest.fixture(scope="module")
    def lab(tmp_path_factory):
        yield from lab_testkit.started(tmp_path_factory, "pair-lab", "gpu-a100=2xA100-SXM4-40GB")

    @pytest.fixture
    def kit(lab):
        yield from lab_testkit.emptied(lab)

A lab starts in a few seconds, so a module shares one; the kit deletes every pod after each test and
waits until the GPUs hold no MIG instance. Without helm the module is skipped, saying why.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from lab.chart import ChartError, helm_binary
from lab.cluster import Lab
from lab.kit import Kit
from lab.nodes import DEFAULT_NODES, parse_nodes


def started(
    tmp_path_factory: pytest.TempPathFactory, name: str, nodes: str = DEFAULT_NODES, **options: Any
) -> Iterator[Lab]:
    """A started lab of `nodes` in a fresh workdir named `name`, stopped when the generator closes;
    `options` are Lab's (policy, values, ...)."""
    try:
        helm_binary()
    except ChartError as error:
        pytest.skip(str(error))
    lab = Lab(parse_nodes(nodes), tmp_path_factory.mktemp(name), **options).start()
    try:
        yield lab
    finally:
        lab.stop()


def emptied(lab: Lab) -> Iterator[Kit]:
    """A kit on `lab` that deletes every pod it made, and waits for the GPUs to be empty, afterwards."""
    kit = Kit(lab)
    yield kit
    kit.delete_all()
