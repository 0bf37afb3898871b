"""The placement bench's command line: a typo or a missing value ends at once with a usage error
naming it (the full run takes about 15 minutes and must not start by mistake); --help prints how to
run it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "bench/placement.py", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )


@pytest.mark.parametrize(
    "args, named",
    [
        (["--hepl"], "unknown argument '--hepl'"),
        (["--evict-only", "--seeds"], "--seeds needs a value"),
        (["--load", "--evict-only"], "--load needs a value"),
        (["quick"], "unknown argument 'quick'"),
    ],
)
def test_a_mistyped_command_line_ends_at_once_with_a_usage_error_naming_it(args, named):
    done = _bench(*args)
    assert done.returncode == 2
    assert named in done.stderr and "--help" in done.stderr
    assert done.stdout == ""  # nothing was run


def test_help_prints_how_to_run_the_bench_and_runs_nothing():
    done = _bench("--help")
    assert done.returncode == 0
    assert "--evict-only" in done.stdout and "--advise-cost" in done.stdout
    assert "churn" not in done.stderr  # no trace was replayed


@pytest.mark.parametrize("jobs", ["0", "65", "two", "1.5"])
def test_a_grid_run_with_a_wrong_process_count_ends_at_once_naming_jobs(jobs):
    done = _bench("--grid", "--quick", "--jobs", jobs)
    assert done.returncode == 2
    assert "--jobs" in done.stderr and repr(jobs) in done.stderr
    assert done.stdout == ""  # no trace was replayed


@pytest.mark.parametrize(
    "args, named",
    [
        (["--grid", "--reuse", "--idle-per-gpu", "0"], "--idle-per-gpu: '0' is not from 1 to 64"),
        (["--grid", "--reuse", "--idle-ttl", "soon"], "--idle-ttl: 'soon' is not a number"),
        (["--grid", "--reuse", "--namespaces", "5000"], "--namespaces: '5000' is not from 1 to 1000"),
        (["--grid", "--reuse", "--namespaces", "2.5"], "--namespaces: '2.5' is not a whole number"),
        (["--grid", "--reuse", "--seeds", "1,x"], "--seeds: '1,x' is not a comma-separated list"),
        (["--reuse"], "give --grid --reuse"),
    ],
)
def test_a_reuse_command_line_out_of_range_ends_at_once_naming_the_flag(args, named):
    done = _bench(*args)
    assert done.returncode == 2
    assert named in done.stderr
    assert done.stdout == ""  # nothing was replayed


def test_a_grid_mix_that_does_not_exist_is_named_with_the_mixes_there_are():
    done = _bench("--grid", "--mix", "trainng")
    assert done.returncode == 2
    assert "--mix: 'trainng' is not one of" in done.stderr and "training" in done.stderr
    assert done.stdout == ""  # nothing was replayed
