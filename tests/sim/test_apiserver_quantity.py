"""Canonical quantities as kube-apiserver writes them back (apimachinery resource.Quantity's
documented canonical form), and the inputs it refuses."""

from __future__ import annotations

import json

import pytest
from sim.apiserver.quantity import QuantityError, canonical


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("8000", "8k"),
        ("30000", "30k"),
        (8000, "8k"),
        ("1500", "1500"),
        ("1000m", "1"),
        ("0.5", "500m"),
        ("100m", "100m"),
        ("0.1", "100m"),
        ("1", "1"),
        ("0", "0"),
        ("0Gi", "0"),
        ("1000000", "1M"),
        ("1024Mi", "1Gi"),
        ("1536Mi", "1536Mi"),
        ("2048Ki", "2Mi"),
        ("1.5Gi", "1536Mi"),
        ("0.5Ki", "512"),
        ("1023Ki", "1023Ki"),
        ("1Ki", "1Ki"),
        ("1e3", "1e3"),
        ("1E3", "1e3"),
        ("12e2", "1200"),
        ("100e-3", "100e-3"),
        ("1e6", "1e6"),
        ("0.0000000001", "1n"),
        ("1.0000000001", "1000000001n"),
        ("-8000", "-8k"),
        ("+5", "5"),
        ("1.", "1"),
        (".5", "500m"),
        ("1000E", "1000E"),
        ("8k", "8k"),
        (0.5, "500m"),
    ],
)
def test_quantities_are_stored_in_kubernetes_canonical_form(given, stored):
    assert canonical(given) == stored


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "8K",
        "8x",
        "1Gb",
        "1 Gi",
        "Gi",
        ".",
        "-",
        "1e",
        "1e3.5",
        "1..5",
        "1e99999",
        "9" * 100,
        None,
        True,
        [],
        {"a": 1},
        "1\n",
        "1e3\n",
    ],
)
def test_what_is_not_a_quantity_is_refused_with_apimachinery_s_message(bad):
    with pytest.raises(QuantityError, match="quantities must match the regular expression"):
        canonical(bad)


def _pod(limits: dict, requests: dict | None = None) -> dict:
    resources = {"limits": limits, **({"requests": requests} if requests else {})}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": resources}]},
    }


@pytest.fixture
def core(apiserver):
    from kubernetes import client

    return client.CoreV1Api(apiserver.api_client("admin"))


def test_a_created_pod_stores_its_quantities_canonically_and_keeps_them_on_update(apiserver, core):
    core.create_namespaced_pod(
        "default", _pod({"nvidia.com/gpumem": "8000", "memory": "1024Mi"}, {"cpu": "1000m"})
    )
    stored = apiserver.get("pods", "p", "default")["spec"]["containers"][0]["resources"]
    # a limit without a request is also the request (pod defaulting)
    assert stored == {
        "limits": {"nvidia.com/gpumem": "8k", "memory": "1Gi"},
        "requests": {"cpu": "1", "nvidia.com/gpumem": "8k", "memory": "1Gi"},
    }
    core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"a": "b"}}})
    assert apiserver.get("pods", "p", "default")["spec"]["containers"][0]["resources"] == stored


def test_node_capacity_and_allocatable_are_stored_canonically(apiserver, core):
    core.create_node({"metadata": {"name": "n1"}})
    core.patch_node_status(
        "n1",
        {
            "status": {
                "capacity": {"nvidia.com/gpumem": "81920", "memory": "2048Ki"},
                "allocatable": {"nvidia.com/gpu": 7},
            }
        },
    )
    status = apiserver.get("nodes", "n1")["status"]
    assert status["capacity"] == {"nvidia.com/gpumem": "81920", "memory": "2Mi"}
    assert status["allocatable"] == {"nvidia.com/gpu": "7"}


def test_a_pod_with_a_malformed_quantity_is_a_400_naming_the_resource(core):
    from kubernetes.client.rest import ApiException

    with pytest.raises(ApiException) as bad:
        core.create_namespaced_pod("default", _pod({"nvidia.com/gpumem": "8 GB"}))
    message = json.loads(bad.value.body)["message"]
    assert bad.value.status == 400 and "quantities must match the regular expression" in message
    assert "spec.containers[0].resources.limits[nvidia.com/gpumem]" in message


@pytest.mark.parametrize(
    ("limits", "says"),
    [
        ({"nvidia.com/gpumem": "-1"}, 'Invalid value: "-1": must be greater than or equal to 0'),
        ({"nvidia.com/gpu": "0.5"}, 'Invalid value: "500m": must be an integer'),
    ],
)
def test_a_negative_or_fractional_extended_resource_is_invalid(core, limits, says):
    from kubernetes.client.rest import ApiException

    with pytest.raises(ApiException) as bad:
        core.create_namespaced_pod("default", _pod(limits))
    assert bad.value.status == 422 and says in json.loads(bad.value.body)["message"]
