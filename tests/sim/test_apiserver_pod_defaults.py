"""A pod as kube-apiserver defaults it (the webhook side is in test_apiserver_admission.py)."""

from __future__ import annotations

import copy

import pytest
from kubernetes import client
from sim.apiserver import defaults
from test_apiserver_admission import POD


def test_a_created_pod_has_the_defaults_a_cluster_gives_it(apiserver):
    body = copy.deepcopy(POD)
    body["spec"]["containers"][0]["ports"] = [{"containerPort": 80}]
    pod = client.CoreV1Api(apiserver.api_client("alice")).create_namespaced_pod("default", body)
    spec, container = pod.spec, pod.spec.containers[0]
    assert (spec.dns_policy, spec.restart_policy, spec.scheduler_name) == (
        "ClusterFirst",
        "Always",
        "default-scheduler",
    )
    assert spec.security_context is not None and spec.enable_service_links is True
    assert (spec.service_account_name, spec.preemption_policy, spec.priority) == (
        "default",
        "PreemptLowerPriority",
        0,
    )
    assert {t.key: t.toleration_seconds for t in spec.tolerations} == {
        "node.kubernetes.io/not-ready": 300,
        "node.kubernetes.io/unreachable": 300,
    }
    assert (container.termination_message_path, container.image_pull_policy) == (
        "/dev/termination-log",
        "Always",
    )
    assert container.ports[0].protocol == "TCP"
    assert pod.status.qos_class == "BestEffort"


def test_a_pod_that_tolerates_every_no_execute_taint_gets_no_default_toleration():
    pod = {"spec": {"containers": [{"name": "c"}], "tolerations": [{"operator": "Exists"}]}}
    assert defaults.pod(pod)["spec"]["tolerations"] == [{"operator": "Exists"}]


@pytest.mark.parametrize(
    ("image", "policy"),
    [
        ("nginx", "Always"),
        ("nginx:latest", "Always"),
        ("nginx:1.27", "IfNotPresent"),
        ("reg:5000/app", "Always"),
        ("app@sha256:ab", "IfNotPresent"),
    ],
)
def test_the_image_pull_policy_follows_the_tag(image, policy):
    assert (
        defaults.pod({"spec": {"containers": [{"name": "c", "image": image}]}})["spec"]["containers"][0][
            "imagePullPolicy"
        ]
        == policy
    )


def container(requests=None, limits=None):
    resources = {k: v for k, v in (("requests", requests), ("limits", limits)) if v is not None}
    return {"name": "c", "resources": resources}


@pytest.mark.parametrize(
    ("containers", "qos"),
    [
        ([container()], "BestEffort"),
        ([container(limits={"nvidia.com/gpumem": "8k"})], "BestEffort"),
        ([container(requests={"cpu": "100m"})], "Burstable"),
        ([container(limits={"cpu": "1", "memory": "1Gi"})], "Guaranteed"),
        (
            [container(requests={"cpu": "1000m", "memory": "1024Mi"}, limits={"cpu": "1", "memory": "1Gi"})],
            "Guaranteed",
        ),
        ([container(limits={"cpu": "1", "memory": "1Gi"}), container()], "Burstable"),
        ([container(requests={"cpu": "500m"}, limits={"cpu": "1", "memory": "1Gi"})], "Burstable"),
        ([container(limits={"cpu": "0", "memory": "0"})], "BestEffort"),
    ],
)
def test_the_qos_class_follows_cpu_and_memory_requests_and_limits(containers, qos):
    pod = defaults.pod({"spec": {"containers": containers}})
    assert defaults.qos_class(pod) == qos


def test_odd_shapes_are_left_for_validation_and_defaulting_twice_changes_nothing():
    assert defaults.pod({"spec": "nope"}) == {"spec": "nope"}
    odd = {"spec": {"containers": ["x", {"name": "c", "resources": {"limits": "y"}}], "tolerations": "z"}}
    once = defaults.pod(copy.deepcopy(odd))
    assert defaults.pod(copy.deepcopy(once)) == once
    assert once["spec"]["tolerations"] == "z"


def test_a_deployment_gets_its_apps_defaults_and_its_template_the_pod_spec_ones(apiserver):
    apps = client.AppsV1Api(apiserver.api_client("admin"))
    template = {"metadata": {"labels": {"app": "w"}}, "spec": {"containers": [{"name": "c", "image": "w:1"}]}}
    body = {
        "metadata": {"name": "w"},
        "spec": {"selector": {"matchLabels": {"app": "w"}}, "template": template},
    }
    created = apps.create_namespaced_deployment("default", body)
    assert (created.spec.replicas, created.spec.revision_history_limit) == (1, 10)
    assert created.spec.progress_deadline_seconds == 600
    rolling = created.spec.strategy.rolling_update
    assert (created.spec.strategy.type, rolling.max_surge, rolling.max_unavailable) == (
        "RollingUpdate",
        "25%",
        "25%",
    )
    pod_spec = created.spec.template.spec
    assert (pod_spec.restart_policy, pod_spec.dns_policy, pod_spec.termination_grace_period_seconds) == (
        "Always",
        "ClusterFirst",
        30,
    )
    assert pod_spec.service_account_name is None and pod_spec.tolerations is None  # a pod's, not a template's
    # an update that leaves the defaults out keeps them: the template does not change
    replaced = apps.replace_namespaced_deployment(
        "w",
        "default",
        {**body, "metadata": {"name": "w", "resourceVersion": created.metadata.resource_version}},
    )
    assert replaced.spec.template == created.spec.template


def test_a_daemon_set_rolls_one_node_at_a_time_by_default(apiserver):
    apps = client.AppsV1Api(apiserver.api_client("admin"))
    template = {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "d:1"}]}}
    created = apps.create_namespaced_daemon_set(
        "default",
        {
            "metadata": {"name": "d"},
            "spec": {"selector": {"matchLabels": {"app": "d"}}, "template": template},
        },
    )
    rolling = created.spec.update_strategy.rolling_update
    assert (created.spec.update_strategy.type, rolling.max_unavailable, rolling.max_surge) == (
        "RollingUpdate",
        1,
        0,
    )
