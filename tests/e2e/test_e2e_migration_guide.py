"""The migration guide's eight checks, each a lab scenario run against one shared lab.

Every check of a scenario is an assertion on what a person would look at: the pod's
`hami.io/vgpu-mig-allocations`, its events and phase, and the simulated GPUs (instances, NVML
create/destroy calls, processes). A failed check fails the test with the check's own explanation.
"""

from __future__ import annotations

import contextlib

import pytest
from lab.scenario import Run, ScenarioFailed
from lab.scenarios import SCENARIOS

GUIDE = [
    "create-delete",
    "several-1g",
    "mixed-1g-2g-3g",
    "exhausted",
    "reuse-after-delete",
    "plugin-restart",
    "bad-annotation",
    "api-down",
]


def run_scenario(lab, name: str) -> Run:
    lines: list[str] = []
    run = Run(lab, echo=lines.append)
    with contextlib.suppress(ScenarioFailed):
        SCENARIOS[name].run(run)
    run.transcript = "\n".join(lines)  # type: ignore[attr-defined]
    return run


def test_the_lab_offers_every_check_of_the_migration_guide():
    assert set(GUIDE) <= set(SCENARIOS)


@pytest.mark.parametrize("name", GUIDE)
def test_the_migration_guide_check_passes_against_the_whole_system(lab, kit, name):
    run = run_scenario(lab, name)
    failed = "\n".join(f"FAIL {c.text} — {c.detail}" for c in run.failed)
    assert run.checks, f"scenario {name} made no checks:\n{run.transcript}"
    assert not failed, f"{failed}\n--- transcript ---\n{run.transcript}"
