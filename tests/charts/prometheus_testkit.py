"""Debian's `prometheus` package in tests: `promtool` checks and unit-tests the chart's rules, the
`prometheus` server scrapes a lab. `make prometheus` (part of `make test`) installs it as root; where
it is missing the tests skip and say so."""

from __future__ import annotations

import copy
import json
import shutil
import socket
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from waiting_testkit import wait_for

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


class Prometheus:
    """A real Prometheus server (Debian's binary) with `config`, its data and log under `workdir`,
    listening on a free local port; stopped (TERM, then KILL) on exit."""

    def __init__(self, config: dict, workdir: Path):
        self.workdir = workdir
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> Prometheus:
        argv = [
            binary("prometheus"),
            f"--config.file={self.workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={self.workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
        ]
        with open(self.workdir / "prometheus.log", "wb") as log:
            self.process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        wait_for(self._ready, "Prometheus ready", timeout=60)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)

    def _ready(self) -> bool:
        assert self.process is not None and self.process.poll() is None, self.log()
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as reply:
                return reply.status == 200
        except OSError:
            return False

    def log(self) -> str:
        return (self.workdir / "prometheus.log").read_text()[-3000:]

    def api(self, path: str, **params: str) -> dict:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=5) as reply:
            body = json.loads(reply.read())
        assert body["status"] == "success", body
        return body["data"]

    def alerts(self, name: str, state: str = "firing") -> list[dict]:
        """The alerts named `name` in `state` now (resolved ones are no longer listed)."""
        return [
            a
            for a in self.api("alerts")["alerts"]
            if a["labels"]["alertname"] == name and a["state"] == state
        ]

    def value(self, query: str) -> float | None:
        """The single value of an instant query (None when it returns nothing)."""
        result = self.api("query", query=query)["result"]
        return float(result[0]["value"][1]) if result else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
