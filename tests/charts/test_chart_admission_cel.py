"""The chart's CEL, evaluated by the simulated API server: the ValidatingAdmissionPolicy keeps
hami.io/vgpu-mig-allocations controller-owned with no webhook running, and the pod validating
webhook's matchConditions send it only pods that carry or gain the annotation."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from sim.apiserver.identities import service_account

from tests.charts.chart_testkit import NAMESPACE, one, render
from tests.sim.https_testkit import JsonServer, make_pki

KEY = "hami.io/vgpu-mig-allocations"
OTHER = "example.com/owner"
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
POD = {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "c", "image": "x"}]}}


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


@pytest.fixture(scope="module")
def chart() -> list[dict]:
    return render("1.31")


def pod(name: str, annotations: dict | None = None) -> dict:
    meta: dict = {"name": name}
    if annotations:
        meta["annotations"] = annotations
    return {**copy.deepcopy(POD), "metadata": meta}


def add_chart_identities(apiserver, chart: list[dict]) -> None:
    """Log in as the service accounts the chart's scheduler and device plugin run as."""
    scheduler = one(chart, "Deployment", "-scheduler")["spec"]["template"]["spec"]["serviceAccountName"]
    plugin = one(chart, "DaemonSet", "-device-plugin")["spec"]["template"]["spec"]["serviceAccountName"]
    apiserver.add_identity(service_account("chart-scheduler", NAMESPACE, scheduler))
    apiserver.add_identity(service_account("chart-device-plugin", NAMESPACE, plugin))


@pytest.fixture
def protected(apiserver, chart) -> Callable[[str], client.CoreV1Api]:
    """The chart's policy and binding loaded (no webhook anywhere); returns a pods API per identity."""
    apiserver.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
        apiserver.create(one(chart, kind, "-allocations"))
    add_chart_identities(apiserver, chart)
    return lambda who: client.CoreV1Api(apiserver.api_client(who))


def change(core: client.CoreV1Api, name: str, method: str, annotations: dict) -> None:
    """Set the pod's annotations to exactly `annotations` with a merge patch, a JSON patch or an
    update (PUT of the object read back)."""
    current = core.read_namespaced_pod(name, "default")
    before = dict(current.metadata.annotations or {})
    if method == "merge":
        body = {
            "metadata": {"annotations": {**{k: None for k in before if k not in annotations}, **annotations}}
        }
        core.patch_namespaced_pod(name, "default", body, _content_type=MERGE_PATCH)
    elif method == "json":
        ops = [{"op": "add", "path": "/metadata/annotations", "value": annotations}]
        core.patch_namespaced_pod(name, "default", ops, _content_type=JSON_PATCH)
    else:
        current.metadata.annotations = annotations or None
        core.replace_namespaced_pod(name, "default", current)


EDITS = {  # what the pod carries before -> after
    "add": ({OTHER: "x"}, {OTHER: "x", KEY: "forged"}),
    "change": ({KEY: "real"}, {KEY: "forged"}),
    "remove": ({KEY: "real", OTHER: "x"}, {OTHER: "x"}),
}


def test_alice_cannot_create_a_pod_that_carries_the_allocation_annotation(protected):
    with pytest.raises(ApiException) as denied:
        protected("alice").create_namespaced_pod("default", pod("forged", {KEY: "forged"}))
    status = json.loads(denied.value.body)
    assert denied.value.status == 403 and status["reason"] == "Forbidden"
    assert status["message"].startswith(
        "pods \"forged\" is forbidden: ValidatingAdmissionPolicy 'dynmig-allocations' with binding "
        f"'dynmig-allocations' denied request: {KEY} is written only by the dynmig scheduler"
    )
    assert protected("admin").list_namespaced_pod("default").items == []


@pytest.mark.parametrize("method", ["merge", "json", "update"])
@pytest.mark.parametrize("edit", sorted(EDITS))
def test_alice_cannot_add_change_or_remove_the_allocation_annotation(protected, edit, method):
    before, after = EDITS[edit]
    protected("chart-scheduler").create_namespaced_pod("default", pod("p", before))
    with pytest.raises(ApiException) as denied:
        change(protected("alice"), "p", method, after)
    assert denied.value.status == 403
    assert "denied request: " + KEY in json.loads(denied.value.body)["message"]
    assert protected("admin").read_namespaced_pod("p", "default").metadata.annotations == before


@pytest.mark.parametrize("who", ["chart-scheduler", "chart-device-plugin"])
@pytest.mark.parametrize("method", ["merge", "json", "update"])
@pytest.mark.parametrize("edit", sorted(EDITS))
def test_the_scheduler_and_the_device_plugin_may_write_the_allocation_annotation(
    protected, who, edit, method
):
    before, after = EDITS[edit]
    protected(who).create_namespaced_pod("default", pod("p", before))
    change(protected(who), "p", method, after)
    assert protected("admin").read_namespaced_pod("p", "default").metadata.annotations == after


def test_alice_may_create_plain_pods_and_edit_other_annotations_of_an_allocated_pod(protected):
    alice = protected("alice")
    alice.create_namespaced_pod("default", pod("plain"))
    change(alice, "plain", "merge", {OTHER: "x"})
    protected("chart-scheduler").create_namespaced_pod("default", pod("allocated", {KEY: "real"}))
    change(alice, "allocated", "json", {KEY: "real", OTHER: "y"})
    change(alice, "allocated", "update", {KEY: "real", OTHER: "z"})
    assert protected("admin").read_namespaced_pod("allocated", "default").metadata.annotations == {
        KEY: "real",
        OTHER: "z",
    }


@pytest.fixture
def validating_webhook(apiserver, chart, tmp_path) -> Iterator[JsonServer]:
    """The chart's ValidatingWebhookConfiguration pointing at a counting webhook that allows all
    (the policy is not loaded, so every request the webhook is sent reaches it)."""
    config = copy.deepcopy(one(chart, "ValidatingWebhookConfiguration"))
    service = config["webhooks"][0]["clientConfig"]["service"]
    ca, crt, key = make_pki(tmp_path, f"{service['name']}.{service['namespace']}.svc")
    server = JsonServer(allow_all, tls=(crt, key))
    apiserver.register_service(service["namespace"], service["name"], "127.0.0.1", server.port)
    for hook in config["webhooks"]:
        hook["clientConfig"]["caBundle"] = ca_bundle(ca)
    apiserver.create(config)
    add_chart_identities(apiserver, chart)
    yield server
    server.stop()


def test_only_pods_that_carry_or_gain_the_annotation_are_sent_to_the_pod_webhook(
    apiserver, validating_webhook
):
    alice = client.CoreV1Api(apiserver.api_client("alice"))
    scheduler = client.CoreV1Api(apiserver.api_client("chart-scheduler"))

    def sent():
        return [(r["request"]["operation"], r["request"]["name"]) for r in reviews(validating_webhook)]

    alice.create_namespaced_pod("default", pod("plain"))
    change(alice, "plain", "merge", {OTHER: "x"})
    scheduler.create_namespaced_pod("default", pod("by-scheduler"))
    change(scheduler, "by-scheduler", "merge", {KEY: "real"})  # the controllers are never sent
    assert sent() == []
    change(alice, "plain", "merge", {OTHER: "x", KEY: "forged"})
    alice.create_namespaced_pod("default", pod("born-with-it", {KEY: "forged"}))
    change(alice, "by-scheduler", "json", {})  # removing it: only oldObject carries it
    assert sent() == [("UPDATE", "plain"), ("CREATE", "born-with-it"), ("UPDATE", "by-scheduler")]


def test_during_a_handover_hamis_scheduler_may_write_the_annotation_and_alice_still_may_not(apiserver):
    chart = render("1.31", "allocationWriters={system:serviceaccount:kube-system:hami-scheduler}")
    apiserver.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
        apiserver.create(one(chart, kind, "-allocations"))
    apiserver.add_identity(service_account("hami", "kube-system", "hami-scheduler"))
    hami = client.CoreV1Api(apiserver.api_client("hami"))
    hami.create_namespaced_pod("default", pod("by-hami", {KEY: "real"}))
    change(hami, "by-hami", "merge", {KEY: "moved"})
    with pytest.raises(ApiException) as denied:
        change(client.CoreV1Api(apiserver.api_client("alice")), "by-hami", "merge", {KEY: "forged"})
    assert denied.value.status == 403
