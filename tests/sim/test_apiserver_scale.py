"""The simulated API server's `deployments/scale`: kubectl scale and the official client's Scale calls."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "default"},
    "spec": {
        "replicas": 2,
        "selector": {
            "matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["b", "a"]}],
        },
        "template": {
            "metadata": {"labels": {"app": "web", "tier": "a"}},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]},
        },
    },
}


@pytest.fixture
def apps(apiserver):
    api = client.AppsV1Api(apiserver.api_client("admin"))
    api.create_namespaced_deployment("default", DEPLOYMENT)
    return api


def test_kubectl_scale_with_default_settings_changes_the_deployments_replicas(apps, run):
    assert run("scale", "deployment", "web", "--replicas=5").strip() == "deployment.apps/web scaled"
    assert apps.read_namespaced_deployment("web", "default").spec.replicas == 5


def test_kubectl_scale_with_a_wrong_current_count_changes_nothing(apps, run):
    error = run("scale", "deployment/web", "--current-replicas=3", "--replicas=1", ok=False)
    assert "Expected replicas to be 3, was 2" in error
    assert apps.read_namespaced_deployment("web", "default").spec.replicas == 2


def test_the_scale_view_carries_the_replicas_and_the_selector_as_a_string(apps):
    scale = apps.read_namespaced_deployment_scale("web", "default")
    assert (scale.kind, scale.api_version) == ("Scale", "autoscaling/v1")
    assert scale.spec.replicas == 2
    assert scale.status.selector == "app=web,tier in (a,b)"
    deployment = apps.read_namespaced_deployment("web", "default")
    assert scale.metadata.resource_version == deployment.metadata.resource_version
    assert scale.metadata.uid == deployment.metadata.uid


def test_a_scale_patch_changes_only_the_replicas_and_records_the_scale_manager(apps):
    before = apps.read_namespaced_deployment("web", "default")
    apps.patch_namespaced_deployment_scale(
        "web", "default", {"spec": {"replicas": 4}, "status": {"replicas": 9}}
    )
    after = apps.read_namespaced_deployment("web", "default")
    assert after.spec.replicas == 4
    assert after.spec.template == before.spec.template
    assert int(after.metadata.resource_version) > int(before.metadata.resource_version)
    entry = [m for m in after.metadata.managed_fields if m.subresource == "scale"]
    assert len(entry) == 1 and entry[0].fields_v1 == {"f:spec": {"f:replicas": {}}}


def test_a_scale_put_with_a_stale_resource_version_is_a_conflict(apps):
    scale = apps.read_namespaced_deployment_scale("web", "default")
    apps.patch_namespaced_deployment("web", "default", {"metadata": {"labels": {"touched": "yes"}}})
    scale.spec.replicas = 7
    with pytest.raises(ApiException) as refused:
        apps.replace_namespaced_deployment_scale("web", "default", scale)
    assert refused.value.status == 409
    assert apps.read_namespaced_deployment("web", "default").spec.replicas == 2


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"spec": {"replicas": -1}}, "spec.replicas: Invalid value: -1"),
        ({"spec": {"replicas": "many"}}, "spec.replicas of a Scale must be an integer"),
        ({"spec": {"replicas": 2**40}}, "32-bit"),
        ({"metadata": {"name": "other"}, "spec": {"replicas": 1}}, "does not match the name"),
        ([1, 2], "must be a JSON object"),
    ],
)
def test_a_bad_scale_is_refused_naming_the_field_and_changes_nothing(apps, run, body, says):
    path = "/apis/apps/v1/namespaces/default/deployments/web/scale"
    error = run("replace", "--raw", path, "-f", "-", stdin=json.dumps(body), ok=False)
    assert says in error
    assert apps.read_namespaced_deployment("web", "default").spec.replicas == 2


def test_a_scale_patch_that_breaks_the_view_is_refused(apps):
    with pytest.raises(ApiException) as refused:
        apps.patch_namespaced_deployment_scale("web", "default", [{"op": "remove", "path": "/nope"}])
    assert refused.value.status == 422
    assert apps.read_namespaced_deployment("web", "default").spec.replicas == 2


def test_discovery_names_the_scale_subresource_in_the_autoscaling_group(run):
    doc = json.loads(run("get", "--raw", "/apis/apps/v1"))
    entry = next(r for r in doc["resources"] if r["name"] == "deployments/scale")
    assert (entry["group"], entry["version"], entry["kind"]) == ("autoscaling", "v1", "Scale")
