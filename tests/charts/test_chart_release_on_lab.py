"""A helm release on the lab runs what it renders, as on a cluster: once the lab's own install is
removed (as docs/lab.md's rehearsal does), `helm install` and `helm upgrade` of charts/dynmig start
`dynmig serve` and the device plugins with the release's flags and ConfigMaps, so the values an
operator brings (a node's filterdevices, allocationWriters) take effect."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from chart_testkit import CHART, helm_binary
from lab.cluster import Lab
from lab.nodes import parse_nodes
from waiting_testkit import wait_for

from mig.annotations import NODE_REGISTER, decode_node_register

PLUGINS = "app.kubernetes.io/component=device-plugin"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

NAMESPACE = "dynmig"
pytestmark = pytest.mark.timeout(600)
HAMI = [
    "system:serviceaccount:kube-system:hami-scheduler",
    "system:serviceaccount:kube-system:hami-device-plugin",
]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    helm_binary()  # skips without helm
    started = Lab(parse_nodes("gpu-node-1=2xA100-SXM4-40GB"), tmp_path_factory.mktemp("release-lab")).start()
    try:
        yield started
    finally:
        started.stop()


class Release:
    """The `dynmig` release on the lab, installed once the lab's own install is removed."""

    def __init__(self, lab: Lab, kubectl: str, home: Path) -> None:
        self.lab, self.home = lab, home
        self.kubectl = [kubectl, "--kubeconfig", str(lab.kubeconfig("admin"))]
        self.helm = [helm_binary(), "-n", NAMESPACE, "--timeout", "180s"]

    def run(self, argv: list[str]) -> str:
        env = {**os.environ, "HOME": str(self.home), "KUBECONFIG": str(self.lab.kubeconfig("admin"))}
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False, env=env)
        assert done.returncode == 0, f"{' '.join(argv)}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def upgrade(self, *values: str) -> None:
        self.run([*self.helm, "upgrade", "dynmig", str(CHART), "--reuse-values", *values])


@pytest.fixture(scope="module")
def release(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Release:
    """docs/lab.md's rehearsal: the lab's own install removed, then `helm install` with a node config
    whose filterdevices keep GPU 1 of gpu-node-1 out."""
    from tests.conftest import TOOLS

    kubectl = TOOLS / "kubectl"
    if not kubectl.exists():
        pytest.skip(f"kubectl not found in {TOOLS} (run `make tools`)")
    r = Release(lab, str(kubectl), tmp_path_factory.mktemp("release-home"))
    r.run([*r.kubectl, "delete", "mutatingwebhookconfiguration", "dynmig-mutating"])
    r.run([*r.kubectl, "delete", "validatingwebhookconfiguration", "dynmig-validating"])
    r.run(
        [
            *r.kubectl,
            "-n",
            NAMESPACE,
            "delete",
            "deployment,daemonset,configmap",
            "-l",
            "app.kubernetes.io/instance=dynmig",
        ]
    )
    r.run([*r.kubectl, "-n", NAMESPACE, "wait", "--for=delete", "pod", "--all", "--timeout=60s"])
    starts = lab.serve_starts
    nodes = [{"name": "gpu-node-1", "operatingmode": "mig", "filterdevices": {"index": [1]}}]
    r.run(
        [
            *r.helm,
            "install",
            "dynmig",
            str(CHART),
            "--set",
            "devicePlugin.runtimeClassName=",
            "--set-json",
            f"devicePlugin.nodeConfig={json.dumps(nodes)}",
        ]
    )
    wait_for(lambda: lab.serve_starts > starts, "the release's serve pod to start dynmig serve", 90)
    return r


def _serve_args(lab: Lab) -> list[str]:
    return [str(a) for a in lab.serve.process.args] if lab.serve is not None else []


def _published(lab: Lab, node: str) -> list[int]:
    annotations = lab.core().read_node(node).metadata.annotations or {}
    return sorted(d.index for d in decode_node_register(annotations.get(NODE_REGISTER, "[]")))


def test_the_releases_filterdevices_keep_a_gpu_out_of_the_device_plugins_hands(lab, release):
    assert wait_for(lambda: _published(lab, "gpu-node-1") == [0], "the plugin to publish GPU 0 only", 90)


def test_a_helm_upgrade_with_allocation_writers_reaches_the_running_serve(lab, release):
    release.upgrade("--set-json", f"allocationWriters={json.dumps(HAMI)}")
    # the Deployment rolls; its new pod's serve runs with HAMi's accounts as allocation writers
    wanted = [f"--privileged-user={user}" for user in HAMI]
    assert wait_for(
        lambda: all(w in _serve_args(lab) for w in wanted), "serve to run with allocationWriters", 90
    )


def test_a_helm_upgrade_of_the_scheduler_name_reaches_kube_scheduler_and_serve(lab, release):
    """The migration guide's step 3 (`--set schedulerName=hami-scheduler`): the rolled serve pod's
    kube-scheduler reads the release's scheduler config, so a GPU pod its webhook names
    hami-scheduler is scheduled and runs."""
    release.upgrade("--set", "schedulerName=hami-scheduler")
    wait_for(
        lambda: "--scheduler-name=hami-scheduler" in _serve_args(lab), "serve to run as hami-scheduler", 90
    )
    # the README's check: the scheduler rolled out, the plugins ready, then the canary pod
    release.run(
        [
            *release.kubectl,
            "-n",
            NAMESPACE,
            "rollout",
            "status",
            "deployment/dynmig-scheduler",
            "--timeout=90s",
        ]
    )
    release.run(
        [
            *release.kubectl,
            "-n",
            NAMESPACE,
            "wait",
            "--for=condition=Ready",
            "pod",
            "-l",
            PLUGINS,
            "--timeout=90s",
        ]
    )
    release.run([*release.kubectl, "create", "-f", str(EXAMPLES / "pod-1g.yaml")])
    release.run([*release.kubectl, "wait", "--for=condition=Ready", "pod/one-1g", "--timeout=90s"])
    pod = lab.core().read_namespaced_pod("one-1g", "default")
    assert pod.spec.scheduler_name == "hami-scheduler" and pod.spec.node_name == "gpu-node-1"
