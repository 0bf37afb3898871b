"""certs, policy and lab follow the same DYNMIG_<FLAG> convention as serve and device-plugin: the
variable gives a flag's value, the command line wins, and a bad value is a usage error naming both."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from base.flags import apply_environment
from certs.main import build_parser as certs_parser

ROOT = Path(__file__).resolve().parents[2]
EXPLAIN = ["policy", "explain", "--model", "A100-SXM4-40GB", "--json"]


def _dynmig(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DYNMIG_")}
    return subprocess.run(
        [sys.executable, "-m", "dynmig.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
        env={**clean, **env},
    )


def _profile(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, done.stderr
    return json.dumps(json.loads(done.stdout), sort_keys=True)


def test_a_variable_gives_policy_explain_the_memory_a_required_flag_would():
    by_flag = _profile(_dynmig(*EXPLAIN, "--memory", "8000", env={}))
    by_env = _profile(_dynmig(*EXPLAIN, env={"DYNMIG_MEMORY": "8000"}))
    assert by_env == by_flag
    assert "2g.10gb" in by_flag  # 8000 MiB does not fit a 1g.5gb


def test_the_command_line_wins_over_the_variable():
    small = _profile(_dynmig(*EXPLAIN, "--memory", "8000", env={}))
    assert _profile(_dynmig(*EXPLAIN, "--memory", "8000", env={"DYNMIG_MEMORY": "40000"})) == small
    assert _profile(_dynmig(*EXPLAIN, env={"DYNMIG_MEMORY": "40000"})) != small


def test_a_switch_reads_true_or_false_from_its_variable():
    args = ["policy", "explain", "--model", "A100-SXM4-40GB", "--memory", "8000"]
    assert json.loads(_dynmig(*args, env={"DYNMIG_JSON": "true"}).stdout)
    assert not _dynmig(*args, env={"DYNMIG_JSON": "false"}).stdout.lstrip().startswith("{")


def test_a_bad_value_in_a_variable_is_a_usage_error_naming_the_flag_and_the_variable():
    done = _dynmig(*EXPLAIN, "--memory", "8000", env={"DYNMIG_GPUS": "lots"})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--gpus (from env DYNMIG_GPUS)" in done.stderr
    done = _dynmig("lab", "--scenario", "list", env={"DYNMIG_RECONCILE_INTERVAL": "soon"})
    assert done.returncode == 2 and "--reconcile-interval (from env DYNMIG_RECONCILE_INTERVAL)" in done.stderr
    done = _dynmig(*EXPLAIN, "--memory", "8000", env={"DYNMIG_JSON": "maybe"})
    assert done.returncode == 2 and "DYNMIG_JSON" in done.stderr


def test_a_repeatable_certs_flag_reads_a_comma_list_and_a_subcommand_switch_its_variable():
    parser = certs_parser()
    apply_environment(
        parser,
        {"DYNMIG_EXTRA_HOST": "a.example, b.example", "DYNMIG_FORCE": "true", "DYNMIG_VALIDITY": "30d"},
    )
    args = parser.parse_args(["rotate", "--namespace", "dynmig"])
    assert (args.extra_host, args.force, args.validity) == (["a.example", "b.example"], True, "30d")
    assert parser.parse_args(["rotate", "--namespace", "dynmig", "--validity", "7d"]).validity == "7d"
