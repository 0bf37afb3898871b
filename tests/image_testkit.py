"""What the README's `make image` line writes: the archive and the image name, from make's own dry run
(so the tests that build or check the image follow the Makefile, never a copy of its names)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAKE_IMAGE = "make image"  # the README's line, as written (tests/charts/test_readme_install.py checks it is)


def make_image_target() -> tuple[str, str]:
    """(archive relative to the checkout, image name) that `make image` writes."""
    done = subprocess.run(
        [*shlex.split(MAKE_IMAGE), "-n"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    (build,) = [out for out in done.stdout.splitlines() if "scripts/build_image.sh" in out]
    archive, name = shlex.split(build)[-2:]
    return archive, name
