"""The resource.k8s.io/v1 kinds a DRA driver and its users write, served as kube-apiserver serves them."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

GROUP, VERSION = "resource.k8s.io", "v1"
DRIVER = "gpu.example.com"


def _api(apiserver) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(apiserver.api_client("admin"))


def _slice(name: str, node: str = "node-1", driver: str = DRIVER, **spec) -> dict:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0-mig-1g5gb-19-0"}],
        },
    }
    body["spec"].update(spec)
    return body


def _claim(name: str) -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "mig.example.com"}}]}
        },
    }


ALLOCATION = {
    "devices": {
        "results": [{"request": "gpu", "driver": DRIVER, "pool": "node-1", "device": "gpu-0-mig-1g5gb-19-0"}]
    }
}
RESERVED = [{"resource": "pods", "name": "trainer", "uid": "0b5c0f64-2c7f-4d3a-9d11-5c0f642c7f4d"}]


def _refusal(exc: pytest.ExceptionInfo[ApiException]) -> dict:
    assert exc.value.status == 422
    return json.loads(exc.value.body)


def _write_status(api, name: str, status: dict) -> dict:
    return api.patch_namespaced_custom_object_status(
        GROUP, VERSION, "default", "resourceclaims", name, {"status": status}
    )


def test_slices_are_listed_by_node_and_by_driver_as_kube_apiserver_selects_them(apiserver):
    api = _api(apiserver)
    api.create_cluster_custom_object(GROUP, VERSION, "resourceslices", _slice("a", "node-1"))
    api.create_cluster_custom_object(GROUP, VERSION, "resourceslices", _slice("b", "node-2"))
    api.create_cluster_custom_object(
        GROUP, VERSION, "resourceslices", _slice("c", "node-2", "other.example.com")
    )

    def names(selector: str) -> list[str]:
        found = api.list_cluster_custom_object(GROUP, VERSION, "resourceslices", field_selector=selector)
        return sorted(o["metadata"]["name"] for o in found["items"])

    assert names("spec.nodeName=node-2") == ["b", "c"]
    assert names(f"spec.nodeName=node-2,spec.driver={DRIVER}") == ["b"]
    with pytest.raises(ApiException) as exc:
        names("spec.pool.name=node-1")
    assert exc.value.status == 400


def test_a_slice_with_both_shared_counters_and_devices_is_refused(apiserver):
    counters = [{"name": "gpu-0-counter-set", "counters": {"memory-slice-0": {"value": "1"}}}]
    with pytest.raises(ApiException) as exc:
        _api(apiserver).create_cluster_custom_object(
            GROUP, VERSION, "resourceslices", _slice("both", sharedCounters=counters)
        )
    assert "only one of `sharedCounters` or `devices` is allowed" in _refusal(exc)["message"]
    assert apiserver.get("resourceslices", "both") is None


@pytest.mark.parametrize("name", ["mig-1g.10gb", "kubernetes.io/mig", "nvidia.com/", "Nvidia.com/gpu"])
def test_a_device_class_extended_resource_name_must_be_an_extended_resource_name(apiserver, name):
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "DeviceClass",
        "metadata": {"name": "bad"},
        "spec": {"extendedResourceName": name},
    }
    with pytest.raises(ApiException) as exc:
        _api(apiserver).create_cluster_custom_object(GROUP, VERSION, "deviceclasses", body)
    assert "spec.extendedResourceName" in _refusal(exc)["message"]
    good = {**body, "metadata": {"name": "good"}, "spec": {"extendedResourceName": "nvidia.com/mig-1g.10gb"}}
    _api(apiserver).create_cluster_custom_object(GROUP, VERSION, "deviceclasses", good)


def test_a_slice_must_say_which_nodes_it_serves_and_count_its_pool(apiserver):
    body = _slice("nowhere")
    del body["spec"]["nodeName"]
    body["spec"]["pool"]["resourceSliceCount"] = 0
    with pytest.raises(ApiException) as exc:
        _api(apiserver).create_cluster_custom_object(GROUP, VERSION, "resourceslices", body)
    fields = {c["field"] for c in _refusal(exc)["details"]["causes"]}
    assert fields == {"spec", "spec.pool.resourceSliceCount"}


def test_a_slice_keeps_its_pool_and_driver_and_counts_its_spec_changes(apiserver):
    api = _api(apiserver)
    created = api.create_cluster_custom_object(GROUP, VERSION, "resourceslices", _slice("s"))
    assert created["metadata"]["generation"] == 1
    moved = {"spec": {"pool": {"name": "elsewhere", "generation": 2, "resourceSliceCount": 1}}}
    with pytest.raises(ApiException) as exc:
        api.patch_cluster_custom_object(GROUP, VERSION, "resourceslices", "s", moved)
    assert _refusal(exc)["details"]["causes"][0]["field"] == "spec.pool.name"
    republished = {"spec": {"pool": {"name": "node-1", "generation": 2, "resourceSliceCount": 1}}}
    updated = api.patch_cluster_custom_object(GROUP, VERSION, "resourceslices", "s", republished)
    assert updated["metadata"]["generation"] == 2


def test_a_new_claim_starts_unallocated_whatever_its_body_says(apiserver):
    body = _claim("c") | {"status": {"allocation": ALLOCATION, "reservedFor": RESERVED}}
    created = _api(apiserver).create_namespaced_custom_object(
        GROUP, VERSION, "default", "resourceclaims", body
    )
    assert not created.get("status")


def test_a_claims_status_is_written_only_through_the_status_subresource(apiserver):
    api = _api(apiserver)
    api.create_namespaced_custom_object(GROUP, VERSION, "default", "resourceclaims", _claim("c"))
    api.patch_namespaced_custom_object(
        GROUP, VERSION, "default", "resourceclaims", "c", {"status": {"allocation": ALLOCATION}}
    )
    assert not apiserver.get("resourceclaims", "c", "default").get("status")
    _write_status(api, "c", {"allocation": ALLOCATION, "reservedFor": RESERVED})
    status = apiserver.get("resourceclaims", "c", "default")["status"]
    assert status["allocation"] == ALLOCATION and status["reservedFor"] == RESERVED


def test_a_claims_spec_cannot_change_after_create(apiserver):
    api = _api(apiserver)
    api.create_namespaced_custom_object(GROUP, VERSION, "default", "resourceclaims", _claim("c"))
    other = {"spec": {"devices": {"requests": [{"name": "two", "exactly": {"deviceClassName": "x"}}]}}}
    with pytest.raises(ApiException) as exc:
        api.patch_namespaced_custom_object(GROUP, VERSION, "default", "resourceclaims", "c", other)
    assert "spec: field is immutable" in _refusal(exc)["message"]


def test_an_allocation_once_set_can_only_be_cleared(apiserver):
    api = _api(apiserver)
    api.create_namespaced_custom_object(GROUP, VERSION, "default", "resourceclaims", _claim("c"))
    _write_status(api, "c", {"allocation": ALLOCATION})
    moved = json.loads(json.dumps(ALLOCATION))
    moved["devices"]["results"][0]["device"] = "gpu-0-mig-1g5gb-19-1"
    with pytest.raises(ApiException) as exc:
        _write_status(api, "c", {"allocation": moved})
    assert _refusal(exc)["details"]["causes"][0]["field"] == "status.allocation"
    _write_status(api, "c", {"allocation": None})
    assert "allocation" not in (apiserver.get("resourceclaims", "c", "default").get("status") or {})


def test_a_claim_is_reserved_only_once_allocated(apiserver):
    api = _api(apiserver)
    api.create_namespaced_custom_object(GROUP, VERSION, "default", "resourceclaims", _claim("c"))
    with pytest.raises(ApiException) as exc:
        _write_status(api, "c", {"reservedFor": RESERVED})
    assert "may not be specified when `allocated` is not set" in _refusal(exc)["message"]


def test_a_claim_request_names_one_kind_of_request(apiserver):
    body = _claim("c")
    body["spec"]["devices"]["requests"][0] = {"name": "gpu"}
    with pytest.raises(ApiException) as exc:
        _api(apiserver).create_namespaced_custom_object(GROUP, VERSION, "default", "resourceclaims", body)
    assert _refusal(exc)["details"]["causes"][0]["field"] == "spec.devices.requests[0]"


def test_a_claim_template_cannot_change_after_create(apiserver):
    api = _api(apiserver)
    template = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t"},
        "spec": {"spec": _claim("x")["spec"]},
    }
    api.create_namespaced_custom_object(GROUP, VERSION, "default", "resourceclaimtemplates", template)
    with pytest.raises(ApiException) as exc:
        api.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            "default",
            "resourceclaimtemplates",
            "t",
            {"spec": {"spec": {"devices": {"requests": []}}}},
        )
    assert _refusal(exc)["details"]["causes"][0]["field"] == "spec"


def test_hostile_resource_bodies_are_refused_naming_the_field(apiserver):
    api = _api(apiserver)
    hostile = _slice("h")
    hostile["spec"] = {"driver": 7, "pool": "nope", "nodeName": "", "devices": "many"}
    with pytest.raises(ApiException) as exc:
        api.create_cluster_custom_object(GROUP, VERSION, "resourceslices", hostile)
    fields = {c["field"] for c in _refusal(exc)["details"]["causes"]}
    assert {"spec.driver", "spec.pool.name", "spec.nodeName", "spec.devices"} <= fields
    api.create_namespaced_custom_object(GROUP, VERSION, "default", "resourceclaims", _claim("c"))
    with pytest.raises(ApiException) as exc:
        _write_status(api, "c", {"allocation": ALLOCATION, "reservedFor": [{"uid": 3}, "x"]})
    assert "status.reservedFor[0].resource" in {c["field"] for c in _refusal(exc)["details"]["causes"]}


def _rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.strip().splitlines()]


def test_kubectl_get_prints_claims_slices_and_classes_with_kube_apiservers_columns(apiserver, run):
    api = _api(apiserver)
    api.create_cluster_custom_object(GROUP, VERSION, "resourceslices", _slice("node-1-gpus"))
    api.create_cluster_custom_object(
        GROUP, VERSION, "deviceclasses", {"metadata": {"name": "mig.example.com"}, "spec": {}}
    )
    for name in ("pending-claim", "reserved-claim"):
        api.create_namespaced_custom_object(GROUP, VERSION, "default", "resourceclaims", _claim(name))
    _write_status(api, "reserved-claim", {"allocation": ALLOCATION, "reservedFor": RESERVED})

    claims = _rows(run("get", "resourceclaims"))
    assert claims[0] == ["NAME", "STATE", "AGE"]
    assert [r[:2] for r in claims[1:]] == [
        ["pending-claim", "pending"],
        ["reserved-claim", "allocated,reserved"],
    ]
    slices = _rows(run("get", "resourceslices"))
    assert slices[0] == ["NAME", "NODE", "DRIVER", "POOL", "AGE"]
    assert slices[1][:4] == ["node-1-gpus", "node-1", DRIVER, "node-1"]
    classes = _rows(run("get", "deviceclasses"))
    assert classes[0] == ["NAME", "AGE"] and classes[1][0] == "mig.example.com"
    together = run("get", "resourceclaims,resourceslices,deviceclasses")
    assert "resourceclaim.resource.k8s.io/reserved-claim" in together
    assert "resourceslice.resource.k8s.io/node-1-gpus" in together


def test_kubectl_applies_a_claim_template_and_a_class_from_a_file(apiserver, run, tmp_path):
    manifest = tmp_path / "dra.yaml"
    manifest.write_text(
        f"""apiVersion: {GROUP}/{VERSION}
kind: DeviceClass
metadata: {{name: mig.example.com}}
spec:
  selectors: [{{cel: {{expression: 'device.driver == "{DRIVER}"'}}}}]
---
apiVersion: {GROUP}/{VERSION}
kind: ResourceClaimTemplate
metadata: {{name: one-mig}}
spec:
  spec:
    devices:
      requests: [{{name: gpu, exactly: {{deviceClassName: mig.example.com}}}}]
"""
    )
    run("apply", "-f", str(manifest))
    assert _rows(run("get", "resourceclaimtemplates"))[1][0] == "one-mig"
    assert apiserver.get("deviceclasses", "mig.example.com")["metadata"]["generation"] == 1
