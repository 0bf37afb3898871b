"""kubectl 1.35 with its default settings (no --validate=false, no feature-gate variables) against
`dynmig lab --serve`, the way an operator uses a cluster: create the examples, wait for Ready,
watch, delete, delete a namespace, restart a device plugin by deleting its DaemonSet pod."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sim.nvml import SimulatedNvml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
PLUGINS = "app.kubernetes.io/component=device-plugin"


class LabProcess:
    """`dynmig lab --serve` as a child, its output read by a thread, and kubectl pointed at it."""

    def __init__(self, kubectl: str, workdir: Path) -> None:
        self.workdir = workdir
        self.kubeconfig = workdir / "kubeconfig"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dynmig.cli",
                "lab",
                "--serve",
                "--kubeconfig-out",
                str(self.kubeconfig),
                "--workdir",
                str(workdir / "lab"),
            ],
            cwd=ROOT,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={k: v for k, v in os.environ.items() if not k.startswith("KUBECTL_")},
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True)
        self._reader.start()
        self.k = [kubectl, "--kubeconfig", str(self.kubeconfig)]

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_output(self, pattern: str, timeout: float = 90.0) -> re.Match:
        deadline = time.monotonic() + timeout
        while True:
            found = re.search(pattern, self.output)
            if found:
                return found
            assert self.proc.poll() is None, (
                f"dynmig lab exited with {self.proc.returncode}:\n{self.output[-4000:]}"
            )
            assert time.monotonic() < deadline, (
                f"no {pattern!r} in the lab's output after {timeout}s:\n{self.output[-4000:]}"
            )
            time.sleep(0.1)

    def kubectl(self, *args: str, check: bool = True, timeout: float = 120.0) -> subprocess.CompletedProcess:
        done = subprocess.run([*self.k, *args], capture_output=True, text=True, timeout=timeout, check=False)
        if check:
            assert done.returncode == 0, f"kubectl {' '.join(args)} exited {done.returncode}:\n{done.stderr}"
        return done

    def jsonpath(self, what: str, path: str, namespace: str = "default") -> str:
        return self.kubectl("get", "-n", namespace, what, "-o", f"jsonpath={path}").stdout

    def pod(self, name: str, namespace: str = "default") -> dict:
        return json.loads(self.kubectl("get", "-n", namespace, "pod", name, "-o", "json").stdout)

    def allocations(self, name: str, namespace: str = "default") -> list[dict]:
        text = (self.pod(name, namespace)["metadata"].get("annotations") or {}).get(
            "hami.io/vgpu-mig-allocations"
        )
        return json.loads(text) if text else []

    def instances(self) -> dict[str, tuple[str, int, int, bool]]:
        """MIG UUID -> (node, GI, CI, a process runs on it), read from every node's simulated GPUs."""
        out = {}
        for state in sorted((self.workdir / "lab" / "nodes").glob("*/nvml-state.json")):
            for gpu in SimulatedNvml(state_path=state).gpus():
                busy = {(p.gi_id, p.ci_id) for p in gpu.processes}
                for gi in gpu.gpu_instances:
                    for ci in gi.compute_instances:
                        out[ci.mig_uuid] = (
                            state.parent.name,
                            gi.gi_id,
                            ci.ci_id,
                            (gi.gi_id, ci.ci_id) in busy,
                        )
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(10)


def wait(condition, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f}s waiting for {what}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabProcess]:
    from tests.conftest import TOOLS

    kubectl = next((str(p) for p in (TOOLS / "kubectl",) if p.exists()), None)
    if kubectl is None:
        pytest.skip(f"kubectl not found in {TOOLS} (run `make tools`)")
    started = LabProcess(kubectl, tmp_path_factory.mktemp("kubectl-lab"))
    try:
        started.wait_output("lab running")
        yield started
    finally:
        started.stop()


@pytest.fixture
def kc(lab: LabProcess) -> Iterator[LabProcess]:
    """The lab, and afterwards: every pod of the default namespace deleted and every MIG instance gone."""
    yield lab
    lab.kubectl("delete", "pods,deployments", "--all", "-n", "default", "--wait=true", check=False)
    lab.kubectl("delete", "namespace", "team", "--ignore-not-found", check=False)
    wait(lambda: not lab.instances(), "every MIG instance to be reclaimed after the test", 90)


def create(lab: LabProcess, *files: str, namespace: str = "default") -> None:
    """`kubectl create -f` with kubectl's defaults (client-side validation included)."""
    args = [a for f in files for a in ("-f", str(EXAMPLES / f))]
    lab.kubectl("create", "-n", namespace, *args)


def test_kubectl_creates_the_example_pods_and_waits_until_they_are_ready(kc):
    create(kc, "pod-1g.yaml")  # first, on an empty lab: the profile below does not hang on ordering
    kc.kubectl("wait", "--for=condition=Ready", "pod/one-1g", "--timeout=90s")
    create(kc, "mixed-pair.yaml", "preference-pod.yaml")
    kc.kubectl(
        "wait", "--for=condition=Ready", "pod/pair-small", "pod/pair-large", "pod/prefers-3g", "--timeout=90s"
    )
    profiles = {
        name: [a["profile"] for a in kc.allocations(name)]
        for name in ("one-1g", "pair-small", "pair-large", "prefers-3g")
    }
    assert profiles == {
        "one-1g": ["1g.24gb"],
        "pair-small": ["1g.5gb"],
        "pair-large": ["3g.20gb"],
        "prefers-3g": ["3g.20gb"],
    }
    running = kc.instances()
    for name in profiles:
        uuid = kc.allocations(name)[0]["migUUID"]
        assert running[uuid][3], f"{name}'s workload runs on its MIG instance {uuid}"


def test_kubectl_get_events_sorted_by_last_timestamp_lists_the_labs_events(kc):
    create(kc, "pod-1g.yaml")
    kc.kubectl("wait", "--for=condition=Ready", "pod/one-1g", "--timeout=90s")
    done = kc.kubectl("get", "events", "--sort-by=.lastTimestamp")
    assert "No resources found" not in done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if "pod/one-1g" in line]
    assert any("Scheduled" in row for row in rows), done.stdout


def test_kubectl_delete_returns_once_the_pod_is_gone_and_its_instance_is_destroyed(kc):
    create(kc, "pod-1g.yaml")
    kc.kubectl("wait", "--for=condition=Ready", "pod/one-1g", "--timeout=90s")
    uuid = kc.allocations("one-1g")[0]["migUUID"]
    kc.kubectl("delete", "pod", "one-1g", timeout=60)  # kubectl waits for the pod to be gone
    assert kc.kubectl("get", "pod", "one-1g", check=False).returncode != 0
    wait(lambda: uuid not in kc.instances(), f"{uuid} to be destroyed")


def test_kubectl_force_delete_stops_the_workload_and_its_instance_is_destroyed(kc):
    create(kc, "pod-1g.yaml")
    kc.kubectl("wait", "--for=condition=Ready", "pod/one-1g", "--timeout=90s")
    uuid = kc.allocations("one-1g")[0]["migUUID"]
    assert kc.instances()[uuid][3]
    kc.kubectl("delete", "pod", "one-1g", "--force", "--grace-period=0")
    wait(lambda: uuid not in kc.instances(), f"{uuid} to be destroyed once the kubelet stopped the workload")
    assert not any(busy for *_, busy in kc.instances().values())


def test_kubectl_get_watch_shows_the_pod_become_running(kc):
    watch = subprocess.Popen(
        [
            *kc.k,
            "get",
            "pods",
            "-w",
            "--no-headers",
            "-o",
            "custom-columns=NAME:.metadata.name,PHASE:.status.phase",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen: list[list[str]] = []
    reader = threading.Thread(target=lambda: seen.extend(line.split() for line in watch.stdout), daemon=True)
    reader.start()
    try:
        time.sleep(1)  # the watch is open before the pod exists (no assert rests on this)
        create(kc, "pod-1g.yaml")
        wait(lambda: ["one-1g", "Running"] in seen, "the watch to show one-1g Running")
    finally:
        watch.kill()
        watch.wait()
    assert seen.index(["one-1g", "Pending"]) < seen.index(["one-1g", "Running"]), seen


def test_kubectl_creates_the_example_deployment_and_deleting_it_frees_its_instances(kc):
    create(kc, "deployment.yaml")
    kc.kubectl("rollout", "status", "deployment/inference", "--timeout=90s")
    names = kc.jsonpath("pods", "{.items[*].metadata.name}").split()
    inference = [n for n in names if n.startswith("inference-")]
    assert len(inference) == 2
    uuids = {kc.allocations(n)[0]["migUUID"] for n in inference}
    assert len(uuids) == 2 and uuids <= set(kc.instances())
    kc.kubectl("delete", "deployment", "inference")
    wait(
        lambda: not kc.jsonpath("pods", "{.items[*].metadata.name}").strip(),
        "the Deployment's pods to be gone",
    )
    wait(lambda: not uuids & set(kc.instances()), "the Deployment's instances to be destroyed")


def test_deleting_a_namespace_with_gpu_pods_destroys_their_instances(kc):
    kc.kubectl("create", "namespace", "team")
    create(kc, "pod-1g.yaml", "mixed-pair.yaml", namespace="team")
    kc.kubectl(
        "wait",
        "-n",
        "team",
        "--for=condition=Ready",
        "pod/one-1g",
        "pod/pair-small",
        "pod/pair-large",
        "--timeout=90s",
    )
    uuids = {kc.allocations(n, "team")[0]["migUUID"] for n in ("one-1g", "pair-small", "pair-large")}
    assert uuids <= set(kc.instances())
    kc.kubectl("delete", "namespace", "team", timeout=90)
    wait(lambda: not uuids & set(kc.instances()), "the namespace's MIG instances to be destroyed")
    assert kc.kubectl("get", "namespace", "team", check=False).returncode != 0


def _plugin_pods(kc) -> dict[str, str]:
    """node -> name of the device-plugin pod there, for pods that are Ready and not being deleted."""
    pods = json.loads(kc.kubectl("get", "pods", "-n", "dynmig", "-l", PLUGINS, "-o", "json").stdout)["items"]
    return {
        p["spec"]["nodeName"]: p["metadata"]["name"]
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
        and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
    }


def test_kubectl_delete_pod_restarts_the_device_plugins_which_adopt_the_running_instances(kc):
    create(kc, "pod-1g.yaml", "mixed-pair.yaml")
    kc.kubectl(
        "wait", "--for=condition=Ready", "pod/one-1g", "pod/pair-small", "pod/pair-large", "--timeout=90s"
    )
    before = kc.instances()
    old = wait(
        lambda: _plugin_pods(kc) if len(_plugin_pods(kc)) == 2 else None, "two Ready device-plugin pods"
    )
    kc.kubectl("delete", "pod", "-n", "dynmig", "-l", PLUGINS, timeout=90)
    new = wait(
        lambda: (p := _plugin_pods(kc)) and len(p) == 2 and not set(p.values()) & set(old.values()) and p,
        "new device-plugin pods (new names) to be Ready",
    )
    assert set(new) == set(old) == {"gpu-a100", "gpu-rtx"}
    assert kc.instances() == before  # same MIG UUIDs, GI and CI IDs, workloads still running
    for node in new:
        kc.wait_output(rf"{node}: dynmig/{new[node]} Ready")
    for node in new:
        log = (kc.workdir / "lab" / "logs" / f"device-plugin-{node}.log").read_text()
        running_there = sum(1 for where, *_ in before.values() if where == node)
        last = "startup: busy=" + log.split("startup: busy=")[-1].splitlines()[0]  # the new plugin's
        assert f" adopted={running_there} " in last, f"{node}: {last}"
    create(kc, "preference-pod.yaml")  # the new plugins serve new pods too
    kc.kubectl("wait", "--for=condition=Ready", "pod/prefers-3g", "--timeout=90s")


def _plugin_pid(kc, node: str) -> int:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if (
                b"device-plugin" in argv
                and f"--node-name={node}".encode() in argv
                and str(kc.workdir).encode() in b" ".join(argv)
            ):
                return int(entry.name)
    raise AssertionError(f"no device-plugin process for {node}")


def test_a_device_plugin_killed_with_sigkill_is_restarted_in_its_pod_and_the_lab_says_so(kc):
    create(kc, "pod-1g.yaml")
    kc.kubectl("wait", "--for=condition=Ready", "pod/one-1g", "--timeout=90s")
    before = kc.instances()
    pod = _plugin_pods(kc)["gpu-rtx"]
    os.kill(_plugin_pid(kc, "gpu-rtx"), signal.SIGKILL)
    kc.wait_output(rf"gpu-rtx: device-plugin of dynmig/{pod} exited \(signal 9\); restarting in \d")
    kc.kubectl("wait", "-n", "dynmig", "--for=condition=Ready", f"pod/{pod}", "--timeout=90s")
    wait(
        lambda: kc.jsonpath(f"pod/{pod}", "{.status.containerStatuses[0].restartCount}", "dynmig") == "1",
        "restartCount 1",
    )
    wait(lambda: _plugin_pods(kc).get("gpu-rtx") == pod, "the same pod Ready again")
    assert kc.instances() == before


def test_kubectl_logs_shows_a_workloads_mig_device_and_a_device_plugins_output(kc):
    create(kc, "pod-1g.yaml")
    kc.kubectl("wait", "--for=condition=Ready", "pod/one-1g", "--timeout=90s")
    uuid = kc.allocations("one-1g")[0]["migUUID"]
    assert f"NVIDIA_VISIBLE_DEVICES={uuid}; working" in kc.kubectl("logs", "one-1g").stdout
    plugin = _plugin_pods(kc)["gpu-rtx"]
    assert "registered nvidia.com/gpu with kubelet" in kc.kubectl("logs", "-n", "dynmig", plugin).stdout


def test_kubectl_delete_pod_restarts_dynmig_serve_from_its_deployment_and_pods_are_scheduled_again(kc):
    selector = "app.kubernetes.io/component=scheduler"
    old = kc.jsonpath("pods", "{.items[*].metadata.name}", "dynmig").split()
    old = [n for n in old if n.startswith("dynmig-scheduler-")]
    assert len(old) == 1
    kc.kubectl("delete", "pod", "-n", "dynmig", "-l", selector, timeout=90)

    def ready_replacement() -> str | None:
        pods = json.loads(kc.kubectl("get", "pods", "-n", "dynmig", "-l", selector, "-o", "json").stdout)[
            "items"
        ]
        return next(
            (
                p["metadata"]["name"]
                for p in pods
                if p["metadata"]["name"] not in old
                and any(
                    c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", [])
                )
            ),
            None,
        )

    new = wait(ready_replacement, "a new dynmig serve pod (new name) to be Ready", 90)
    kc.kubectl("rollout", "status", "-n", "dynmig", "deployment/dynmig-scheduler", "--timeout=90s")
    kc.wait_output(rf"dynmig/{new} Ready")
    create(kc, "pod-1g.yaml")
    kc.kubectl("wait", "--for=condition=Ready", "pod/one-1g", "--timeout=90s")
    assert [a["profile"] for a in kc.allocations("one-1g")] == ["1g.24gb"]
