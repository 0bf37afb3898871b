"""Every object the chart renders is valid for every supported Kubernetes release, checked against
that release's OpenAPI schemas with kubernetes-validate in strict mode (an unknown or misplaced
field fails, as `kubectl apply --validate=strict` would)."""

from __future__ import annotations

import kubernetes_validate
import pytest
from chart_testkit import CHART, KUBE_VERSIONS, helm, render

# Custom resources of cert-manager and the Prometheus Operator: no schema ships for them.
CUSTOM_KINDS = {
    ("cert-manager.io/v1", "Issuer"),
    ("cert-manager.io/v1", "Certificate"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
}
EVERYTHING_ON = (
    "metrics.serviceMonitor.enabled=true",
    "metrics.prometheusRule.enabled=true",
    "metrics.grafanaDashboard.enabled=true",
    "networkPolicy.enabled=true",
    "devicePlugin.createRuntimeClass=true",
    "devicePlugin.gpuOperatorToolkitReady.enabled=true",
    "devicePlugin.nvidiaDriverRoot=/run/nvidia/driver",
    "server.replicas=2",
    "image.digest=sha256:" + "0" * 64,
)
SETS = {"defaults": (), "everything-on": EVERYTHING_ON}


def problems(kube_version: str, docs: list[dict]) -> list[str]:
    found = []
    for doc in docs:
        name = f"{doc['kind']} {doc['metadata']['name']}"
        try:
            kubernetes_validate.validate(doc, kube_version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            if (doc["apiVersion"], doc["kind"]) not in CUSTOM_KINDS:
                found.append(f"{name}: no {doc['apiVersion']} schema in Kubernetes {kube_version}")
        except kubernetes_validate.ValidationError as error:
            path = "/".join(str(p) for p in error.path)
            found.append(f"{name}: {path}: {error.message}")
    return found


@pytest.mark.parametrize("values", SETS)
@pytest.mark.parametrize("mode", ["self", "cert-manager"])
@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_every_rendered_object_is_valid_for_the_kubernetes_release(kube_version, mode, values):
    docs = render(kube_version, f"certs.mode={mode}", *SETS[values])
    assert not problems(kube_version, docs)
    kinds = {d["kind"] for d in docs}
    assert {
        "Deployment",
        "DaemonSet",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    } <= kinds


@pytest.mark.parametrize("values", SETS)
def test_helm_lint_strict_passes_with_every_option_on(values):
    sets = [a for s in SETS[values] for a in ("--set", s)]
    done = helm("lint", "--strict", str(CHART), *sets)
    assert done.returncode == 0, done.stdout + done.stderr
