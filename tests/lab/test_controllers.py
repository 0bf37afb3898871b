"""The lab's kube-controller-manager stand-in against the simulated API server: DaemonSet pods per
node with new names after a deletion, Deployment replicas, garbage collection, bad objects isolated."""

from __future__ import annotations

import time

import pytest
from kubernetes import client
from lab.controllers import ControllerManager
from sim.apiserver import ApiServer
from waiting_testkit import wait_for


@pytest.fixture
def cluster(tmp_path):
    api = ApiServer(
        workdir=tmp_path / "api", reap_after_grace=False
    ).start()  # only a kubelet would remove pods
    for name, gpu in (("gpu-1", "on"), ("gpu-2", "on"), ("cpu-1", "off")):
        api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"gpu": gpu}}})
    lines: list[str] = []
    manager = ControllerManager(api.api_client(), echo=lines.append, interval=0.05).start()
    yield client.CoreV1Api(api.api_client()), client.AppsV1Api(api.api_client()), lines
    manager.stop()
    api.stop()


def _template(labels: dict, **spec) -> dict:
    return {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "image": "x"}], **spec}}


def _pods(core, namespace: str = "default") -> dict[str, str]:
    """name -> node of the namespace's pods that are not being deleted."""
    return {
        p.metadata.name: p.spec.node_name
        for p in core.list_namespaced_pod(namespace).items
        if p.metadata.deletion_timestamp is None
    }


def test_a_daemonset_gets_one_pod_per_matching_node_and_a_new_name_after_a_deletion(cluster):
    core, apps, _ = cluster
    apps.create_namespaced_daemon_set(
        "default",
        {
            "metadata": {"name": "plugin"},
            "spec": {
                "selector": {"matchLabels": {"app": "plugin"}},
                "template": _template(
                    {"app": "plugin"}, nodeSelector={"gpu": "on"}, terminationGracePeriodSeconds=30
                ),
            },
        },
    )
    first = wait_for(lambda: (p := _pods(core)) and len(p) == 2 and p, "two daemon pods")
    assert sorted(first.values()) == ["gpu-1", "gpu-2"]
    assert all(name.startswith("plugin-") for name in first)
    old = next(n for n, node in first.items() if node == "gpu-1")
    core.delete_namespaced_pod(old, "default")  # graceful: it stays Terminating (no kubelet here)
    time.sleep(0.5)
    assert "gpu-1" not in _pods(core).values(), "a second pod while the first is still terminating"
    core.delete_namespaced_pod(old, "default", grace_period_seconds=0)
    new = wait_for(
        lambda: next((n for n, node in _pods(core).items() if node == "gpu-1"), None), "a replacement"
    )
    assert new != old
    status = wait_for(
        lambda: (
            (ds := apps.read_namespaced_daemon_set("plugin", "default").status)
            and ds.current_number_scheduled == 2
            and ds
        ),
        "the DaemonSet's status",
    )
    assert status.desired_number_scheduled == 2


def test_a_deployment_keeps_its_replicas_and_its_pods_go_with_it(cluster):
    core, apps, _ = cluster
    apps.create_namespaced_deployment(
        "default",
        {
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "web"}},
                "template": _template({"app": "web"}),
            },
        },
    )
    pods = wait_for(lambda: (p := _pods(core)) and len(p) == 3 and p, "three replicas")
    victim = next(iter(pods))
    core.delete_namespaced_pod(victim, "default", grace_period_seconds=0)
    wait_for(lambda: (p := _pods(core)) and len(p) == 3 and victim not in p, "a replacement replica")
    apps.delete_namespaced_deployment("web", "default")
    wait_for(lambda: not _pods(core), "the garbage collector to delete the Deployment's pods")


def test_a_deployment_the_lab_cannot_run_is_named_and_the_others_are_still_reconciled(cluster):
    core, apps, lines = cluster
    apps.create_namespaced_deployment(
        "default",
        {
            "metadata": {"name": "huge"},
            "spec": {
                "replicas": 100000,
                "selector": {"matchLabels": {"app": "huge"}},
                "template": _template({"app": "huge"}),
            },
        },
    )
    apps.create_namespaced_deployment(
        "default",
        {
            "metadata": {"name": "small"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "small"}},
                "template": _template({"app": "small"}),
            },
        },
    )
    wait_for(lambda: any(n.startswith("small-") for n in _pods(core)), "small's replica")
    assert not any(n.startswith("huge-") for n in _pods(core))
    assert any(
        "Deployment default/huge: not reconciled: ValueError: spec.replicas 100000" in line for line in lines
    )
