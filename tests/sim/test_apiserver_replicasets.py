"""The simulated API server's apps/v1 ReplicaSets: served with their defaults, their `status` and
`scale` subresources, and a generation that counts spec changes (what a controller's
observedGeneration answers), as kube-apiserver serves them."""

from __future__ import annotations

import copy

import pytest
from kubernetes import client

REPLICA_SET = {
    "apiVersion": "apps/v1",
    "kind": "ReplicaSet",
    "metadata": {"name": "solo", "namespace": "default"},
    "spec": {
        "selector": {"matchLabels": {"app": "solo"}},
        "template": {
            "metadata": {"labels": {"app": "solo"}},
            "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
        },
    },
}


@pytest.fixture
def apps(apiserver):
    api = client.AppsV1Api(apiserver.api_client("admin"))
    api.create_namespaced_replica_set("default", copy.deepcopy(REPLICA_SET))
    return api


def test_a_new_replica_set_gets_one_replica_and_its_templates_pod_defaults(apps):
    rs = apps.read_namespaced_replica_set("solo", "default")
    assert rs.spec.replicas == 1
    assert rs.metadata.generation == 1
    spec = rs.spec.template.spec
    assert (spec.restart_policy, spec.dns_policy, spec.termination_grace_period_seconds) == (
        "Always",
        "ClusterFirst",
        30,
    )
    assert spec.containers[0].image_pull_policy == "IfNotPresent"


def test_a_spec_change_is_a_new_generation_and_a_label_or_status_change_is_not(apps):
    apps.patch_namespaced_replica_set("solo", "default", {"metadata": {"labels": {"team": "a"}}})
    assert apps.read_namespaced_replica_set("solo", "default").metadata.generation == 1
    apps.patch_namespaced_replica_set_status("solo", "default", {"status": {"replicas": 1}})
    assert apps.read_namespaced_replica_set("solo", "default").metadata.generation == 1
    apps.patch_namespaced_replica_set("solo", "default", {"spec": {"minReadySeconds": 5}})
    assert apps.read_namespaced_replica_set("solo", "default").metadata.generation == 2


def test_the_main_endpoint_leaves_a_replica_sets_status_to_the_status_subresource(apps):
    apps.patch_namespaced_replica_set_status(
        "solo", "default", {"status": {"replicas": 1, "readyReplicas": 1}}
    )
    apps.patch_namespaced_replica_set("solo", "default", {"status": {"replicas": 7}})
    assert apps.read_namespaced_replica_set("solo", "default").status.replicas == 1


def test_kubectl_scale_and_get_rs_with_default_settings(apps, run):
    assert run("scale", "rs", "solo", "--replicas=3").strip() == "replicaset.apps/solo scaled"
    assert apps.read_namespaced_replica_set("solo", "default").spec.replicas == 3
    assert apps.read_namespaced_replica_set_scale("solo", "default").status.selector == "app=solo"
    header, row = run("get", "rs", "-o", "wide").strip().splitlines()
    assert header.split() == [
        "NAME",
        "DESIRED",
        "CURRENT",
        "READY",
        "AGE",
        "CONTAINERS",
        "IMAGES",
        "SELECTOR",
    ]
    cells = row.split()
    assert cells[:4] == ["solo", "3", "0", "0"]
    assert cells[5:] == ["c", "busybox:1.36", "app=solo"]


def test_kubectl_knows_rs_as_replica_sets_short_name_and_explains_it(apps, run):
    assert run("get", "replicasets.apps", "-o", "name").strip() == "replicaset.apps/solo"
    assert "replicas\t<integer>" in run("explain", "rs.spec")
