"""kubectl get's columns for nodes, Deployments and DaemonSets, as kube-apiserver's printers give them."""

from __future__ import annotations

import pytest
from kubernetes import client
from sim.apiserver.selectors import selector_string

TEMPLATE = {
    "metadata": {"labels": {"app": "web"}},
    "spec": {
        "nodeSelector": {"gpu": "on"},
        "containers": [{"name": "a", "image": "one:1"}, {"name": "b", "image": "two:2"}],
    },
}


def rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.strip().splitlines()]


def test_get_deployments_wide_shows_ready_of_desired_and_the_template(apiserver, run):
    apps = client.AppsV1Api(apiserver.api_client("admin"))
    apps.create_namespaced_deployment(
        "default",
        {
            "metadata": {"name": "web"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": TEMPLATE},
        },
    )
    apps.patch_namespaced_deployment_status(
        "web",
        "default",
        {"status": {"replicas": 3, "readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 1}},
    )
    header, row = rows(run("get", "deployments", "-o", "wide"))
    assert header == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE", "CONTAINERS", "IMAGES", "SELECTOR"]
    assert row[:4] == ["web", "2/3", "3", "1"]
    assert row[5:] == ["a,b", "one:1,two:2", "app=web"]


def test_get_daemonsets_shows_the_counts_and_the_node_selector(apiserver, run):
    apps = client.AppsV1Api(apiserver.api_client("admin"))
    apps.create_namespaced_daemon_set(
        "default",
        {
            "metadata": {"name": "agent"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": TEMPLATE},
        },
    )
    status = {
        "desiredNumberScheduled": 4,
        "currentNumberScheduled": 3,
        "numberReady": 2,
        "updatedNumberScheduled": 3,
        "numberAvailable": 2,
        "numberMisscheduled": 0,
    }
    apps.patch_namespaced_daemon_set_status("agent", "default", {"status": status})
    header, row = rows(run("get", "daemonsets"))
    assert header == [
        "NAME",
        "DESIRED",
        "CURRENT",
        "READY",
        "UP-TO-DATE",
        "AVAILABLE",
        "NODE",
        "SELECTOR",
        "AGE",
    ]
    assert row[:7] == ["agent", "4", "3", "2", "3", "2", "gpu=on"]


def test_get_nodes_wide_shows_what_the_kubelet_reported(apiserver, run):
    apiserver.create(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "n1"},
            "status": {
                "addresses": [{"type": "InternalIP", "address": "10.0.0.7"}],
                "nodeInfo": {
                    "kubeletVersion": "v1.35.1",
                    "osImage": "Linux",
                    "kernelVersion": "6.8.0",
                    "containerRuntimeVersion": "containerd://2.1.4",
                },
            },
        }
    )
    header, row = rows(run("get", "nodes", "-o", "wide"))
    assert header[4:] == [
        "VERSION",
        "INTERNAL-IP",
        "EXTERNAL-IP",
        "OS-IMAGE",
        "KERNEL-VERSION",
        "CONTAINER-RUNTIME",
    ]
    assert row[4:] == ["v1.35.1", "10.0.0.7", "<none>", "Linux", "6.8.0", "containerd://2.1.4"]


@pytest.mark.parametrize(
    ("selector", "text"),
    [
        ({"matchLabels": {"b": "2", "a": "1"}}, "a=1,b=2"),
        (
            {
                "matchLabels": {"z": "1"},
                "matchExpressions": [{"key": "m", "operator": "In", "values": ["y", "x"]}],
            },
            "m in (x,y),z=1",
        ),
        (
            {
                "matchExpressions": [
                    {"key": "k", "operator": "DoesNotExist"},
                    {"key": "e", "operator": "Exists"},
                ]
            },
            "e,!k",
        ),
        ({"matchExpressions": [{"key": "k", "operator": "NotIn", "values": ["v"]}]}, "k notin (v)"),
        ({}, ""),
        (None, ""),
        ({"matchExpressions": ["not-an-object"]}, ""),
    ],
)
def test_a_label_selector_is_written_as_kube_apiserver_writes_it(selector, text):
    assert selector_string(selector) == text
