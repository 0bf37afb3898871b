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


def _run(lab: Lab, tmp_path: Path, argv: list[str]) -> str:
    env = {**os.environ, "HOME": str(tmp_path), "KUBECONFIG": str(lab.kubeconfig("admin"))}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False, env=env)
    assert done.returncode == 0, f"{' '.join(argv)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _serve_args(lab: Lab) -> list[str]:
    return [str(a) for a in lab.serve.process.args] if lab.serve is not None else []


def _published(lab: Lab, node: str) -> list[int]:
    annotations = lab.core().read_node(node).metadata.annotations or {}
    return sorted(d.index for d in decode_node_register(annotations.get(NODE_REGISTER, "[]")))


def test_helm_install_and_upgrade_on_the_lab_run_the_releases_node_config_and_serve_flags(
    lab, kubectl, tmp_path
):
    k = [kubectl, "--kubeconfig", str(lab.kubeconfig("admin"))]
    _run(lab, tmp_path, [*k, "delete", "mutatingwebhookconfiguration", "dynmig-mutating"])
    _run(lab, tmp_path, [*k, "delete", "validatingwebhookconfiguration", "dynmig-validating"])
    _run(
        lab,
        tmp_path,
        [
            *k,
            "-n",
            NAMESPACE,
            "delete",
            "deployment,daemonset,configmap",
            "-l",
            "app.kubernetes.io/instance=dynmig",
        ],
    )
    _run(lab, tmp_path, [*k, "-n", NAMESPACE, "wait", "--for=delete", "pod", "--all", "--timeout=60s"])
    serve_starts = lab.serve_starts
    nodes = [{"name": "gpu-node-1", "operatingmode": "mig", "filterdevices": {"index": [1]}}]
    helm = [helm_binary(), "-n", NAMESPACE, "--timeout", "180s"]
    _run(
        lab,
        tmp_path,
        [
            *helm,
            "install",
            "dynmig",
            str(CHART),
            "--set",
            "devicePlugin.runtimeClassName=",
            "--set-json",
            f"devicePlugin.nodeConfig={json.dumps(nodes)}",
        ],
    )
    wait_for(lambda: lab.serve_starts > serve_starts, "the release's serve pod to start dynmig serve", 90)
    # filterdevices {index: [1]}: the release's plugin publishes GPU 0 only
    assert wait_for(lambda: _published(lab, "gpu-node-1") == [0], "the plugin to publish GPU 0 only", 90)
    assert not any(
        a.startswith("--privileged-user=system:serviceaccount:kube-system") for a in _serve_args(lab)
    )

    _run(
        lab,
        tmp_path,
        [
            *helm,
            "upgrade",
            "dynmig",
            str(CHART),
            "--reuse-values",
            "--set-json",
            f"allocationWriters={json.dumps(HAMI)}",
        ],
    )
    # the Deployment rolls; its new pod's serve runs with HAMi's accounts as allocation writers
    wanted = [f"--privileged-user={user}" for user in HAMI]
    assert wait_for(
        lambda: all(w in _serve_args(lab) for w in wanted), "serve to run with allocationWriters", 90
    )
