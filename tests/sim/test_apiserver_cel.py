"""CEL in the simulated API server: webhook matchConditions and ValidatingAdmissionPolicies, seen
through the official client as a real cluster would show them."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.sim.https_testkit import JsonServer, make_pki

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p"},
    "spec": {"containers": [{"name": "c", "image": "x"}]},
}
GPU_LABEL = "has(object.metadata.labels) && 'gpu' in object.metadata.labels"


def pod(name: str, labels: dict | None = None, annotations: dict | None = None) -> dict:
    meta: dict = {"name": name}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {**POD, "metadata": meta}


def allow_all(path: str, review: dict) -> dict:
    """A validating webhook that admits everything (the tests count what it is sent)."""
    return {
        "apiVersion": review["apiVersion"],
        "kind": "AdmissionReview",
        "response": {"uid": review["request"]["uid"], "allowed": True},
    }


def reviews(server: JsonServer) -> list[dict]:
    return [body for _, body in server.calls]


def ca_bundle(pem: bytes) -> str:
    return base64.b64encode(pem).decode()


@pytest.fixture
def counting_webhook(tmp_path) -> Iterator[tuple[JsonServer, bytes]]:
    ca, crt, key = make_pki(tmp_path, "hook.test.svc")
    server = JsonServer(allow_all, tls=(crt, key))
    yield server, ca
    server.stop()


def register_validating(
    apiserver, hook: JsonServer, ca: bytes, conditions: list[dict], failure_policy: str = "Fail"
) -> None:
    adm = client.AdmissionregistrationV1Api(apiserver.api_client("admin"))
    adm.create_validating_webhook_configuration(
        {
            "metadata": {"name": "v"},
            "webhooks": [
                {
                    "name": "v.dynmig.io",
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "failurePolicy": failure_policy,
                    "clientConfig": {
                        "url": f"https://127.0.0.1:{hook.port}/validate",
                        "caBundle": ca_bundle(ca),
                    },
                    "rules": [
                        {
                            "operations": ["CREATE", "UPDATE"],
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "resources": ["pods"],
                        }
                    ],
                    "matchConditions": conditions,
                }
            ],
        }
    )


def register_policy(
    apiserver,
    validations: list[dict],
    actions: list[str],
    *,
    conditions=None,
    variables=None,
    failure_policy: str = "Fail",
    match_resources: dict | None = None,
) -> None:
    adm = client.AdmissionregistrationV1Api(apiserver.api_client("admin"))
    spec: dict = {
        "failurePolicy": failure_policy,
        "validations": validations,
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": ["pods"],
                }
            ]
        },
    }
    if conditions:
        spec["matchConditions"] = conditions
    if variables:
        spec["variables"] = variables
    adm.create_validating_admission_policy({"metadata": {"name": "names"}, "spec": spec})
    binding: dict = {"policyName": "names", "validationActions": actions}
    if match_resources:
        binding["matchResources"] = match_resources
    adm.create_validating_admission_policy_binding({"metadata": {"name": "names-binding"}, "spec": binding})


def denial(call) -> tuple[int, dict]:
    with pytest.raises(ApiException) as denied:
        call()
    return denied.value.status, json.loads(denied.value.body)


# ---- webhook matchConditions ---------------------------------------------------------------------
def test_a_webhook_is_called_only_for_requests_all_its_match_conditions_accept(apiserver, counting_webhook):
    hook, ca = counting_webhook
    register_validating(
        apiserver,
        hook,
        ca,
        [
            {"name": "gpu-pods", "expression": GPU_LABEL},
            {
                "name": "not-the-scheduler",
                "expression": "request.userInfo.username != 'system:serviceaccount:dynmig:dynmig-scheduler'",
            },
        ],
    )
    alice = client.CoreV1Api(apiserver.api_client("alice"))
    scheduler = client.CoreV1Api(apiserver.api_client("scheduler"))
    alice.create_namespaced_pod("default", pod("plain"))
    scheduler.create_namespaced_pod("default", pod("by-scheduler", labels={"gpu": "1"}))
    assert reviews(hook) == []
    alice.create_namespaced_pod("default", pod("gpu", labels={"gpu": "1"}))
    assert [r["request"]["name"] for r in reviews(hook)] == ["gpu"]
    # an UPDATE that removes the label is still sent: oldObject is not what the condition reads
    alice.patch_namespaced_pod("gpu", "default", {"metadata": {"labels": {"gpu": None}}})
    assert len(reviews(hook)) == 1


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
def test_a_match_condition_that_fails_to_evaluate_follows_the_failure_policy(
    apiserver, counting_webhook, policy
):
    hook, ca = counting_webhook
    register_validating(
        apiserver,
        hook,
        ca,
        [{"name": "needs-annotation", "expression": "object.metadata.annotations['team'] == 'ml'"}],
        policy,
    )
    alice = client.CoreV1Api(apiserver.api_client("alice"))
    if policy == "Ignore":
        assert alice.create_namespaced_pod("default", pod("p")).metadata.name == "p"
    else:
        code, status = denial(lambda: alice.create_namespaced_pod("default", pod("p")))
        assert code == 403 and status["reason"] == "Forbidden"
        assert status["message"].startswith(
            'pods "p" is forbidden: expression '
            "'object.metadata.annotations['team'] == 'ml'' resulted in error"
        )
        assert apiserver.get("pods", "p", "default") is None
    assert reviews(hook) == []


def test_a_false_match_condition_skips_the_webhook_even_when_another_fails_to_evaluate(
    apiserver, counting_webhook
):
    hook, ca = counting_webhook
    register_validating(
        apiserver,
        hook,
        ca,
        [
            {"name": "broken", "expression": "object.metadata.annotations['team'] == 'ml'"},
            {"name": "gpu-pods", "expression": GPU_LABEL},
        ],
    )
    alice = client.CoreV1Api(apiserver.api_client("alice"))
    assert alice.create_namespaced_pod("default", pod("p")).metadata.name == "p"
    assert reviews(hook) == []


def test_a_webhook_configuration_whose_cel_does_not_compile_is_rejected_naming_the_field(
    apiserver, counting_webhook
):
    hook, ca = counting_webhook
    code, status = denial(
        lambda: register_validating(apiserver, hook, ca, [{"name": "x", "expression": "1 +"}])
    )
    assert code == 422 and status["reason"] == "Invalid"
    assert "webhooks[0].matchConditions[0].expression" in status["message"]
    assert "compilation failed" in status["message"]


# ---- ValidatingAdmissionPolicy ------------------------------------------------------------------
@pytest.mark.parametrize("reason, code", [("Forbidden", 403), (None, 422)])
def test_a_policy_bound_with_deny_rejects_with_the_api_servers_wording(
    apiserver, counting_webhook, reason, code
):
    hook, ca = counting_webhook
    register_validating(apiserver, hook, ca, [{"name": "all", "expression": "true"}])
    validation = {"expression": "object.metadata.name.startsWith('ok-')", "message": "names start with ok-"}
    if reason:
        validation["reason"] = reason
    register_policy(apiserver, [validation], ["Deny"])
    alice = client.CoreV1Api(apiserver.api_client("alice"))
    got, status = denial(lambda: alice.create_namespaced_pod("default", pod("bad")))
    assert got == code and status["reason"] == (reason or "Invalid")
    assert status["message"] == (
        "pods \"bad\" is forbidden: ValidatingAdmissionPolicy 'names' with binding "
        "'names-binding' denied request: names start with ok-"
    )
    assert reviews(hook) == []  # policies run before the validating webhooks
    alice.create_namespaced_pod("default", pod("ok-1"))
    assert len(reviews(hook)) == 1


def test_a_policy_bound_with_warn_admits_and_warns_and_audit_only_admits(apiserver):
    register_policy(apiserver, [{"expression": "has(object.metadata.labels)"}], ["Warn", "Audit"])
    alice = client.CoreV1Api(apiserver.api_client("alice"))
    created, code, headers = alice.create_namespaced_pod_with_http_info("default", pod("p"))
    assert code == 201 and created.metadata.name == "p"
    assert (
        "Validation failed for ValidatingAdmissionPolicy 'names' with binding 'names-binding': "
        "failed expression: has(object.metadata.labels)" in headers["Warning"]
    )


def test_a_policy_uses_variables_message_expression_and_match_conditions(apiserver):
    register_policy(
        apiserver,
        [
            {
                "expression": "!variables.isGpu || variables.team != ''",
                "messageExpression": "'pod ' + object.metadata.name + ' needs a team label'",
            }
        ],
        ["Deny"],
        conditions=[{"name": "not-admin", "expression": "!('system:masters' in request.userInfo.groups)"}],
        variables=[
            {"name": "labels", "expression": "has(object.metadata.labels) ? object.metadata.labels : {}"},
            {"name": "isGpu", "expression": "'gpu' in variables.labels"},
            {"name": "team", "expression": "'team' in variables.labels ? variables.labels['team'] : ''"},
        ],
    )
    alice = client.CoreV1Api(apiserver.api_client("alice"))
    admin = client.CoreV1Api(apiserver.api_client("admin"))
    alice.create_namespaced_pod("default", pod("cpu"))
    alice.create_namespaced_pod("default", pod("gpu-ml", labels={"gpu": "1", "team": "ml"}))
    admin.create_namespaced_pod("default", pod("gpu-admin", labels={"gpu": "1"}))
    code, status = denial(lambda: alice.create_namespaced_pod("default", pod("gpu", labels={"gpu": "1"})))
    assert code == 422 and status["message"].endswith("denied request: pod gpu needs a team label")


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
def test_a_policy_expression_that_fails_to_evaluate_follows_the_policys_failure_policy(apiserver, policy):
    register_policy(
        apiserver,
        [{"expression": "object.metadata.annotations['team'] == 'ml'"}],
        ["Deny"],
        failure_policy=policy,
    )
    alice = client.CoreV1Api(apiserver.api_client("alice"))
    if policy == "Ignore":
        assert alice.create_namespaced_pod("default", pod("p")).metadata.name == "p"
        return
    code, status = denial(lambda: alice.create_namespaced_pod("default", pod("p")))
    assert code == 422
    assert (
        "denied request: expression 'object.metadata.annotations['team'] == 'ml'' resulted in error: "
        "no such key: annotations" in status["message"]
    )


def test_a_binding_applies_only_to_the_namespaces_its_match_resources_select(apiserver):
    core = client.CoreV1Api(apiserver.api_client("admin"))
    core.create_namespace({"metadata": {"name": "strict", "labels": {"policy": "strict"}}})
    register_policy(
        apiserver,
        [{"expression": "false", "message": "no pods here"}],
        ["Deny"],
        match_resources={"namespaceSelector": {"matchLabels": {"policy": "strict"}}},
    )
    alice = client.CoreV1Api(apiserver.api_client("alice"))
    alice.create_namespaced_pod("default", pod("p"))
    code, status = denial(lambda: alice.create_namespaced_pod("strict", pod("p")))
    assert code == 422 and status["message"].endswith("denied request: no pods here")


def test_a_binding_with_both_deny_and_warn_is_rejected(apiserver):
    with pytest.raises(ApiException) as bad:
        register_policy(apiserver, [{"expression": "true"}], ["Deny", "Warn"])
    assert bad.value.status == 422 and "spec.validationActions" in json.loads(bad.value.body)["message"]
