"""README's "Installing on a cluster", followed step by step: its values files are written as shown,
each `helm install` command runs as `helm template` with exactly its flags, and what it renders is
valid for Kubernetes 1.28 and 1.35 and does what the step says; the image the README builds (its
`make image` line) and pushes (its `skopeo copy` line) is the image those installs run
(tests/packaging/test_image.py builds it by running that line as written). The handover install of
docs/migrating-from-hami.md is rendered the same way. (tests/docs/test_readme_lab.py runs the
install and its check on a lab.)"""

from __future__ import annotations

import re
import shlex
import subprocess

import pytest
import yaml
from chart_testkit import CHART, ROOT, container, helm_binary, of_kind, one
from image_testkit import MAKE_IMAGE, make_image_target
from test_chart_schemas import problems

FENCE = re.compile(r"^ *```(\w+)\n(.*?)^ *```", re.DOTALL | re.MULTILINE)
README = ROOT / "README.md"
MIGRATING = ROOT / "docs" / "migrating-from-hami.md"


def section(title: str, path=README) -> str:
    text = path.read_text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def blocks(kind: str, title: str = "Installing on a cluster", path=README) -> list[str]:
    return [_dedent(body) for lang, body in FENCE.findall(section(title, path)) if lang == kind]


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


def install_commands(title: str = "Installing on a cluster", path=README) -> list[list[str]]:
    commands = []
    for body in blocks("sh", title, path):
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
    argv = [
        str(CHART) if a == "charts/dynmig" else str(ROOT / a) if a.startswith("charts/") else a for a in argv
    ]
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
    if "values-gpu-operator.yaml" in flags:  # GPU Operator 25.10+ nodes (CDI), HA
        assert spec["runtimeClassName"] == "nvidia" and not of_kind(docs, "RuntimeClass")
        assert [c["name"] for c in spec["initContainers"]] == ["toolkit-validation"]
        assert one(docs, "Deployment")["spec"]["replicas"] == 2
        args = container(daemonset, "device-plugin")["args"]
        assert {
            "--device-list-strategy=cdi",
            "--cdi-dir=/var/run/cdi",
            "--socket-name=dynmig-gpu.sock",
        } <= set(args)
    elif "createRuntimeClass=true" in flags:
        assert spec["runtimeClassName"] == one(docs, "RuntimeClass")["metadata"]["name"] == "nvidia"
    else:  # no NVIDIA runtime: NVML from the host's driver
        assert "runtimeClassName" not in spec
        plugin = container(daemonset, "device-plugin")
        assert any(m["mountPath"] == "/driver-root" for m in plugin["volumeMounts"])
        volume = next(v for v in spec["volumes"] if v["name"] == "driver-root")
        assert volume["hostPath"]["path"] == "/"


def test_the_documented_hami_handover_lets_hamis_service_accounts_write_allocations(tmp_path):
    (command,) = install_commands("Let HAMi keep working while both run", MIGRATING)
    docs = render_documented(command, "1.35", tmp_path)
    assert not problems("1.35", docs)
    policy = one(docs, "ValidatingAdmissionPolicy")["spec"]["matchConditions"][0]["expression"]
    server = container(one(docs, "Deployment"), "server")
    for account in ("hami-scheduler", "hami-device-plugin"):
        user = f"system:serviceaccount:kube-system:{account}"
        assert f"'{user}'" in policy and f"--privileged-user={user}" in server["args"]


# ---- the image: what `make image` builds and `skopeo copy` pushes is what the installs run -------------


def _lines(starting: str) -> list[str]:
    return [
        line.split(" #", 1)[0].strip()
        for body in blocks("sh")
        for line in body.replace("\\\n", " ").splitlines()
        if line.startswith(starting)
    ]


def _dynmig_images(docs: list[dict]) -> set[str]:
    """Every image the chart runs but kube-scheduler's: the server, the device plugin, the hooks."""
    images = set()
    for doc in docs:
        template = (doc.get("spec") or {}).get("template") or {}
        pod = template.get("spec") or {}
        for c in (pod.get("initContainers") or []) + (pod.get("containers") or []):
            if c["name"] != "kube-scheduler":
                images.add(c["image"])
    return images


def test_the_readme_says_what_make_image_writes():
    archive, name = make_image_target()
    (line,) = [x for body in blocks("sh") for x in body.splitlines() if x.startswith("make image")]
    assert line.split("#", 1)[0].strip() == MAKE_IMAGE  # the line tests/packaging/test_image.py runs
    comment = line.split("#", 1)[1]
    assert archive in comment and name in comment, (line, archive, name)


@pytest.mark.parametrize("step", range(len(COMMANDS)))
def test_each_documented_install_runs_the_image_make_image_builds(step, tmp_path):
    _, name = make_image_target()
    images = _dynmig_images(render_documented(COMMANDS[step], "1.35", tmp_path))
    assert images == {name}, f"{shlex.join(COMMANDS[step])} runs {images}; make image builds {name}"


@pytest.mark.parametrize("step", range(len(COMMANDS)))
def test_each_documented_install_with_the_registry_values_runs_the_image_skopeo_pushed(step, tmp_path):
    archive, _ = make_image_target()
    (push,) = _lines("skopeo copy")
    source, destination = shlex.split(push)[-2:]
    assert source == f"oci-archive:{archive}", push
    assert destination.startswith("docker://"), push
    # the README's own words for adding the registry values to an install
    (files,) = re.findall(r"`(-f my-values\.yaml -f my-registry\.yaml)`", section("Installing on a cluster"))
    command = shlex.split(shlex.join(COMMANDS[step]).replace("-f my-values.yaml", files))
    images = _dynmig_images(render_documented(command, "1.35", tmp_path))
    assert images == {destination.removeprefix("docker://")}, f"runs {images}; pushed {destination}"
