"""pods/eviction and PodDisruptionBudgets as kube-apiserver and the disruption controller do them,
through the official client."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException


@pytest.fixture
def core(apiserver):
    apiserver.registry.reap_after_grace = False  # evicted pods stay Terminating: the test sees them
    return client.CoreV1Api(apiserver.api_client("admin"))


@pytest.fixture
def policy(apiserver):
    return client.PolicyV1Api(apiserver.api_client("admin"))


def running(core, name: str, labels: dict[str, str] | None = None, ready: bool = True) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]},
    }
    core.create_namespaced_pod("default", body)
    status = "True" if ready else "False"
    core.patch_namespaced_pod_status(
        name, "default", {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": status}]}}
    )


def budget(policy, name: str, app: str, **spec) -> None:
    policy.create_namespaced_pod_disruption_budget(
        "default",
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": app}}, **spec},
        },
    )


def evict(core, name: str, body_name: str | None = None):
    return core.create_namespaced_pod_eviction(
        name,
        "default",
        {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": body_name or name, "namespace": "default"},
        },
    )


def test_evicting_a_pod_no_budget_covers_deletes_it_gracefully(apiserver, core):
    running(core, "free")
    evict(core, "free")
    gone = core.read_namespaced_pod("free", "default")
    assert gone.metadata.deletion_timestamp is not None and gone.metadata.deletion_grace_period_seconds == 30


def test_a_budget_with_no_disruption_left_answers_429_with_a_disruption_budget_cause(apiserver, core, policy):
    running(core, "guarded", {"app": "web"})
    budget(policy, "web", "web", minAvailable=1)
    apiserver.sync_budgets()
    assert policy.read_namespaced_pod_disruption_budget("web", "default").status.disruptions_allowed == 0
    with pytest.raises(ApiException) as caught:
        evict(core, "guarded")
    assert caught.value.status == 429
    status = json.loads(caught.value.body)
    assert status["reason"] == "TooManyRequests"
    assert status["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert status["details"]["causes"][0]["reason"] == "DisruptionBudget"
    assert "needs 1 healthy pods and has 1 currently" in status["details"]["causes"][0]["message"]
    assert core.read_namespaced_pod("guarded", "default").metadata.deletion_timestamp is None


def test_a_budget_that_allows_one_disruption_lets_one_pod_go_and_then_refuses_the_next(
    apiserver, core, policy
):
    running(core, "a", {"app": "web"})
    running(core, "b", {"app": "web"})
    budget(policy, "web", "web", minAvailable=1)
    apiserver.sync_budgets()
    evict(core, "a")
    pdb = policy.read_namespaced_pod_disruption_budget("web", "default")
    assert pdb.status.disruptions_allowed == 0 and "a" in pdb.status.disrupted_pods
    with pytest.raises(ApiException) as caught:
        evict(core, "b")
    assert caught.value.status == 429


def test_a_budget_the_controller_has_not_seen_yet_refuses_with_still_being_processed(apiserver, core, policy):
    apiserver.disruption_controller = False
    running(core, "new", {"app": "web"})
    budget(policy, "web", "web", minAvailable=0)
    with pytest.raises(ApiException) as caught:
        evict(core, "new")
    assert caught.value.status == 429
    assert "still being processed" in json.loads(caught.value.body)["details"]["causes"][0]["message"]
    apiserver.sync_budgets()
    evict(core, "new")
    assert core.read_namespaced_pod("new", "default").metadata.deletion_timestamp is not None


def test_evicting_a_missing_pod_is_404_and_a_mismatched_name_is_400(apiserver, core):
    with pytest.raises(ApiException) as missing:
        evict(core, "nobody")
    assert missing.value.status == 404
    running(core, "p")
    with pytest.raises(ApiException) as mismatched:
        evict(core, "p", body_name="other")
    assert mismatched.value.status == 400
    assert "does not match" in json.loads(mismatched.value.body)["message"]


def test_a_pending_pod_is_evicted_without_asking_its_budget(apiserver, core, policy):
    core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": "waiting", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "x"}]},
        },
    )
    budget(policy, "web", "web", minAvailable=5)
    apiserver.sync_budgets()
    evict(core, "waiting")
    assert [p.metadata.name for p in core.list_namespaced_pod("default").items] == []


def test_a_pod_two_budgets_select_cannot_be_evicted(apiserver, core, policy):
    running(core, "both", {"app": "web"})
    budget(policy, "one", "web", minAvailable=0)
    budget(policy, "two", "web", minAvailable=0)
    apiserver.sync_budgets()
    with pytest.raises(ApiException) as caught:
        evict(core, "both")
    assert caught.value.status == 500
    assert "more than one PodDisruptionBudget" in json.loads(caught.value.body)["message"]


def test_max_unavailable_over_pods_without_a_controller_allows_no_disruption(apiserver, core, policy):
    running(core, "bare", {"app": "web"})
    budget(policy, "web", "web", maxUnavailable=1)
    apiserver.sync_budgets()
    status = policy.read_namespaced_pod_disruption_budget("web", "default").status
    assert (status.expected_pods, status.disruptions_allowed) == (0, 0)


def test_a_budget_counts_only_ready_pods_as_healthy(apiserver, core, policy):
    running(core, "up", {"app": "web"})
    running(core, "down", {"app": "web"}, ready=False)
    budget(policy, "web", "web", minAvailable=1)
    apiserver.sync_budgets()
    status = policy.read_namespaced_pod_disruption_budget("web", "default").status
    assert (status.current_healthy, status.desired_healthy, status.disruptions_allowed) == (1, 1, 0)
    evict(core, "down")  # not Ready and the budget is healthy enough: it goes without spending it
    assert core.read_namespaced_pod("down", "default").metadata.deletion_timestamp is not None
