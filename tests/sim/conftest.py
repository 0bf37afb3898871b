"""Fixtures for the simulated outside world: a node's GPUs under pynvml, a device-plugin dir."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest
from sim.nvml import SimulatedNvml


@pytest.fixture
def node() -> Iterator[Callable[..., SimulatedNvml]]:
    """node(spec_or_model, **kw) -> an installed, initialised SimulatedNvml; undone at teardown."""
    started: list[SimulatedNvml] = []

    def make(spec: dict[str, Any] | str, **kwargs: Any) -> SimulatedNvml:
        if isinstance(spec, str):
            spec = {"gpus": [{"model": spec}]}
        sim = SimulatedNvml(spec, **kwargs).install()
        pynvml.nvmlInit()
        started.append(sim)
        return sim

    yield make
    for sim in reversed(started):
        while sim.library.init_count > 0:
            pynvml.nvmlShutdown()
        sim.uninstall()


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    """A short directory for unix sockets (pytest's tmp_path can exceed the 107-byte limit)."""
    path = Path(tempfile.mkdtemp(prefix="dp-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def run(apiserver: Any, kubectl: str, tmp_path: Path) -> Callable[..., str]:
    """run(*args, ok=True, stdin=None) -> kubectl's stdout (its stderr when ok=False), as admin."""
    kubeconfig = str(apiserver.kubeconfig("admin"))

    def kubectl_run(*args: str, ok: bool = True, stdin: str | None = None) -> str:
        out = subprocess.run(
            [kubectl, "--kubeconfig", kubeconfig, "--cache-dir", str(tmp_path / "cache"), *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            input=stdin,
        )
        assert (out.returncode == 0) == ok, out.stderr
        return out.stdout if ok else out.stderr

    return kubectl_run
