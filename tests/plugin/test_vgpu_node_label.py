"""HAMi's `hami.io/vgpu-node` pod label, which its vGPU monitor lists a node's pods by: the Binding
that carries dynmig's reservation cannot set it, so the plugin's first patch of the pod adds it,
in the write it makes anyway."""

from __future__ import annotations

from typing import Any

from kubernetes import watch

from plugin.kube import VGPU_NODE_LABEL
from tests.plugin.conftest import NODE, Want

A100 = {"gpus": [{"model": "A100-SXM4-40GB"}]}


def labels(node: Any, name: str) -> dict[str, str]:
    return dict(node.core.read_namespaced_pod(name, "default").metadata.labels or {})


def writes_during(node: Any, name: str, action: Any) -> list[dict[str, str]]:
    """The pod's labels after each write to it while `action` runs, from its watch."""
    since = node.core.read_namespaced_pod(name, "default").metadata.resource_version
    action()
    seen = []
    stream = watch.Watch().stream(
        node.core.list_namespaced_pod,
        "default",
        field_selector=f"metadata.name={name}",
        resource_version=since,
        timeout_seconds=1,
    )
    for event in stream:
        if event["type"] == "MODIFIED":
            seen.append(dict(event["object"].metadata.labels or {}))
    return seen


def test_an_allocated_pod_carries_the_vgpu_node_label_from_the_one_write_allocate_makes(make_node):
    node = make_node(A100)
    node.start_plugin()
    node.add_pod("train", [[Want(0, "1g.5gb", 6, 1)]])
    assert VGPU_NODE_LABEL not in labels(node, "train")  # the Binding set the annotation only

    def admit() -> None:
        assert node.admit("train").ok

    assert writes_during(node, "train", admit) == [{VGPU_NODE_LABEL: NODE}]


def test_each_container_of_a_pod_is_recorded_and_only_the_first_write_adds_the_label(make_node):
    node = make_node(A100)
    node.start_plugin()
    node.add_pod("pair", [[Want(0, "1g.5gb", 6, 1)], [Want(0, "1g.5gb", 5, 1)]])

    def admit() -> None:
        assert node.admit("pair").ok

    assert writes_during(node, "pair", admit) == [{VGPU_NODE_LABEL: NODE}] * 2
    assert labels(node, "pair") == {VGPU_NODE_LABEL: NODE}


def test_a_label_hami_already_wrote_is_left_as_it_is(make_node):
    node = make_node(A100)
    node.start_plugin()
    node.add_pod("handed-over", [[Want(0, "1g.5gb", 6, 1)]])
    node.core.patch_namespaced_pod(
        "handed-over", "default", {"metadata": {"labels": {VGPU_NODE_LABEL: NODE, "team": "a"}}}
    )
    assert node.admit("handed-over").ok
    assert labels(node, "handed-over") == {VGPU_NODE_LABEL: NODE, "team": "a"}
