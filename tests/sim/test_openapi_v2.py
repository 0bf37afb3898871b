"""`/openapi/v2` on the simulated API server: what kubectl 1.35 reads to validate a `kind: List` on the
client (the v3 documents cover single objects), and what any client can fetch."""

from __future__ import annotations

import json

import pytest
from sim.apiserver import protobuf

PROTOBUF = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"


def _pod(name: str, container: dict | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "train"}},
        "spec": {"containers": [container or {"name": "c", "image": "busybox"}]},
    }


def _list(*items: dict) -> str:
    return json.dumps(
        {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": list(items)}
    )


CONFIGMAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"k": "v"}}


def test_kubectl_apply_of_a_list_of_two_pods_creates_both(run, apiserver):
    out = run("apply", "-f", "-", stdin=_list(_pod("a"), _pod("b")))
    assert "pod/a created" in out and "pod/b created" in out
    assert apiserver.get("pods", "a", "default") and apiserver.get("pods", "b", "default")


def test_kubectl_create_of_a_list_mixing_a_configmap_and_a_pod_creates_both(run, apiserver):
    out = run("create", "-f", "-", stdin=_list(CONFIGMAP, _pod("a")))
    assert "configmap/settings created" in out and "pod/a created" in out
    assert apiserver.get("configmaps", "settings", "default")["data"] == {"k": "v"}


def test_kubectl_apply_of_a_list_file_written_by_get_o_yaml_works_again_after_a_change(
    run, apiserver, tmp_path
):
    run("apply", "-f", "-", stdin=_list(_pod("a"), _pod("b")))
    dump = tmp_path / "pods.json"
    dump.write_text(run("get", "pods", "-o", "json"))
    assert json.loads(dump.read_text())["kind"] == "List"
    labelled = json.loads(dump.read_text())
    for item in labelled["items"]:
        item["metadata"]["labels"]["tier"] = "gpu"
    dump.write_text(json.dumps(labelled))
    out = run("apply", "-f", str(dump))
    assert "pod/a configured" in out and "pod/b configured" in out
    assert apiserver.get("pods", "a", "default")["metadata"]["labels"] == {"app": "train", "tier": "gpu"}
    # the containers list is merged by name, as kubectl's built-in strategic merge keys say
    assert [c["name"] for c in apiserver.get("pods", "b", "default")["spec"]["containers"]] == ["c"]


def test_kubectl_apply_of_a_list_whose_pod_has_an_unknown_field_fails_naming_it(run, apiserver):
    typo = _pod("b", {"name": "c", "imagee": "busybox"})
    err = run("apply", "-f", "-", stdin=_list(_pod("a"), typo), ok=False)
    assert 'error validating data: ValidationError(Pod.spec.containers[0]): unknown field "imagee"' in err
    assert "turn validation off with --validate=false" in err
    assert apiserver.get("pods", "a", "default") is None and apiserver.get("pods", "b", "default") is None


def test_kubectl_create_of_a_list_with_a_field_of_the_wrong_type_fails_naming_it(run, apiserver):
    wrong = {**CONFIGMAP, "data": ["k", "v"]}
    err = run("create", "-f", "-", stdin=_list(wrong, _pod("a")), ok=False)
    assert "ValidationError(ConfigMap.data): invalid type for" in err
    assert 'got "array", expected "map"' in err
    assert apiserver.get("pods", "a", "default") is None


def test_kubectl_create_of_a_list_with_validate_false_skips_the_schema(run, apiserver):
    typo = _pod("a", {"name": "c", "image": "busybox", "imagee": "x"})
    run("create", "--validate=false", "-f", "-", stdin=_list(typo))
    assert apiserver.get("pods", "a", "default")["spec"]["containers"][0]["image"] == "busybox"


def test_kubectl_server_side_apply_of_a_list_passes_validation_and_applies_each_item(run, apiserver):
    single = run("apply", "--server-side", "-f", "-", stdin=json.dumps(_pod("a")))
    listed = run("apply", "--server-side", "-f", "-", stdin=_list(CONFIGMAP, _pod("a")))
    assert "pod/a serverside-applied" in single
    assert "configmap/settings serverside-applied" in listed and "pod/a serverside-applied" in listed
    assert apiserver.get("configmaps", "settings", "default")["data"] == CONFIGMAP["data"]


def test_kubectl_replace_of_a_list_written_by_get_replaces_both(run, apiserver):
    run("create", "-f", "-", stdin=_list(CONFIGMAP, _pod("a")))
    dump = json.loads(run("get", "configmap/settings", "pod/a", "-o", "json"))
    assert dump["kind"] == "List"
    dump["items"][0]["data"] = {"k": "w"}
    dump["items"][1]["spec"]["containers"][0]["image"] = "busybox:2"
    out = run("replace", "-f", "-", stdin=json.dumps(dump))
    assert "configmap/settings replaced" in out and "pod/a replaced" in out
    assert apiserver.get("configmaps", "settings", "default")["data"] == {"k": "w"}
    assert apiserver.get("pods", "a", "default")["spec"]["containers"][0]["image"] == "busybox:2"


# ---- the endpoint itself -------------------------------------------------------------------------


def _get(apiserver, accept: str | None, etag: str | None = None) -> tuple[int, dict, bytes]:
    """GET /openapi/v2 through the official client (its ApiClient signs and sends the request)."""
    api = apiserver.api_client("admin")
    headers = {"Accept": accept} if accept is not None else {}
    if etag is not None:
        headers["If-None-Match"] = etag
    request = api.param_serialize("GET", "/openapi/v2", header_params=headers, auth_settings=["BearerToken"])
    resp = api.call_api(*request)
    return resp.status, dict(resp.getheaders()), resp.read()


@pytest.mark.parametrize("accept", [None, "application/json", "*/*", "application/*"])
def test_openapi_v2_is_json_swagger_with_each_kind_found_by_its_group_version_kind(apiserver, accept):
    code, headers, body = _get(apiserver, accept)
    assert code == 200 and headers["Content-Type"] == "application/json"
    doc = json.loads(body)
    assert doc["swagger"] == "2.0"
    kinds = {
        (g["group"], g["version"], g["kind"]): name
        for name, d in doc["definitions"].items()
        for g in d.get("x-kubernetes-group-version-kind", [])
    }
    pod = doc["definitions"][kinds[("", "v1", "Pod")]]
    assert pod["properties"]["spec"] == {
        "$ref": "#/definitions/" + pod["properties"]["spec"]["$ref"].split("/")[-1]
    }
    assert ("apps", "v1", "Deployment") in kinds and ("", "v1", "ConfigMap") in kinds
    refs = {
        v["$ref"]
        for d in doc["definitions"].values()
        for v in d.get("properties", {}).values()
        if "$ref" in v
    }
    assert {r.removeprefix("#/definitions/") for r in refs} <= set(doc["definitions"])


def test_openapi_v2_in_protobuf_names_the_same_definitions_as_the_json(apiserver):
    _, _, body = _get(apiserver, "application/json")
    names = set(json.loads(body)["definitions"])
    code, headers, pb = _get(apiserver, "application/com.github.proto-openapi.spec.v2@v1.0+protobuf")
    assert code == 200 and headers["Content-Type"] == PROTOBUF
    fields = dict((n, v) for n, _, v in protobuf._fields(pb) if n in (1, 9))
    assert fields[1] == b"2.0"
    named = [
        dict((n, v) for n, _, v in protobuf._fields(entry)) for _, _, entry in protobuf._fields(fields[9])
    ]
    assert {e[1].decode() for e in named} == names


def test_openapi_v2_answers_304_to_its_own_etag_and_406_to_a_type_it_cannot_write(apiserver):
    _, headers, _ = _get(apiserver, "application/json")
    assert headers["Etag"].startswith('"') and headers["Etag"].endswith('"')
    assert _get(apiserver, "application/json", headers["Etag"])[0] == 304
    assert _get(apiserver, "application/json", "W/" + headers["Etag"])[0] == 304
    assert _get(apiserver, "application/json", '"stale"')[0] == 200
    _, pb_headers, _ = _get(apiserver, PROTOBUF)
    assert pb_headers["Etag"] != headers["Etag"]
    assert _get(apiserver, "text/html")[0] == 406


def test_kubectl_explain_still_reads_the_v3_schema(run):
    assert "FIELD: resources <ResourceRequirements>" in run("explain", "pod.spec.containers.resources")


def test_kubectl_get_raw_openapi_v2_returns_the_document(run):
    doc = json.loads(run("get", "--raw", "/openapi/v2"))
    assert doc["swagger"] == "2.0" and doc["paths"] == {}
