"""The built wheel, installed into a fresh venv outside the checkout, carries everything dynmig reads.

Why: a non-editable install used to lose `policies/default.yaml` and `charts/dynmig` (they were read
relative to the checkout). This builds the wheel as a user would, installs it with its dependencies
into a new venv in a temp dir, and runs the commands from there with the checkout nowhere on the path.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# the first test to use `installed` creates the venv and installs the wheel's dependencies (~30 s idle, minutes on
# a busy machine); the lab tour needs a few minutes more there
pytestmark = pytest.mark.timeout(900)
TOOLS = Path(os.environ.get("DYNMIG_TOOLS", ROOT / ".cache" / "tools"))


def _run(argv: list[str], cwd: Path, timeout: float = 300, env: dict[str, str] | None = None):
    return subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False, env=env
    )


PACKAGES = ("dynmig", "base", "mig", "webhooks", "plugin", "certs", "kube")
# the testbed's packages and what only it needs (CEL for the simulated API server): never in the product
TEST_WORLD = ("sim", "lab", "cel")
# top-level folders the wheel carries inside mig/_data (mig/_data/<name> is a symlink to <name>)
DATA_FOLDERS = ("charts", "policies")


@pytest.fixture(scope="module")
def wheel_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="dynmig-wheel-") as tmp:
        built = _run(
            [str(ROOT / "scripts" / "build_wheel.sh"), tmp],
            cwd=Path(tmp),
            env={**os.environ, "PYTHON": sys.executable},
        )
        assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
        yield Path(tmp)


def _tracked(*folders: str) -> set[str]:
    done = _run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *folders], cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return {
        line
        for line in done.stdout.splitlines()
        if (ROOT / line).is_file() and not (ROOT / line).is_symlink()
    }


def test_the_wheel_carries_every_file_of_the_source_packages_and_the_chart_and_policies(wheel_dir):
    with zipfile.ZipFile(next(wheel_dir.glob("dynmig-*.whl"))) as wheel:
        shipped = set(wheel.namelist())
    expected = _tracked(*PACKAGES) | {f"mig/_data/{path}" for path in _tracked(*DATA_FOLDERS)}
    missing = sorted(expected - shipped)
    assert not missing, (
        f"in the tree but not in the wheel (add them to package-data in pyproject.toml): {missing}"
    )


def test_the_wheel_carries_no_simulated_world_and_requires_no_cel(wheel_dir):
    with zipfile.ZipFile(next(wheel_dir.glob("dynmig-*.whl"))) as wheel:
        names = wheel.namelist()
        metadata = next(wheel.read(name).decode() for name in names if name.endswith(".dist-info/METADATA"))
    tops = {name.split("/", 1)[0] for name in names}
    assert not tops & set(TEST_WORLD), sorted(tops & set(TEST_WORLD))
    required = [
        line for line in metadata.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line
    ]
    assert required and not [line for line in required if "common-expression-language" in line], required


@pytest.fixture(scope="module")
def installed(wheel_dir: Path) -> Iterator[tuple[Path, Path]]:
    """(bin folder of a fresh venv holding the wheel, a working folder outside the checkout)."""
    with tempfile.TemporaryDirectory(prefix="dynmig-venv-") as tmp:
        home = Path(tmp)
        wheel = next(wheel_dir.glob("dynmig-*.whl"))
        venv.create(home / "venv", with_pip=True)
        bin_dir = home / "venv" / "bin"
        done = _run(
            [
                str(bin_dir / "python"),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                str(wheel),
            ],
            cwd=home,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        work = home / "elsewhere"
        work.mkdir()
        yield bin_dir, work


def _env(bin_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join([str(bin_dir), str(TOOLS), env.get("PATH", "")])
    env["DYNMIG_TOOLS"] = str(TOOLS)
    return env


def test_the_installed_package_is_the_one_running_not_the_checkout(installed):
    bin_dir, work = installed
    script = (
        "import base.resources as r, dynmig; print(dynmig.__file__); print(r.default_policy()); "
        "print(r.data_path('charts', 'dynmig'))"
    )
    done = _run([str(bin_dir / "python"), "-c", script], cwd=work, env=_env(bin_dir))
    assert done.returncode == 0, done.stderr
    for line in done.stdout.split():
        assert "site-packages" in line and not line.startswith(str(ROOT) + os.sep), line


def test_policy_explain_from_a_fresh_venv_uses_the_packaged_default_policy(installed):
    bin_dir, work = installed
    done = _run(
        [str(bin_dir / "dynmig"), "policy", "explain", "--model", "RTX PRO 6000", "--memory", "8000"],
        cwd=work,
        env=_env(bin_dir),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "policy default" in done.stdout
    assert re.search(r"device 0: 1g\.24gb at 0:\d", done.stdout), done.stdout


def test_policy_check_accepts_the_packaged_default_and_its_examples(installed):
    bin_dir, work = installed
    done = _run([str(bin_dir / "dynmig"), "policy", "check"], cwd=work, env=_env(bin_dir))
    assert done.returncode == 0, done.stdout + done.stderr


def test_dynmig_lab_without_the_testbed_says_in_one_line_how_to_get_it(installed):
    bin_dir, work = installed
    done = _run([str(bin_dir / "dynmig"), "lab"], cwd=work, env=_env(bin_dir))
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and "testbed" in done.stderr and "make lab" in done.stderr, (
        done.stderr
    )
    assert not done.stdout


@pytest.fixture(scope="module")
def with_testbed(installed: tuple[Path, Path], wheel_dir: Path) -> tuple[Path, Path]:
    """The same venv with the testbed's wheel added (after the product-only tests above have run)."""
    bin_dir, work = installed
    built = _run(
        [str(ROOT / "scripts" / "build_wheel.sh"), str(wheel_dir / "testbed"), "testbed"],
        cwd=wheel_dir,
        env={**os.environ, "PYTHON": sys.executable},
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    testbed = next((wheel_dir / "testbed").glob("dynmig_testbed-*.whl"))
    wheel = next(wheel_dir.glob("dynmig-*.whl"))
    done = _run(
        [
            str(bin_dir / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            str(testbed),
            str(wheel),
        ],
        cwd=work,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return installed


def test_the_lab_tour_passes_from_a_fresh_venv_with_the_packaged_chart(with_testbed):
    if not (TOOLS / "helm").exists():
        pytest.skip(f"helm not found in {TOOLS} (run `make tools`)")
    bin_dir, work = with_testbed
    done = _run(
        [str(bin_dir / "dynmig"), "lab", "--scenario", "tour"], cwd=work, env=_env(bin_dir), timeout=300
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert re.search(r"^### tour: PASSED — (\d+)/\1 checks passed", done.stdout, re.MULTILINE), done.stdout[
        -3000:
    ]
