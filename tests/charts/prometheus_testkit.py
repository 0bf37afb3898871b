"""Debian's `prometheus` package in tests: `promtool` checks and unit-tests the chart's rules, the
`prometheus` server scrapes a lab. `make prometheus` (part of `make test`) installs it as root; where
it is missing the tests skip and say so."""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.charts.chart_testkit import one, render

INSTALL = "Debian's prometheus package (`make prometheus` as root, or apt-get install prometheus)"
PLUGIN_JOB = "dynmig-device-plugin"  # the device-plugin Service's name for release `dynmig`: its job
SERVE_JOB = "dynmig"


def binary(name: str) -> str:
    found = shutil.which(name)
    if not found:
        pytest.skip(f"{name} not found: the alert tests need {INSTALL}")
    return found


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [binary("promtool"), *args], check=False, capture_output=True, text=True, timeout=120, cwd=cwd
    )


def rule_groups(*sets: str) -> dict:
    """The chart's PrometheusRule `spec` (its `groups`), rendered by helm with the rule on."""
    docs = render("1.35", "metrics.prometheusRule.enabled=true", *sets)
    return copy.deepcopy(
        one(docs, "PrometheusRule")["spec"]
    )  # render's documents are cached: never mutate them


def write_rules(path: Path, *sets: str) -> Path:
    path.write_text(yaml.safe_dump(rule_groups(*sets), sort_keys=False))
    return path
