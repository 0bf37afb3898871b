"""The CLI behaves like a Kubernetes component: a version, documented flags, one environment
convention, clear errors for bad values and one log format for our lines and uvicorn's."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from starlette.applications import Starlette

from base import logs
from plugin.config import flags as plugin_flags
from plugin.config import load_config
from plugin.metrics import PluginMetrics
from webhooks.config import flags as serve_flags
from webhooks.config import parse_args
from webhooks.metrics import Metrics
from webhooks.runner import Listeners

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
DYNMIG = [sys.executable, "-m", "dynmig.cli"]


def _dynmig(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*DYNMIG, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


def test_dynmig_version_prints_the_package_version():
    done = _dynmig("--version")
    assert (done.returncode, done.stdout.strip()) == (0, f"dynmig {VERSION}")


def test_a_bad_log_level_is_a_usage_error_naming_the_flag_and_the_choices_not_a_traceback():
    done = _dynmig("serve", "--log-level", "foo")
    assert done.returncode == 2
    assert "--log-level: 'foo' is not one of debug, info, warning, error, critical" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_bad_value_in_the_environment_names_the_variable():
    done = _dynmig("serve", env={"DYNMIG_PORT": "https"})
    assert done.returncode == 2
    assert "--port (from env DYNMIG_PORT): 'https' is not a port number" in done.stderr
    assert "Traceback" not in done.stderr
    plugin = _dynmig("device-plugin", "--node-name", "n1", env={"DYNMIG_RECONCILE_INTERVAL": "soon"})
    assert plugin.returncode == 2
    assert "DYNMIG_RECONCILE_INTERVAL" in plugin.stderr and "Traceback" not in plugin.stderr


@pytest.mark.parametrize("make", [serve_flags, plugin_flags], ids=["serve", "device-plugin"])
def test_every_flag_says_what_it_does_its_default_and_its_environment_variable(make):
    for action in make({}).parser._actions:
        if "-h" in action.option_strings:
            continue
        flag = action.option_strings[0]
        assert action.help and "(default: " in action.help, flag
        assert f"env DYNMIG_{flag[2:].upper().replace('-', '_')}" in action.help, flag


def test_the_plugins_old_environment_names_still_work_with_a_warning_naming_the_new_one():
    f = plugin_flags({"METRICS_ADDRESS": ":9394", "RECONCILE_INTERVAL": "2", "NODE_NAME": "gpu-1"})
    args = f.parse([])
    assert (args.metrics_address, args.reconcile_interval, args.node_name) == (":9394", 2.0, "gpu-1")
    assert any("METRICS_ADDRESS is deprecated; set DYNMIG_METRICS_ADDRESS" in w for w in f.warnings)
    assert any("RECONCILE_INTERVAL is deprecated; set DYNMIG_RECONCILE_INTERVAL" in w for w in f.warnings)
    assert not any("NODE_NAME" in w for w in f.warnings)  # the downward API's name is not deprecated


def test_the_new_name_wins_over_the_old_one_and_a_flag_over_both():
    env = {"METRICS_ADDRESS": ":1", "DYNMIG_METRICS_ADDRESS": ":2"}
    assert plugin_flags(env).parse([]).metrics_address == ":2"
    assert plugin_flags(env).parse(["--metrics-address", ":3"]).metrics_address == ":3"


def test_the_device_plugin_reads_the_prefixed_names(monkeypatch):
    monkeypatch.setenv("DYNMIG_NODE_NAME", "gpu-7")
    monkeypatch.setenv("DYNMIG_CONFIG_FILE", str(ROOT / "policies" / "default.yaml"))
    monkeypatch.setenv("DYNMIG_LOG_FORMAT", "json")
    config = load_config([])
    assert (config.node_name, config.log_format, config.warnings) == ("gpu-7", "json", ())


def test_serve_takes_a_repeated_flag_from_a_comma_list_in_the_environment(monkeypatch):
    monkeypatch.setenv("DYNMIG_PRIVILEGED_USER", "system:serviceaccount:hami:hami-scheduler, alice")
    assert parse_args([]).privileged_users == ("system:serviceaccount:hami:hami-scheduler", "alice")


@pytest.fixture
def root_logger():
    """logs.setup configures the process's root logger; put pytest's handlers back afterwards."""
    names = ("", "uvicorn", "uvicorn.error", "uvicorn.access")
    saved = [
        (
            logging.getLogger(n),
            list(logging.getLogger(n).handlers),
            logging.getLogger(n).level,
            logging.getLogger(n).propagate,
        )
        for n in names
    ]
    yield
    for logger, handlers, level, propagate in saved:
        logger.handlers[:] = handlers
        logger.setLevel(level)
        logger.propagate = propagate


def test_json_logs_carry_the_pod_and_node_and_uvicorns_lines_share_the_format(root_logger):
    stream = io.StringIO()
    logs.setup("info", "json", stream)
    logging.getLogger("dynmig.plugin").info("created 1g.24gb", extra=logs.about(pod="ns/p", node="gpu-1"))
    Listeners(Starlette(), log_level="info").start().stop()
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert {
        "level": "info",
        "logger": "dynmig.plugin",
        "msg": "created 1g.24gb",
        "pod": "ns/p",
        "node": "gpu-1",
    }.items() <= lines[0].items()
    assert any(
        line["logger"].startswith("uvicorn") and "running on" in line["msg"].lower() for line in lines
    ), lines


def test_text_logs_end_with_what_the_line_is_about(root_logger):
    stream = io.StringIO()
    logs.setup("info", "text", stream)
    logging.getLogger("dynmig.plugin").warning("destroyed", extra=logs.about(pod="ns/p", node="gpu-1"))
    assert stream.getvalue().rstrip().endswith("WARNING dynmig.plugin: destroyed pod=ns/p node=gpu-1")


def test_both_metrics_endpoints_say_which_build_serves_them():
    for registry, component in ((Metrics().registry, "serve"), (PluginMetrics().registry, "device-plugin")):
        text = generate_latest(registry).decode()
        assert f'dynmig_build_info{{component="{component}",version="{VERSION}"}} 1.0' in text


def test_a_repeated_flag_on_the_command_line_replaces_the_default_and_the_environment(monkeypatch):
    monkeypatch.setenv("DYNMIG_TLS_NAME", "from-env.example")
    cfg = parse_args(["--tls-name", "a.svc", "--tls-name", "b.svc,c.svc"])
    assert cfg.tls_names == ("a.svc", "b.svc", "c.svc")
    assert parse_args([]).tls_names == ("from-env.example",)


def test_every_line_of_the_device_plugin_names_its_node_unless_it_names_another(root_logger):
    stream = io.StringIO()
    logs.setup("info", "json", stream, node="gpu-1")
    logging.getLogger("dynmig.plugin").info("published")
    logging.getLogger("dynmig.plugin").info("other", extra=logs.about(node="gpu-2", pod="ns/p"))
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert (first["node"], second["node"], second["pod"]) == ("gpu-1", "gpu-2", "ns/p")


def test_dynmig_help_names_every_command_and_an_unknown_one_is_refused():
    done = _dynmig("--help")
    assert done.returncode == 0
    for command in ("serve", "device-plugin", "certs", "policy", "lab"):
        assert f"\n  {command} " in done.stdout
    unknown = _dynmig("sevre")
    assert unknown.returncode == 2 and "unknown command 'sevre'" in unknown.stderr
