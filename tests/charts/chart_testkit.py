"""Rendering charts/dynmig with the helm binary from .cache/tools (never downloaded in a test)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "dynmig"
TOOLS = Path(os.environ.get("DYNMIG_TOOLS", ROOT / ".cache" / "tools"))
KUBE_VERSIONS = [f"1.{minor}" for minor in range(28, 36)]
NAMESPACE = "gpu-system"


def helm_binary() -> str:
    found = shutil.which("helm", path=f"{TOOLS}{os.pathsep}{os.environ.get('PATH', '')}")
    if not found:
        pytest.skip(f"helm not found in {TOOLS} or PATH (run `make tools`)")
    return found


def helm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([helm_binary(), *args], check=False, capture_output=True, text=True, timeout=60)


@functools.lru_cache(maxsize=64)
def _render(kube_version: str, sets: tuple[str, ...]) -> tuple[dict, ...]:
    args = ["template", "dynmig", str(CHART), "--namespace", NAMESPACE, "--kube-version", kube_version]
    for s in sets:
        args += ["--set", s]
    done = helm(*args)
    if done.returncode != 0:
        raise AssertionError(f"helm template failed: {done.stderr}")
    return tuple(d for d in yaml.safe_load_all(done.stdout) if d)


def render(kube_version: str = "1.35", *sets: str) -> list[dict]:
    return list(_render(kube_version, tuple(sets)))


def of_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict], kind: str, name_suffix: str = "") -> dict:
    found = [d for d in of_kind(docs, kind) if d["metadata"]["name"].endswith(name_suffix)]
    assert len(found) == 1, (
        f"expected one {kind} *{name_suffix}, found {[d['metadata']['name'] for d in found]}"
    )
    return found[0]


def scheduler_config(docs: list[dict]) -> dict:
    return yaml.safe_load(one(docs, "ConfigMap", "-scheduler-config")["data"]["config.yaml"])


def container(workload: dict, name: str) -> dict:
    return next(c for c in workload["spec"]["template"]["spec"]["containers"] if c["name"] == name)


def arg(c: dict, flag: str) -> str:
    prefix = f"--{flag}="
    values = [a[len(prefix) :] for a in c.get("args", []) + c.get("command", []) if a.startswith(prefix)]
    assert len(values) == 1, f"{flag}: {values}"
    return values[0]


def env(c: dict, name: str) -> str:
    values = [e["value"] for e in c.get("env", []) if e["name"] == name]
    assert len(values) == 1, f"{name}: {values}"
    return values[0]
