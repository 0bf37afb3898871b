"""`dynmig lab` as a person runs it: `make lab` (the tour) and `--serve` with kubectl, then Ctrl-C."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from people_testkit import reprs

ROOT = Path(__file__).resolve().parents[2]
LAB = [sys.executable, "-m", "dynmig.cli", "lab"]


def test_the_tour_passes_every_check_and_shows_what_a_person_would_look_at_in_words_not_python_reprs():
    done = subprocess.run(
        [*LAB, "--scenario", "tour"], cwd=ROOT, capture_output=True, text=True, timeout=180, check=False
    )
    out = done.stdout
    assert done.returncode == 0, out[-4000:] + done.stderr[-2000:]
    assert re.search(r"^### tour: PASSED — (\d+)/\1 checks passed", out, re.MULTILINE)
    assert "FAIL " not in out
    assert re.search(r"POD\s+PARENT_GPU\s+PROFILE\s+START\s+SIZE\s+MIG_UUID\s+GI\s+CI", out)
    assert "PASS  tour-1 gets a 1g.24gb on an RTX PRO 6000" in out
    assert "PASS  four 1g.24gb fill the RTX PRO 6000 at starts 0, 3, 6, 9" in out
    assert re.search(r"PASS  the reason for the full GPU speaks MIG .*not enough free slices", out)
    assert "PASS  same MIG UUIDs, GI and CI IDs after the restart" in out
    assert re.search(
        r"^  GPU \d: NVIDIA RTX PRO 6000 Blackwell Server Edition \(UUID: GPU-", out, re.MULTILINE
    )
    assert re.search(r"^    MIG 2g\.48gb +Device +\d: \(UUID: MIG-", out, re.MULTILINE)
    assert "lab stopped" in out
    assert not reprs(out + done.stderr)  # the tour is text for people (tests/lab/test_messages_for_people.py)


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(entry.name))
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "(gone)"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = (
        Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if Path(f"/proc/{pid}").exists()
        else "X"
    )
    return state != "Z"


class Output:
    """The lab's stdout, read by a thread (a pipe read must never block the test)."""

    def __init__(self, proc: subprocess.Popen):
        self.proc, self.lines = proc, []
        self.thread = threading.Thread(target=lambda: self.lines.extend(proc.stdout), daemon=True)
        self.thread.start()

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def wait_for(self, text: str, timeout: float = 90.0) -> str:
        deadline = time.monotonic() + timeout
        while text not in self.text:
            assert self.proc.poll() is None or text in self.text, (
                f"dynmig lab exited with {self.proc.returncode}:\n{self.text}"
            )
            assert time.monotonic() < deadline, f"no {text!r} after {timeout}s:\n{self.text}"
            time.sleep(0.1)
        return self.text


POD = """apiVersion: v1
kind: Pod
metadata: {name: from-kubectl}
spec:
  containers:
  - name: main
    image: cuda
    resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 8000}}
"""


def test_serve_mode_takes_kubectl_and_ctrl_c_leaves_no_process_socket_or_port_behind(tmp_path, kubectl):
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [*LAB, "--serve", "--kubeconfig-out", str(kubeconfig)],
        cwd=ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        output = Output(proc)
        seen = output.wait_for("lab running")
        children = _children(proc.pid)
        sockets = Path(re.search(r"device-plugin sockets under (\S+)\)", seen).group(1))
        serve_port = int(re.search(r"dynmig serve ready on https://127\.0\.0\.1:(\d+)", seen).group(1))
        assert len(children) == 3  # dynmig serve + one device plugin per node
        assert any(p.is_socket() for p in sockets.rglob("*.sock"))
        k = [kubectl, "--kubeconfig", str(kubeconfig)]
        nodes = subprocess.run([*k, "get", "nodes", "-o", "name"], capture_output=True, text=True, check=True)
        assert nodes.stdout.split() == ["node/gpu-a100", "node/gpu-rtx"]
        subprocess.run([*k, "create", "-f", "-"], input=POD, text=True, check=True, capture_output=True)
        deadline = time.monotonic() + 30
        phase = ""
        while phase != "Running" and time.monotonic() < deadline:
            phase = subprocess.run(
                [*k, "get", "pod", "from-kubectl", "-o", "jsonpath={.status.phase}"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            time.sleep(0.2)
        assert phase == "Running"
        profile = subprocess.run(
            [
                *k,
                "get",
                "pod",
                "from-kubectl",
                "-o",
                r"jsonpath={.metadata.annotations.hami\.io/vgpu-mig-allocations}",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert '"profile":"1g.24gb"' in profile and '"migUUID":"MIG-' in profile
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        output.thread.join(10)
        rest = output.text
    finally:
        if proc.poll() is None:  # a failed assert above: stop the lab the way a person would first
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, rest
    assert "lab stopped" in rest
    assert {p: _cmdline(p) for p in children if _alive(p)} == {}
    assert not sockets.exists()
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", serve_port)) != 0


def test_a_lab_killed_with_sigkill_takes_its_child_processes_with_it():
    tmp = tempfile.mkdtemp(prefix="lk-")  # a killed lab cannot remove its temp dirs; keep them here
    proc = subprocess.Popen(
        [*LAB, "--serve"],
        cwd=ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "TMPDIR": tmp},
    )
    output = Output(proc)
    try:
        output.wait_for("lab running")
        children = _children(proc.pid)
        assert len(children) == 3
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 20
    while any(_alive(p) for p in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert {p: _cmdline(p) for p in children if _alive(p)} == {}
    shutil.rmtree(tmp, ignore_errors=True)
