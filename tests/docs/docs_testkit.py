"""Reading README.md and docs/*.md as a newcomer does, and running their shell blocks as written.

A shell block is taken line by line (backslash continuations joined, comments kept: bash drops
them). A line that starts `dynmig lab --serve` (the lab, which runs until interrupted) is started in
the background, as the block says to leave it running, and the rest waits for the kubeconfig it
writes; every other line runs in one bash with `set -euo pipefail`, so the first line that fails
fails the block. The working directory is a scratch directory that links the repository's
`charts/`, `examples/`, `policies/`, `.venv/` and `.cache/` in, so relative paths and `$PWD` mean
what they mean in a clone, while the files a reader writes (values files, kubeconfigs) stay out of
the shared tree. The one change to a documented line: the kubeconfig path `/tmp/kc` becomes one in
that directory, so two runs at once do not share a lab.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = Path(os.environ.get("DYNMIG_TOOLS", ROOT / ".cache" / "tools"))
FENCE = re.compile(r"^ *```(\w*)\n(.*?)^ *```", re.DOTALL | re.MULTILINE)
LINKED = ("charts", "examples", "policies", ".venv", ".cache")


def section(path: Path, title: str) -> str:
    """The text of the section headed `title` (any level), up to the next heading of its level or above."""
    text = path.read_text()
    match = re.search(rf"^(#+) {re.escape(title)}\n", text, re.MULTILINE)
    assert match, f"{path.relative_to(ROOT)} has no section {title!r}"
    level = len(match.group(1))
    end = re.compile(rf"^#{{1,{level}}} ", re.MULTILINE).search(text, match.end())
    return text[match.start() : end.start() if end else len(text)]


def blocks(text: str, lang: str) -> list[str]:
    return [_dedent(body) for kind, body in FENCE.findall(text) if kind == lang]


def _dedent(body: str) -> str:
    lines = body.splitlines()
    indent = min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
    return "\n".join(line[indent:] for line in lines) + "\n"


def shell_lines(body: str) -> list[str]:
    """The commands of a shell block, continuations joined, blank and comment-only lines dropped."""
    joined = body.replace("\\\n", " ")
    return [
        line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]


def values_files(text: str) -> dict[str, str]:
    """YAML blocks whose first line is `# <file name>`: the files a reader is told to write."""
    files = {}
    for body in blocks(text, "yaml"):
        first = body.splitlines()[0]
        if first.startswith("# ") and first.endswith((".yaml", ".yml")):
            files[first[2:].strip()] = body
    return files


def require_tools() -> None:
    for tool in ("helm", "kubectl"):
        if not shutil.which(tool, path=str(TOOLS)):
            pytest.skip(f"{tool} not found in {TOOLS} (run `make tools`)")


class Reader:
    """A scratch working directory that looks like a clone, and the shell a reader types into."""

    def __init__(self, home: Path) -> None:
        self.home = home
        for name in LINKED:
            (home / name).symlink_to(ROOT / name)
        self.env = {
            **os.environ,
            "HOME": str(home),  # helm's and kubectl's caches and configs stay here
            "NO_COLOR": "1",
        }
        self.env.pop("KUBECONFIG", None)
        self.lab: subprocess.Popen[str] | None = None
        self.lab_log = home / "lab.log"
        self.transcript: list[str] = []

    def write(self, files: dict[str, str]) -> None:
        for name, body in files.items():
            (self.home / name).write_text(body)

    def run(self, lines: list[str], timeout: float = 300) -> str:
        """Run a block's lines in order; the lab line in the background. Returns what the shell printed."""
        rest: list[str] = []
        for line in (line.replace("/tmp/kc", str(self.home / "kc")) for line in lines):
            if line.startswith((".venv/bin/dynmig lab --serve", "dynmig lab --serve")):
                assert not rest, f"the lab must start first in its block: {line}"
                self._start_lab(line)
            else:
                rest.append(line)
        if not rest:
            return ""
        script = "set -euo pipefail\n" + "".join(f"echo '$ '{shlex.quote(line)}\n{line}\n" for line in rest)
        done = subprocess.run(
            ["bash", "-c", script],
            cwd=self.home,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        self.transcript.append(done.stdout + done.stderr)
        assert done.returncode == 0, (
            f"a documented command failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr}\n"
            f"--- lab ---\n{self.lab_tail()}"
        )
        return done.stdout

    def _start_lab(self, line: str) -> None:
        argv = shlex.split(line.split("#", 1)[0])
        kubeconfig = Path(argv[argv.index("--kubeconfig-out") + 1])
        if not kubeconfig.is_absolute():
            kubeconfig = self.home / kubeconfig
        kubeconfig.unlink(missing_ok=True)
        out = self.lab_log.open("w")
        self.lab = subprocess.Popen(
            argv,
            cwd=self.home,
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        deadline = time.monotonic() + 180
        while not kubeconfig.exists():
            if self.lab.poll() is not None:
                raise AssertionError(f"`{line}` exited with {self.lab.returncode}:\n{self.lab_tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"`{line}` wrote no kubeconfig in 180 s:\n{self.lab_tail()}")
            time.sleep(0.2)

    def lab_tail(self, lines: int = 60) -> str:
        if not self.lab_log.exists():
            return "(no lab)"
        return "\n".join(self.lab_log.read_text().splitlines()[-lines:])

    def stop(self) -> None:
        """Ctrl-C the lab, as its reader would, and wait for it to clean up."""
        if self.lab is None or self.lab.poll() is not None:
            return
        os.killpg(self.lab.pid, signal.SIGINT)
        try:
            self.lab.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.lab.pid, signal.SIGKILL)
            self.lab.wait(timeout=10)
