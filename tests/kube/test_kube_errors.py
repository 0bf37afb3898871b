"""kube.errors: every API failure arrives as one KubeError class a caller can act on."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from kube.client import REQUEST_TIMEOUT, api_client
from kube.errors import Conflict, Forbidden, Gone, Invalid, KubeError, NotFound, Unavailable, translated


def config_map(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}}


def core(apiserver, identity: str = "admin") -> client.CoreV1Api:
    return client.CoreV1Api(apiserver.api_client(identity))


def test_reading_a_missing_object_raises_not_found_naming_the_call(apiserver):
    with pytest.raises(NotFound, match="read cm") as raised, translated("read cm"):
        core(apiserver).read_namespaced_config_map("nope", "default", _request_timeout=REQUEST_TIMEOUT)
    assert raised.value.status == 404
    assert "nope" in str(raised.value)  # the server's Status message is kept


def test_a_write_on_a_stale_resource_version_raises_conflict(apiserver):
    api = core(apiserver)
    api.create_namespaced_config_map("default", config_map("cm"))
    patch = {"metadata": {"resourceVersion": "1"}, "data": {"a": "b"}}
    with pytest.raises(Conflict), translated("patch cm"):
        api.patch_namespaced_config_map("cm", "default", patch, _content_type="application/merge-patch+json")


def test_a_refusal_by_rbac_is_forbidden_and_a_malformed_object_invalid(apiserver):
    apiserver.faults.fail_next(verb="list", resource="secrets", code=403)
    with pytest.raises(Forbidden), translated("list secrets"):
        core(apiserver).list_namespaced_secret("kube-system")
    with pytest.raises(Invalid), translated("create cm"):
        core(apiserver).create_namespaced_config_map("default", {"apiVersion": "v1", "kind": "ConfigMap"})


def test_an_injected_server_error_and_a_410_are_told_apart(apiserver):
    apiserver.faults.fail_next(verb="get", resource="configmaps", code=503)
    with pytest.raises(Unavailable), translated("read cm"):
        core(apiserver).read_namespaced_config_map("cm", "default")
    apiserver.faults.fail_next(verb="get", resource="configmaps", code=410)
    with pytest.raises(Gone), translated("read cm"):
        core(apiserver).read_namespaced_config_map("cm", "default")


def test_an_api_server_that_is_not_there_raises_unavailable(apiserver):
    api = client.CoreV1Api(api_client(str(apiserver.kubeconfig("admin")), retries=0))
    apiserver.stop()
    with pytest.raises(Unavailable), translated("list pods"):
        api.list_namespaced_pod("default", _request_timeout=(1, 1))


def test_an_answer_that_is_not_json_is_a_kube_error_not_a_crash():
    with pytest.raises(KubeError, match="unreadable answer"), translated("read"):
        json.loads(b"<html>")


def test_the_client_builder_reads_a_kubeconfig_and_talks_to_that_server(apiserver):
    api = client.CoreV1Api(api_client(str(apiserver.kubeconfig("admin"))))
    assert api.list_namespace().items


def test_an_eviction_a_budget_refuses_names_the_budget_from_the_status_causes(apiserver):
    admin = apiserver.api_client("admin")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }
    core(apiserver).create_namespaced_pod("default", pod)
    running = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    core(apiserver).patch_namespaced_pod_status(
        "web", "default", {"status": running}
    )  # a Pending pod may always go
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep-web", "namespace": "default"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
    }
    client.PolicyV1Api(admin).create_namespaced_pod_disruption_budget("default", budget)
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "web", "namespace": "default"},
    }
    with pytest.raises(Unavailable) as raised, translated("evict web"):
        core(apiserver).create_namespaced_pod_eviction("web", "default", eviction)
    assert raised.value.status == 429
    assert "Cannot evict pod as it would violate the pod's disruption budget" in str(raised.value)
    assert "keep-web" in str(raised.value)  # only the Status's causes name the budget
