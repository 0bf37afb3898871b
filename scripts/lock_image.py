"""Pin the image's Python dependencies: `make image-lock` writes image/requirements.lock.

Why: the Containerfile and `make image` install exactly these versions, checked by hash, so two builds
from the same commit get the same files. The wheels are the linux/amd64 CPython 3.11 ones (the image's
platform), resolved by pip from dynmig's own dependency list in pyproject.toml.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "image" / "requirements.lock"
PLATFORM = [
    "--only-binary=:all:",
    "--python-version",
    "3.11",
    "--implementation",
    "cp",
    "--abi",
    "cp311",
    *[
        arg
        for tag in (
            "manylinux_2_36_x86_64",
            "manylinux_2_28_x86_64",
            "manylinux_2_17_x86_64",
            "manylinux2014_x86_64",
            "manylinux_2_5_x86_64",
            "manylinux1_x86_64",
        )
        for arg in ("--platform", tag)
    ],
]


def resolve() -> list[tuple[str, str, str]]:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp, "report.json")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--dry-run",
                "--ignore-installed",
                "--no-build-isolation",
                *PLATFORM,
                "--target",
                str(Path(tmp, "t")),
                "--report",
                str(report),
                str(ROOT),
            ],
            check=True,
        )
        installs = json.loads(report.read_text())["install"]
    return sorted(
        (
            i["metadata"]["name"].lower(),
            i["metadata"]["version"],
            i["download_info"]["archive_info"]["hashes"]["sha256"],
        )
        for i in installs
        if i["metadata"]["name"] != "dynmig"
    )


def main() -> int:
    lines = [f"{name}=={version} --hash=sha256:{digest}" for name, version, digest in resolve()]
    header = "# dynmig's runtime dependencies for the image (linux/amd64, CPython 3.11); `make image-lock` rewrites this\n"
    LOCK.write_text(header + "\n".join(lines) + "\n")
    print(f"{LOCK.relative_to(ROOT)}: {len(lines)} pinned")
    return 0


if __name__ == "__main__":
    sys.exit(main())
