"""helm 4 with its default flags (server-side apply, hooks waited on) installs, upgrades and uninstalls
charts/dynmig on a running lab, through the admin kubeconfig the lab writes, as a user does against
`dynmig lab --serve`. Nothing in the test writes a Job's status: the lab's Job controller makes each
certificate hook's pod, the lab's kubelet runs its container as a real `dynmig certs init|inject`
process as the pod's service account, and the pod's exit completes the Job, which helm waits on and
then deletes (hook-delete-policy before-hook-creation,hook-succeeded)."""

from __future__ import annotations

import base64
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import kubernetes
import pytest
from chart_testkit import CHART, helm_binary
from cryptography import x509
from lab.cluster import Lab
from lab.nodes import parse_nodes
from waiting_testkit import wait_for

NAMESPACE = "dynmig"  # the lab's release namespace; the test's release has other names
RELEASE = "lab"
HOOK_JOBS = (f"{RELEASE}-dynmig-certs-init", f"{RELEASE}-dynmig-certs-inject")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    helm_binary()  # skips without helm
    started = Lab(parse_nodes("gpu-a=1xA100-SXM4-40GB"), tmp_path_factory.mktemp("helm4-lab")).start()
    try:
        yield started
    finally:
        started.stop()


def _helm(lab: Lab, tmp_path: Path, *args: str, ok: bool = True) -> str:
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(tmp_path / "helm-cache"),
        "HELM_CONFIG_HOME": str(tmp_path / "helm-config"),
        "HELM_DATA_HOME": str(tmp_path / "helm-data"),
        "KUBECONFIG": str(lab.kubeconfig("admin")),
    }
    done = subprocess.run(
        [helm_binary(), *args, "--namespace", NAMESPACE, "--timeout", "180s"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env=env,
    )
    assert (done.returncode == 0) == ok, done.stderr
    return done.stdout if ok else done.stderr


def _hook_logs(lab: Lab, job: str) -> list[str]:
    """What each hook pod's `dynmig certs` process printed, one entry per pod, oldest first (the lab
    keeps each child's log after its pod is gone)."""
    logs = (lab.workdir / "logs").glob(f"job-{NAMESPACE}-{job}-*.log")
    return [p.read_text() for p in sorted(logs, key=lambda p: p.stat().st_mtime_ns)]


def _hook_pods(core: kubernetes.client.CoreV1Api) -> list[str]:
    pods = core.list_namespaced_pod(NAMESPACE, label_selector="app.kubernetes.io/component=certs").items
    return [p.metadata.name for p in pods if p.metadata.labels.get("app.kubernetes.io/instance") == RELEASE]


def test_helm4_installs_upgrades_and_uninstalls_the_chart_on_a_running_lab(lab, tmp_path):
    api = lab.apiserver
    assert api is not None
    core = lab.core()
    out = _helm(lab, tmp_path, "install", RELEASE, str(CHART))
    assert "STATUS: deployed" in out

    # the first pre-install hook checked the device config as serve will
    (check,) = _hook_logs(lab, f"{RELEASE}-dynmig-device-config-check")
    assert "$DYNMIG_DEVICE_CONFIG_TEXT: ok" in check, check
    # the pre-install hook's pod ran the real `dynmig certs init`, which wrote both Secrets
    init, inject = (_hook_logs(lab, job) for job in HOOK_JOBS)
    assert len(init) == 1 and "init: new CA" in init[0] and "init: new serving certificate" in init[0], init
    tls = core.read_namespaced_secret(f"{RELEASE}-dynmig-tls", NAMESPACE).data
    ca = core.read_namespaced_secret(f"{RELEASE}-dynmig-ca", NAMESPACE).data
    cert = x509.load_pem_x509_certificate(base64.b64decode(tls["tls.crt"]))
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"{RELEASE}-dynmig.{NAMESPACE}.svc" in names.get_values_for_type(x509.DNSName)
    # the post-install hook's pod ran `dynmig certs inject`: the webhooks trust that CA
    assert len(inject) == 1, inject
    hooks = kubernetes.client.AdmissionregistrationV1Api(lab.api_client())
    mutating = hooks.read_mutating_webhook_configuration(f"{RELEASE}-dynmig-mutating")
    assert base64.b64decode(mutating.webhooks[0].client_config.ca_bundle) == base64.b64decode(ca["ca.crt"])
    # hook-succeeded: helm deleted both Jobs; the garbage collector then deletes their pods
    for job in HOOK_JOBS:
        assert api.get("jobs", job, NAMESPACE) is None
    wait_for(lambda: not _hook_pods(core), "the hook pods to be garbage collected")
    role = api.get("clusterroles", f"{RELEASE}-dynmig-server")
    assert [(e["manager"], e["operation"]) for e in role["metadata"]["managedFields"]] == [("helm", "Apply")]

    _helm(
        lab,
        tmp_path,
        "upgrade",
        RELEASE,
        str(CHART),
        "--set",
        "server.replicas=2",
        "--set",
        "networkPolicy.enabled=true",
    )
    assert api.get("deployments", f"{RELEASE}-dynmig-scheduler", NAMESPACE)["spec"]["replicas"] == 2
    init, inject = (_hook_logs(lab, job) for job in HOOK_JOBS)
    assert (len(init), len(inject)) == (2, 2), "pre-upgrade and post-upgrade hooks, recreated, ran again"
    assert f"certificates in {NAMESPACE}/{RELEASE}-dynmig-tls are valid and not due" in init[1], init[1]
    assert api.get("networkpolicies", f"{RELEASE}-dynmig-scheduler", NAMESPACE) is not None

    _helm(lab, tmp_path, "uninstall", RELEASE)
    assert api.get("clusterroles", f"{RELEASE}-dynmig-server") is None
    assert api.get("deployments", f"{RELEASE}-dynmig-scheduler", NAMESPACE) is None


def test_helm_install_of_a_policy_serve_would_refuse_fails_naming_the_field(lab, tmp_path):
    # "H100-SXM5" is in no GPU's NVML name: with nothing else, no GPU would publish a profile (an error)
    bad = [
        "--set=deviceConfig.allowlist[0].models[0]=H100-SXM5",
        "--set=deviceConfig.allowlist[0].profiles[0]=1g.10gb",
    ]
    failed = _helm(lab, tmp_path, "install", "bad", str(CHART), *bad, ok=False)
    assert "bad-dynmig-device-config-check" in failed, failed
    (check,) = _hook_logs(lab, "bad-dynmig-device-config-check")
    assert "nvidia.migProfileAllowlist: matches no GPU model" in check, check
    api = lab.apiserver
    assert api is not None
    assert api.get("deployments", "bad-dynmig-scheduler", NAMESPACE) is None  # nothing was installed
    assert api.get("secrets", "bad-dynmig-tls", NAMESPACE) is None  # the check ran before the certificates
    _helm(lab, tmp_path, "uninstall", "bad")
