"""Graceful deletion as kube-apiserver and its namespace controller do it, through the official client."""

from __future__ import annotations

import http.client
import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from waiting_testkit import eventually


def pod(name: str, node: str = "", grace: int | None = None, finalizers: list[str] | None = None) -> dict:
    spec: dict = {"containers": [{"name": "c", "image": "busybox"}]}
    if node:
        spec["nodeName"] = node
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    meta: dict = {"name": name}
    if finalizers:
        meta["finalizers"] = finalizers
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


@pytest.fixture
def core(apiserver):
    return client.CoreV1Api(apiserver.api_client("admin"))


def test_a_bound_pod_gets_its_own_grace_period_and_an_asked_one_overrides_it(apiserver, core):
    apiserver.registry.reap_after_grace = False
    core.create_namespaced_pod("default", pod("own", node="n1", grace=45))
    core.create_namespaced_pod("default", pod("asked", node="n1", grace=45))
    core.delete_namespaced_pod("own", "default")
    core.delete_namespaced_pod("asked", "default", grace_period_seconds=5)
    assert core.read_namespaced_pod("own", "default").metadata.deletion_grace_period_seconds == 45
    assert core.read_namespaced_pod("asked", "default").metadata.deletion_grace_period_seconds == 5
    # The kubelet confirms with grace 0 and the pod is gone.
    core.delete_namespaced_pod("asked", "default", grace_period_seconds=0)
    assert [p.metadata.name for p in core.list_namespaced_pod("default").items] == ["own"]


def test_a_pod_with_a_finalizer_stays_terminating_until_the_finalizer_is_removed(apiserver, core):
    core.create_namespaced_pod("default", pod("held", finalizers=["example.com/hold"]))
    core.delete_namespaced_pod("held", "default", grace_period_seconds=0)
    assert core.read_namespaced_pod("held", "default").metadata.deletion_timestamp is not None
    core.patch_namespaced_pod("held", "default", {"metadata": {"finalizers": None}})
    assert core.list_namespaced_pod("default").items == []


def test_a_bound_pod_with_no_kubelet_goes_once_its_grace_period_is_over(core):
    core.create_namespaced_pod("default", pod("orphan", node="gone-node", grace=1))
    core.delete_namespaced_pod("orphan", "default")
    assert eventually(lambda: not core.list_namespaced_pod("default").items)


@pytest.mark.parametrize(
    ("body", "query"), [(b'{"gracePeriodSeconds": "soon"}', ""), (b"", "?gracePeriodSeconds=x")]
)
def test_a_malformed_grace_period_is_a_400_and_the_pod_stays(apiserver, core, body, query):
    core.create_namespaced_pod("default", pod("a", node="n1"))
    conn = http.client.HTTPConnection(apiserver.host, apiserver.port, timeout=10)
    conn.request(
        "DELETE",
        f"/api/v1/namespaces/default/pods/a{query}",
        body=body,
        headers={
            "Authorization": f"Bearer {apiserver.identity('admin').token}",
            "Content-Type": "application/json",
        },
    )
    resp = conn.getresponse()
    assert resp.status == 400 and "gracePeriodSeconds" in json.loads(resp.read())["message"]
    conn.close()
    assert core.read_namespaced_pod("a", "default").metadata.deletion_timestamp is None


def test_a_deleted_namespace_terminates_deletes_its_pods_gracefully_then_goes(apiserver, core):
    apiserver.registry.reap_after_grace = False
    core.create_namespace({"metadata": {"name": "ml"}})
    core.create_namespaced_pod("ml", pod("running", node="n1"))
    core.create_namespaced_pod("ml", pod("pending"))
    core.create_namespaced_config_map("ml", {"metadata": {"name": "cfg"}})
    core.delete_namespace("ml")
    ns = core.read_namespace("ml")
    assert ns.status.phase == "Terminating" and ns.metadata.deletion_timestamp is not None
    # The bound pod waits for its kubelet; the rest goes at once.
    running = eventually(lambda: core.read_namespaced_pod("running", "ml").metadata.deletion_timestamp)
    assert running is not None
    assert eventually(lambda: [p.metadata.name for p in core.list_namespaced_pod("ml").items] == ["running"])
    assert eventually(lambda: not core.list_namespaced_config_map("ml").items)
    assert core.read_namespace("ml").status.phase == "Terminating"
    core.delete_namespaced_pod("running", "ml", grace_period_seconds=0)  # the kubelet confirms
    assert eventually(lambda: apiserver.get("namespaces", "ml") is None)


def test_creating_in_a_terminating_namespace_is_forbidden_and_deleting_it_again_conflicts(apiserver, core):
    apiserver.registry.reap_after_grace = False
    core.create_namespace({"metadata": {"name": "ml"}})
    core.create_namespaced_pod("ml", pod("running", node="n1"))
    core.delete_namespace("ml")
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod("ml", pod("late"))
    status = json.loads(refused.value.body)
    assert refused.value.status == 403 and status["reason"] == "Forbidden"
    assert status["message"] == (
        'pods "late" is forbidden: unable to create new content in namespace ml '
        "because it is being terminated"
    )
    assert status["details"]["causes"][0]["reason"] == "NamespaceTerminating"
    with pytest.raises(ApiException) as again:
        core.delete_namespace("ml")
    assert (
        again.value.status == 409
        and "ensuring all content is removed" in json.loads(again.value.body)["message"]
    )


def test_the_default_namespaces_may_not_be_deleted(core):
    for name in ("default", "kube-system", "kube-public"):
        with pytest.raises(ApiException) as refused:
            core.delete_namespace(name)
        assert refused.value.status == 403
        assert (
            json.loads(refused.value.body)["message"] == f'namespaces "{name}" is forbidden: this namespace '
            "may not be deleted"
        )
