"""Certificates in the simulated API server: Secrets, injection into both webhook configurations,
an admission call verified against the injected bundle, live rotation, and the renewer."""

from __future__ import annotations

import base64
import datetime as dt
import json

import kubernetes
import pytest
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from tls_server_testkit import RunningServer
from waiting_testkit import wait_for

from certs.authority import ServiceIdentity, load_certs, utcnow
from certs.main import main
from certs.reload import SecretSource, TLSReloader
from certs.renewer import CertRenewer
from certs.rotation import Policy
from certs.store import SecretStore

NS, SERVICE = "dynmig", "dynmig"
WEBHOOK_FLAGS = ["--mutating-webhook", "dynmig-mutating", "--validating-webhook", "dynmig-validating"]


def webhook_config(kind: str, name: str, hooks: list[str], path: str) -> dict:
    entries = [
        {
            "name": hook,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "clientConfig": {"service": {"namespace": NS, "name": SERVICE, "path": path, "port": 443}},
            "rules": [
                {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
            ],
            "namespaceSelector": {"matchLabels": {"webhook-test": "on"}},
        }
        for hook in hooks
    ]
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": entries,
    }


@pytest.fixture
def cluster(apiserver):
    for ns in (NS, "apps"):
        if apiserver.get("namespaces", ns) is None:
            labels = {"webhook-test": "on"} if ns == "apps" else {}
            apiserver.create(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}}
            )
    return apiserver


@pytest.fixture
def with_webhooks(cluster):
    cluster.create(
        webhook_config(
            "MutatingWebhookConfiguration", "dynmig-mutating", ["pods.mutate.dynmig.io"], "/mutate"
        )
    )
    cluster.create(
        webhook_config(
            "ValidatingWebhookConfiguration",
            "dynmig-validating",
            ["pods.validate.dynmig.io", "device-config.validate.dynmig.io"],
            "/validate",
        )
    )
    return cluster


def certs_cli(apiserver, *args: str) -> int:
    return main(
        [*args, "--kubeconfig", str(apiserver.kubeconfig("certs")), "--namespace", NS, "--service", SERVICE]
    )


def secret_data(apiserver, name: str) -> tuple[str, dict[str, bytes]]:
    obj = apiserver.get("secrets", name, NS)
    return obj.get("type"), {k: base64.b64decode(v) for k, v in obj["data"].items()}


def ca_bundles(apiserver) -> list[bytes]:
    out = []
    for plural, name in (
        ("mutatingwebhookconfigurations", "dynmig-mutating"),
        ("validatingwebhookconfigurations", "dynmig-validating"),
    ):
        out += [
            base64.b64decode(w["clientConfig"]["caBundle"]) for w in apiserver.get(plural, name)["webhooks"]
        ]
    return out


def test_init_stores_the_pair_and_ca_in_two_secrets_and_injects_every_webhook_entry(with_webhooks, capsys):
    assert certs_cli(with_webhooks, "init", *WEBHOOK_FLAGS) == 0
    kind, tls = secret_data(with_webhooks, "dynmig-tls")
    assert kind == "kubernetes.io/tls"
    assert set(tls) == {"tls.crt", "tls.key", "ca.crt"}
    ca_kind, ca = secret_data(with_webhooks, "dynmig-ca")
    assert ca_kind == "Opaque" and set(ca) == {"ca.crt", "ca.key", "bundle.crt"}
    assert b"PRIVATE KEY" not in tls["ca.crt"]
    bundles = ca_bundles(with_webhooks)
    assert len(bundles) == 3 and all(b == tls["ca.crt"] for b in bundles)
    assert "new CA" in capsys.readouterr().out


def test_init_twice_keeps_the_valid_certificate(with_webhooks, capsys):
    assert certs_cli(with_webhooks, "init", *WEBHOOK_FLAGS) == 0
    first = secret_data(with_webhooks, "dynmig-tls")[1]["tls.crt"]
    assert certs_cli(with_webhooks, "init", *WEBHOOK_FLAGS) == 0
    assert secret_data(with_webhooks, "dynmig-tls")[1]["tls.crt"] == first
    assert "nothing changed" in capsys.readouterr().out


def test_rotate_force_issues_a_new_serving_certificate_under_the_same_ca(with_webhooks):
    assert certs_cli(with_webhooks, "init") == 0
    before = secret_data(with_webhooks, "dynmig-tls")[1]
    assert certs_cli(with_webhooks, "rotate") == 0
    assert secret_data(with_webhooks, "dynmig-tls")[1]["tls.crt"] == before["tls.crt"]  # not due
    assert certs_cli(with_webhooks, "rotate", "--force") == 0
    after = secret_data(with_webhooks, "dynmig-tls")[1]
    assert after["tls.crt"] != before["tls.crt"] and after["ca.crt"] == before["ca.crt"]


def test_inject_tolerates_one_absent_configuration_with_a_message(cluster, capsys):
    cluster.create(
        webhook_config(
            "MutatingWebhookConfiguration", "dynmig-mutating", ["pods.mutate.dynmig.io"], "/mutate"
        )
    )
    assert certs_cli(cluster, "init") == 0
    assert certs_cli(cluster, "inject", *WEBHOOK_FLAGS) == 0
    out = capsys.readouterr().out
    assert "MutatingWebhookConfiguration dynmig-mutating: caBundle patched" in out
    assert "ValidatingWebhookConfiguration dynmig-validating not found; skipped" in out


def test_inject_fails_when_no_named_configuration_exists(cluster, capsys):
    assert certs_cli(cluster, "init") == 0
    assert certs_cli(cluster, "inject", *WEBHOOK_FLAGS) == 1
    assert "not found" in capsys.readouterr().err


def test_a_secret_not_made_by_dynmig_is_never_overwritten(cluster, capsys):
    cluster.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "dynmig-tls", "namespace": NS},
            "type": "kubernetes.io/tls",
            "data": {"tls.crt": "", "tls.key": ""},
        }
    )
    assert certs_cli(cluster, "init") == 1
    assert "Secret dynmig/dynmig-tls exists but is not managed by dynmig certs" in capsys.readouterr().err


def test_show_reads_the_serving_secret(cluster, capsys):
    assert certs_cli(cluster, "init") == 0
    capsys.readouterr()
    assert certs_cli(cluster, "show") == 0
    out = capsys.readouterr().out
    assert "serving certificate (Secret dynmig/dynmig-tls, tls.crt)" in out
    assert "dynmig.dynmig.svc" in out and "CA bundle" in out


def _mutating_app() -> Starlette:
    async def mutate(request: Request):
        review = await request.json()
        patch = [{"op": "add", "path": "/metadata/labels", "value": {"mutated-by": "dynmig"}}]
        return JSONResponse(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {
                    "uid": review["request"]["uid"],
                    "allowed": True,
                    "patchType": "JSONPatch",
                    "patch": base64.b64encode(json.dumps(patch).encode()).decode(),
                },
            }
        )

    async def validate(request: Request):
        review = await request.json()
        return JSONResponse(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {"uid": review["request"]["uid"], "allowed": True},
            }
        )

    return Starlette(
        routes=[Route("/mutate", mutate, methods=["POST"]), Route("/validate", validate, methods=["POST"])]
    )


def test_the_api_server_verifies_the_webhook_with_the_injected_bundle_before_and_after_a_live_rotation(
    with_webhooks,
):
    assert certs_cli(with_webhooks, "init", *WEBHOOK_FLAGS) == 0
    core = kubernetes.client.CoreV1Api(with_webhooks.api_client("scheduler"))
    reloader = TLSReloader(
        SecretSource(core, NS, "dynmig-tls", watch_timeout=5, backoff=(0.05, 0.5)),
        required_names=[f"{SERVICE}.{NS}.svc"],
    )
    reloader.start()
    assert reloader.ready()  # read from the Secret before start() returned
    server = RunningServer(reloader, app=_mutating_app())
    server.start()
    try:
        with_webhooks.register_service(NS, SERVICE, "127.0.0.1", server.port)
        admin = kubernetes.client.CoreV1Api(with_webhooks.api_client("admin"))

        def make_pod(name: str):
            body = {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
            return admin.create_namespaced_pod("apps", body)

        assert make_pod("before").metadata.labels == {"mutated-by": "dynmig"}
        assert certs_cli(with_webhooks, "rotate", "--force", *WEBHOOK_FLAGS) == 0
        wait_for(lambda: reloader.loads == 2)
        assert make_pod("after").metadata.labels == {"mutated-by": "dynmig"}
        assert reloader.refusals == 0
    finally:
        server.stop()
        reloader.stop()


def test_the_renewer_retries_with_backoff_while_the_api_is_down_and_recovers(with_webhooks):
    assert certs_cli(with_webhooks, "init", *WEBHOOK_FLAGS) == 0
    api = with_webhooks.api_client("scheduler")
    store = SecretStore(kubernetes.client.CoreV1Api(api), NS, "dynmig-tls", "dynmig-ca")
    first = load_certs(secret_data(with_webhooks, "dynmig-tls")[1]["tls.crt"])[0]
    registry = CollectorRegistry()
    later = {"now": utcnow() + (first.not_valid_after_utc - first.not_valid_before_utc) * 0.7}  # renewal due
    renewer = CertRenewer(
        store,
        Policy(ServiceIdentity(SERVICE, NS)),
        admission_api=kubernetes.client.AdmissionregistrationV1Api(api),
        mutating="dynmig-mutating",
        validating="dynmig-validating",
        registry=registry,
        interval=0.05,
        backoff=(0.05, 0.2),
        clock=lambda: later["now"],
    )
    with_webhooks.down("503")
    renewer.start()
    try:
        wait_for(lambda: renewer.failures >= 2)
        assert registry.get_sample_value("dynmig_cert_renewal_failures_total") >= 2
        assert renewer.last_error
        with_webhooks.up()
        wait_for(lambda: renewer.failures == 0)
        wait_for(lambda: load_certs(secret_data(with_webhooks, "dynmig-tls")[1]["tls.crt"])[0] != first)
        assert registry.get_sample_value("dynmig_cert_renewals_total") >= 1
    finally:
        renewer.stop()


def test_a_renewer_that_is_not_the_leader_writes_nothing(with_webhooks):
    assert certs_cli(with_webhooks, "init") == 0
    before = with_webhooks.get("secrets", "dynmig-tls", NS)["metadata"]["resourceVersion"]
    api = with_webhooks.api_client("scheduler")
    store = SecretStore(kubernetes.client.CoreV1Api(api), NS, "dynmig-tls", "dynmig-ca")
    renewer = CertRenewer(
        store,
        Policy(ServiceIdentity(SERVICE, NS)),
        is_leader=lambda: False,
        interval=0.01,
        clock=lambda: utcnow() + dt.timedelta(days=80),
    )
    renewer.start()
    wait_for(lambda: renewer.passes >= 3)
    renewer.stop()
    assert with_webhooks.get("secrets", "dynmig-tls", NS)["metadata"]["resourceVersion"] == before
