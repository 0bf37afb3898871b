"""Admission webhooks called by the simulated API server over HTTPS, verified against caBundle."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from https_testkit import JsonServer, make_pki
from kubernetes import client
from kubernetes.client.rest import ApiException

Decide = Callable[[dict], dict]


class WebhookServer(JsonServer):
    """A tiny HTTPS admission webhook: `decide(request) -> response fields`; keeps every review."""

    def __init__(self, cert: Path, key: Path, decide: Decide):
        def answer(path: str, review: dict) -> dict:
            response = {"uid": review["request"]["uid"], **decide(review["request"])}
            return {"apiVersion": review["apiVersion"], "kind": "AdmissionReview", "response": response}

        super().__init__(answer, tls=(cert, key))

    @property
    def reviews(self) -> list[dict]:
        return [review for _, review in self.calls]


@pytest.fixture
def pki(tmp_path) -> tuple[bytes, Path, Path]:
    return make_pki(tmp_path, "dynmig.dynmig.svc")


@pytest.fixture
def webhook(pki) -> Iterator[Callable[[Decide], WebhookServer]]:
    servers: list[WebhookServer] = []

    def start(decide: Decide) -> WebhookServer:
        servers.append(WebhookServer(pki[1], pki[2], decide))
        return servers[-1]

    yield start
    for s in servers:
        s.stop()


def register(
    apiserver,
    kind: str,
    name: str,
    client_config: dict,
    *,
    failure_policy: str = "Fail",
    operations=("CREATE",),
    resources=("pods",),
    extra: dict | None = None,
) -> None:
    hook = {
        "name": f"{name}.dynmig.io",
        "clientConfig": client_config,
        "failurePolicy": failure_policy,
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 5,
        "rules": [
            {
                "operations": list(operations),
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": list(resources),
            }
        ],
        **(extra or {}),
    }
    adm = client.AdmissionregistrationV1Api(apiserver.api_client("admin"))
    body = {"metadata": {"name": name}, "webhooks": [hook]}
    if kind == "mutating":
        adm.create_mutating_webhook_configuration(body)
    else:
        adm.create_validating_webhook_configuration(body)


def ca_bundle(pem: bytes) -> str:
    return base64.b64encode(pem).decode()


def patch_of(ops: list[dict]) -> dict:
    return {
        "allowed": True,
        "patchType": "JSONPatch",
        "patch": base64.b64encode(json.dumps(ops).encode()).decode(),
    }


POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"generateName": "train-", "labels": {"app": "train"}},
    "spec": {
        "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpumem": "8000"}}}]
    },
}


def test_a_mutating_webhook_behind_a_service_mutates_a_created_pod_and_sees_the_caller(
    apiserver, webhook, pki
):
    hook = webhook(
        lambda req: patch_of([{"op": "add", "path": "/spec/schedulerName", "value": "dynmig-scheduler"}])
    )
    apiserver.register_service("dynmig", "dynmig", "127.0.0.1", hook.port)
    register(
        apiserver,
        "mutating",
        "mutate",
        {
            "service": {"namespace": "dynmig", "name": "dynmig", "path": "/mutate", "port": 443},
            "caBundle": ca_bundle(pki[0]),
        },
    )
    core = client.CoreV1Api(apiserver.api_client("alice"))
    created = core.create_namespaced_pod("default", POD)
    assert created.spec.scheduler_name == "dynmig-scheduler"
    req = hook.reviews[0]["request"]
    assert hook.reviews[0]["apiVersion"] == "admission.k8s.io/v1"
    assert req["operation"] == "CREATE" and req["namespace"] == "default" and "name" not in req
    assert req["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert req["resource"] == {"group": "", "version": "v1", "resource": "pods"}
    assert req["userInfo"]["username"] == "alice"
    # The webhook sees the decoded object: quantities in canonical form, as kube-apiserver sends them.
    assert req["object"]["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpumem": "8k"}
    assert req["oldObject"] is None and req["dryRun"] is False


def test_a_validating_webhook_denial_reaches_the_client_as_the_apiserver_words_it(apiserver, webhook, pki):
    hook = webhook(lambda req: {"allowed": False, "status": {"message": "only the scheduler may set it"}})
    register(
        apiserver,
        "validating",
        "guard",
        {"url": f"https://127.0.0.1:{hook.port}/validate", "caBundle": ca_bundle(pki[0])},
        operations=("UPDATE",),
    )
    core = client.CoreV1Api(apiserver.api_client("alice"))
    core.create_namespaced_pod("default", {**POD, "metadata": {"name": "p"}})
    with pytest.raises(ApiException) as denied:
        core.patch_namespaced_pod(
            "p", "default", {"metadata": {"annotations": {"hami.io/vgpu-mig-allocations": "x"}}}
        )
    status = json.loads(denied.value.body)
    assert denied.value.status == 403
    assert (
        status["message"]
        == 'admission webhook "guard.dynmig.io" denied the request: only the scheduler may set it'
    )
    req = hook.reviews[0]["request"]
    assert req["operation"] == "UPDATE" and req["name"] == "p"
    assert req["oldObject"]["metadata"].get("annotations") is None
    assert req["object"]["metadata"]["annotations"] == {"hami.io/vgpu-mig-allocations": "x"}


@pytest.mark.parametrize("policy, admitted", [("Fail", False), ("Ignore", True)])
def test_a_wrong_ca_bundle_fails_the_call_and_the_failure_policy_decides(
    apiserver, webhook, tmp_path, policy, admitted
):
    (tmp_path / "other").mkdir()
    other_ca, _, _ = make_pki(tmp_path / "other", "x")
    hook = webhook(lambda req: {"allowed": True})
    register(
        apiserver,
        "mutating",
        "mutate",
        {"url": f"https://127.0.0.1:{hook.port}/mutate", "caBundle": ca_bundle(other_ca)},
        failure_policy=policy,
    )
    core = client.CoreV1Api(apiserver.api_client("admin"))
    if admitted:
        assert core.create_namespaced_pod("default", POD).metadata.name.startswith("train-")
    else:
        with pytest.raises(ApiException) as failed:
            core.create_namespaced_pod("default", POD)
        message = json.loads(failed.value.body)["message"]
        assert failed.value.status == 500
        assert 'failed calling webhook "mutate.dynmig.io"' in message and "certificate" in message
    assert hook.reviews == []


def test_selectors_and_rules_decide_which_requests_a_webhook_sees(apiserver, webhook, pki):
    hook = webhook(lambda req: {"allowed": True})
    register(
        apiserver,
        "validating",
        "v",
        {"url": f"https://127.0.0.1:{hook.port}/", "caBundle": ca_bundle(pki[0])},
        operations=("CREATE",),
        resources=("pods", "pods/binding"),
        extra={
            "objectSelector": {
                "matchExpressions": [{"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}]
            },
            "namespaceSelector": {"matchLabels": {"gpu": "yes"}},
        },
    )
    core = client.CoreV1Api(apiserver.api_client("admin"))
    core.create_namespace({"metadata": {"name": "gpu", "labels": {"gpu": "yes"}}})
    core.create_namespaced_pod("default", {**POD, "metadata": {"name": "elsewhere"}})
    core.create_namespaced_pod(
        "gpu", {**POD, "metadata": {"name": "skipped", "labels": {"hami.io/webhook": "ignore"}}}
    )
    core.create_namespaced_pod("gpu", {**POD, "metadata": {"name": "seen"}})
    core.patch_namespaced_pod("seen", "gpu", {"metadata": {"labels": {"x": "1"}}})
    core.create_namespaced_pod_binding(
        "seen", "gpu", {"metadata": {"name": "seen"}, "target": {"name": "n1"}}, _preload_content=False
    )
    seen = [
        (r["request"]["name"], r["request"].get("subResource", ""), r["request"]["kind"]["kind"])
        for r in hook.reviews
    ]
    assert seen == [("seen", "", "Pod"), ("seen", "binding", "Binding")]


def test_webhook_warnings_reach_the_client_and_a_v1beta1_only_webhook_gets_v1beta1(apiserver, webhook, pki):
    hook = webhook(lambda req: {"allowed": True, "warnings": ["profile 7g.96gb is large"]})
    register(
        apiserver,
        "validating",
        "warn",
        {"url": f"https://127.0.0.1:{hook.port}/", "caBundle": ca_bundle(pki[0])},
        extra={"admissionReviewVersions": ["v1beta1"]},
    )
    api = apiserver.api_client("admin")
    resp = client.CoreV1Api(api).create_namespaced_pod("default", POD, _preload_content=False)
    assert resp.headers["Warning"] == '299 - "profile 7g.96gb is large"'
    assert hook.reviews[0]["apiVersion"] == "admission.k8s.io/v1beta1"


def test_a_mutating_webhook_sees_a_defaulted_pod_and_a_limit_it_adds_gets_its_request(
    apiserver, webhook, pki
):
    hook = webhook(
        lambda req: patch_of(
            [{"op": "add", "path": "/spec/containers/0/resources/limits/nvidia.com~1gpu", "value": "1"}]
        )
    )
    apiserver.register_service("dynmig", "dynmig", "127.0.0.1", hook.port)
    service = {"namespace": "dynmig", "name": "dynmig", "path": "/mutate", "port": 443}
    register(apiserver, "mutating", "mutate", {"service": service, "caBundle": ca_bundle(pki[0])})
    created = client.CoreV1Api(apiserver.api_client("alice")).create_namespaced_pod("default", POD)
    seen = hook.reviews[0]["request"]["object"]["spec"]
    assert seen["schedulerName"] == "default-scheduler"
    assert seen["containers"][0]["resources"]["requests"] == {"nvidia.com/gpumem": "8k"}
    assert created.spec.containers[0].resources.requests == {"nvidia.com/gpumem": "8k", "nvidia.com/gpu": "1"}
