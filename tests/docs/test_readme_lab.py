"""The README's lab session and its cluster install, typed as a newcomer types them, on `dynmig lab`.

Every command comes from a fenced block of README.md or docs/lab.md (docs_testkit says how a block
is run); nothing here retypes one. What a newcomer would look at is asserted on what the commands
printed, plus what helm left in the cluster.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest
from docs_testkit import ROOT, Reader, blocks, require_tools, section, shell_lines, values_files
from waiting_testkit import eventually

README = ROOT / "README.md"
LAB_DOC = ROOT / "docs" / "lab.md"
pytestmark = pytest.mark.timeout(600)


@pytest.fixture
def reader(tmp_path):
    require_tools()
    person = Reader(tmp_path)
    try:
        yield person
    finally:
        person.stop()


def _allocations(printed: str) -> list[dict]:
    """The allocation annotation kubectl printed (jsonpath prints no newline after it)."""
    start = printed.index('[{"containerIndex"')
    return json.JSONDecoder().raw_decode(printed, start)[0]


def test_the_readmes_lab_session_runs_as_written_and_the_pod_gets_a_mig_device(reader):
    (block,) = blocks(section(README, "A pod on the lab, with kubectl"), "sh")
    printed = reader.run(shell_lines(block))
    assert "pod/one-1g condition met" in printed, printed
    (allocation,) = _allocations(printed)
    assert allocation["migUUID"].startswith("MIG-") and allocation["profile"] == "1g.24gb", allocation
    assert "NODE gpu-rtx" in printed and "default/one-1g" in printed, printed  # kubectl dynmig status


def _install_without_a_runtime() -> str:
    """The README's `helm install` for nodes without an NVIDIA runtime: the one the lab can run (it
    serves no RuntimeClass API and has no GPU Operator to write toolkit-ready)."""
    installing = section(README, "Installing")
    commands = [
        line
        for body in blocks(installing, "sh")
        for line in shell_lines(body)
        if line.startswith("helm install") and "devicePlugin.runtimeClassName=" in line
    ]
    assert len(commands) == 1, commands
    return commands[0]


def test_the_readmes_cluster_install_runs_as_written_on_the_lab_to_a_running_pod(reader):
    rehearsal = section(LAB_DOC, "Rehearsing the cluster install")
    (prepare,) = blocks(rehearsal, "sh")
    installing = section(README, "Installing")
    check = next(b for b in blocks(installing, "sh") if "rollout status" in b)
    reader.write(values_files(installing))
    assert (reader.home / "my-values.yaml").exists()
    printed = reader.run([*shell_lines(prepare), _install_without_a_runtime(), *shell_lines(check)])

    assert "STATUS: deployed" in printed, printed
    assert 'deployment "dynmig-scheduler" successfully rolled out' in printed, printed
    assert "pod/one-1g condition met" in printed, printed
    assert re.search(r'pod "one-1g" deleted', printed), printed
    # what runs is helm's release, not the lab's own objects: helm made the Deployment and the
    # DaemonSet, and its certificate hooks ran as real `dynmig certs` processes
    kubeconfig = str(reader.home / "kc")
    kubectl = str(ROOT / ".cache" / "tools" / "kubectl")
    for kind in ("deployment/dynmig-scheduler", "daemonset/dynmig-device-plugin"):
        manager = subprocess.run(
            [
                kubectl,
                "--kubeconfig",
                kubeconfig,
                "-n",
                "dynmig",
                "get",
                kind,
                "-o",
                r"jsonpath={.metadata.labels.app\.kubernetes\.io/managed-by}",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        assert manager == "Helm", (kind, manager)
    lab = reader.lab_log.read_text()
    assert "dynmig certs init" in lab and "dynmig certs inject" in lab, reader.lab_tail()
    # the values the reader brought run: gpu-node-2's plugin publishes GPUs 0-2, GPU 3 stays out
    # (my-values.yaml's filterdevices: {index: [3]})
    published = eventually(lambda: _published_gpus(kubectl, kubeconfig, "gpu-node-2") == [0, 1, 2], 60, 0.5)
    assert published, _published_gpus(kubectl, kubeconfig, "gpu-node-2")


def _published_gpus(kubectl: str, kubeconfig: str, node: str) -> list[int]:
    """The GPU indexes the node's device plugin registered (hami.io/node-nvidia-register)."""
    text = subprocess.run(
        [
            kubectl,
            "--kubeconfig",
            kubeconfig,
            "get",
            "node",
            node,
            "-o",
            r"jsonpath={.metadata.annotations.hami\.io/node-nvidia-register}",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    return sorted(int(gpu.get("index", 0)) for gpu in json.loads(text or "[]"))
