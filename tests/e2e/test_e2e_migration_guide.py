"""The migration guide's eight checks (docs/migrating-from-hami.md, "What the lab checks"), each a lab
scenario run against one shared lab.

Every check of a scenario is an assertion on what a person would look at: the pod's
`hami.io/vgpu-mig-allocations`, its events and phase, and the simulated GPUs (instances, NVML
create/destroy calls, processes). A failed check fails the test with the check's own explanation.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

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


GUIDE_DOC = Path(__file__).resolve().parents[2] / "docs" / "migrating-from-hami.md"


def test_the_lab_offers_every_check_of_the_migration_guide():
    assert set(GUIDE) <= set(SCENARIOS)


def test_the_migration_guide_lists_exactly_these_checks_with_the_labs_own_words():
    text = GUIDE_DOC.read_text()
    table = text[text.index("## What the lab checks") :]
    rows = re.findall(r"^\| `([a-z0-9-]+)` \| (.+?) \|$", table, re.MULTILINE)
    assert [name for name, _ in rows] == GUIDE
    for name, words in rows:  # the scenario's title, without its number
        assert SCENARIOS[name].title.split(". ", 1)[-1] == words, name


@pytest.mark.parametrize("name", GUIDE)
def test_the_migration_guide_check_passes_against_the_whole_system(lab, kit, name):
    run = run_scenario(lab, name)
    failed = "\n".join(f"FAIL {c.text} — {c.detail}" for c in run.failed)
    assert run.checks, f"scenario {name} made no checks:\n{run.transcript}"
    assert not failed, f"{failed}\n--- transcript ---\n{run.transcript}"
