"""README's "Installing on a cluster", followed step by step: its values files are written as shown,
each `helm install` command runs as `helm template` with exactly its flags, and what it renders is
valid for Kubernetes 1.28 and 1.35 and does what the step says."""

from __future__ import annotations

import re
import shlex
import subprocess

import pytest
import yaml
from chart_testkit import CHART, ROOT, container, helm_binary, of_kind, one
from test_chart_schemas import problems

FENCE = re.compile(r"^ *```(\w+)\n(.*?)^ *```", re.DOTALL | re.MULTILINE)


def section(title: str) -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index(f"## {title}\n")
    return text[start : text.index("\n## ", start + 1)]


def blocks(kind: str, title: str = "Installing on a cluster") -> list[str]:
    return [_dedent(body) for lang, body in FENCE.findall(section(title)) if lang == kind]


def _dedent(body: str) -> str:
    lines = body.splitlines()
    indent = min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
    return "\n".join(line[indent:] for line in lines) + "\n"


def values_files() -> dict[str, str]:
    """YAML blocks whose first line is `# <file name>`."""
    files = {}
    for body in blocks("yaml"):
        first = body.splitlines()[0]
        if first.startswith("# ") and first.endswith((".yaml", ".yml")):
            files[first[2:].strip()] = body
    return files


def install_commands(title: str = "Installing on a cluster") -> list[list[str]]:
    commands = []
    for body in blocks("sh", title):
        for command in body.replace("\\\n", " ").splitlines():
            if command.startswith("helm install"):
                commands.append(shlex.split(command))
    return commands


COMMANDS = install_commands()


def test_the_install_section_has_values_files_and_install_commands():
    assert "my-values.yaml" in values_files()
    assert len(COMMANDS) == 3
    assert all("-f my-values.yaml" in shlex.join(c) for c in COMMANDS)


def render_documented(command: list[str], kube_version: str, workdir) -> list[dict]:
    assert command[:2] == ["helm", "install"]
    argv = [helm_binary(), "template", *command[2:], "--kube-version", kube_version]
    argv = [str(CHART) if a == "charts/dynmig" else a for a in argv]
    for name, body in values_files().items():
        (workdir / name).write_text(body)
    done = subprocess.run(argv, cwd=workdir, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"{shlex.join(command)}:\n{done.stderr}"
    return [d for d in yaml.safe_load_all(done.stdout) if d]


@pytest.mark.parametrize("kube_version", ["1.28", "1.35"])
@pytest.mark.parametrize("step", range(len(COMMANDS)))
def test_each_documented_install_renders_valid_objects_that_do_what_the_step_says(
    step, kube_version, tmp_path
):
    command = COMMANDS[step]
    docs = render_documented(command, kube_version, tmp_path)
    assert not problems(kube_version, docs)
    daemonset = one(docs, "DaemonSet")
    spec = daemonset["spec"]["template"]["spec"]
    nodes = {
        n["name"]: n
        for n in yaml.safe_load(one(docs, "ConfigMap", "-node-config")["data"]["config.json"])["nodeconfig"]
    }
    assert {n["operatingmode"] for n in nodes.values()} == {"mig"}
    assert nodes["gpu-node-2"]["filterdevices"]["index"] == [3]
    flags = shlex.join(command)
    if "gpuOperatorToolkitReady.enabled=true" in flags:  # GPU Operator nodes, HA
        assert spec["runtimeClassName"] == "nvidia" and not of_kind(docs, "RuntimeClass")
        assert [c["name"] for c in spec["initContainers"]] == ["toolkit-validation"]
        assert one(docs, "Deployment")["spec"]["replicas"] == 2
    elif "createRuntimeClass=true" in flags:
        assert spec["runtimeClassName"] == one(docs, "RuntimeClass")["metadata"]["name"] == "nvidia"
    else:  # no NVIDIA runtime: NVML from the host's driver
        assert "runtimeClassName" not in spec
        plugin = container(daemonset, "device-plugin")
        assert any(m["mountPath"] == "/driver-root" for m in plugin["volumeMounts"])
        volume = next(v for v in spec["volumes"] if v["name"] == "driver-root")
        assert volume["hostPath"]["path"] == "/"


def test_the_documented_hami_handover_lets_hamis_service_accounts_write_allocations(tmp_path):
    (command,) = install_commands("Migrating from HAMi")
    docs = render_documented(command, "1.35", tmp_path)
    assert not problems("1.35", docs)
    policy = one(docs, "ValidatingAdmissionPolicy")["spec"]["matchConditions"][0]["expression"]
    server = container(one(docs, "Deployment"), "server")
    for account in ("hami-scheduler", "hami-device-plugin"):
        user = f"system:serviceaccount:kube-system:{account}"
        assert f"'{user}'" in policy and f"--privileged-user={user}" in server["args"]
