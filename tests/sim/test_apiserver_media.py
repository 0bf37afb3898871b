"""Content negotiation of the simulated API server over raw HTTP: protobuf bodies, Accept headers and
hostile bodies answered with the status kube-apiserver gives."""

from __future__ import annotations

import http.client
import json

import pytest


def _varint(n: int) -> bytes:
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        out += bytes([byte | (0x80 if n else 0)])
        if not n:
            return out


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _k8s_protobuf(api_version: str, kind: str, raw: bytes) -> bytes:
    type_meta = _field(1, api_version.encode()) + _field(2, kind.encode())
    return b"k8s\x00" + _field(1, type_meta) + _field(2, raw)


def _configmap(name: str, data: dict[str, str]) -> bytes:
    meta = _field(1, name.encode()) + _field(11, _field(1, b"team") + _field(2, b"ml"))
    entries = b"".join(_field(2, _field(1, k.encode()) + _field(2, v.encode())) for k, v in data.items())
    return _k8s_protobuf("v1", "ConfigMap", _field(1, meta) + entries)


@pytest.fixture
def call(apiserver):
    token = apiserver.identity("admin").token

    def request(
        method: str,
        path: str,
        body: bytes = b"",
        content_type: str = "application/json",
        accept: str = "application/json",
    ) -> tuple[int, dict]:
        conn = http.client.HTTPConnection(apiserver.host, apiserver.port, timeout=10)
        headers = {"Authorization": f"Bearer {token}", "Content-Type": content_type, "Accept": accept}
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        out = resp.status, json.loads(resp.read() or b"{}")
        conn.close()
        return out

    return request


PB = "application/vnd.kubernetes.protobuf"


def test_a_protobuf_configmap_is_stored_as_its_json_form(call, apiserver):
    code, created = call(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        _configmap("cm", {"a": "1"}),
        PB,
        f"{PB},application/json",
    )
    assert code == 201 and created["data"] == {"a": "1"}
    assert apiserver.get("configmaps", "cm", "default")["metadata"]["labels"] == {"team": "ml"}


def test_a_protobuf_body_of_a_kind_the_server_cannot_decode_gets_415_naming_json(call):
    body = _k8s_protobuf("coordination.k8s.io/v1", "Lease", _field(1, _field(1, b"l")))
    code, status = call("POST", "/apis/coordination.k8s.io/v1/namespaces/default/leases", body, PB)
    assert code == 415 and status["reason"] == "UnsupportedMediaType"
    assert "application/json" in status["message"]


@pytest.mark.parametrize(
    "body",
    [
        b"not protobuf at all",  # no magic prefix
        b"k8s\x00" + _varint(1 << 3 | 2) + _varint(10**9),  # a length past the end
        b"k8s\x00" + b"\xff" * 20,  # a varint that never ends
        b"k8s\x00" + _field(1, b"\x0a\x02\xff\xfe"),  # apiVersion that is not UTF-8
    ],
    ids=["no-magic", "length-past-end", "endless-varint", "not-utf8"],
)
def test_a_malformed_protobuf_body_is_a_400_and_the_connection_keeps_serving(call, body):
    code, status = call("POST", "/api/v1/namespaces", body, PB)
    assert code == 400 and "protobuf" in status["message"]
    assert call("GET", "/api/v1/namespaces/default")[0] == 200


def test_an_unknown_body_format_gets_415_and_an_accept_without_json_gets_406(call):
    code, status = call("POST", "/api/v1/namespaces", b"<xml/>", "application/xml")
    assert (code, status["reason"]) == (415, "UnsupportedMediaType")
    code, status = call("GET", "/api/v1/namespaces", accept=PB)
    assert (code, status["reason"]) == (406, "NotAcceptable")
    assert call("GET", "/api/v1/namespaces", accept=f"{PB},application/json")[0] == 200
    assert call("GET", "/api/v1/namespaces", accept="*/*")[0] == 200


def test_a_bad_json_body_is_a_400_and_the_next_request_on_the_connection_is_served(apiserver):
    token = apiserver.identity("admin").token
    conn = http.client.HTTPConnection(apiserver.host, apiserver.port, timeout=10)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    conn.request("POST", "/api/v1/namespaces", body=b"{not json", headers=headers)
    first = conn.getresponse()
    assert first.status == 400 and b"not valid JSON" in first.read()
    conn.request("GET", "/api/v1/namespaces/default", headers=headers)
    assert conn.getresponse().status == 200
    conn.close()


POD_TYPO = b'{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"c","imagee":"x"}]}}'


def test_strict_field_validation_refuses_unknown_and_duplicate_fields_and_ignore_accepts_them(
    call, apiserver
):
    code, status = call("POST", "/api/v1/namespaces/default/pods?fieldValidation=Strict", POD_TYPO)
    assert (code, status["reason"]) == (400, "BadRequest")
    assert status["message"] == (
        'Pod in version "v1" cannot be handled as a Pod: strict decoding error: '
        'unknown field "spec.containers[0].imagee"'
    )
    dup = b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","name":"d"}}'
    code, status = call("POST", "/api/v1/namespaces/default/configmaps?fieldValidation=Strict", dup)
    assert code == 400 and 'duplicate field "name"' in status["message"]
    assert call("POST", "/api/v1/namespaces/default/pods?fieldValidation=Ignore", POD_TYPO)[0] == 201
    code, status = call("POST", "/api/v1/namespaces/default/pods?fieldValidation=Loose", POD_TYPO)
    assert code == 400 and "Strict" in status["message"]


def test_strict_field_validation_applies_to_the_result_of_a_merge_patch(call, apiserver):
    apiserver.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})
    code, status = call(
        "PATCH",
        "/api/v1/namespaces/default/configmaps/c?fieldValidation=Strict",
        b'{"dta":{"a":"b"}}',
        "application/merge-patch+json",
    )
    assert code == 400 and 'unknown field "dta"' in status["message"]


def test_the_openapi_v3_root_points_at_a_document_whose_pod_patch_takes_field_validation(call):
    code, root = call("GET", "/openapi/v3")
    assert code == 200 and {"api/v1", "apis/apps/v1", "apis/coordination.k8s.io/v1"} <= set(root["paths"])
    code, doc = call("GET", root["paths"]["api/v1"]["serverRelativeURL"])
    patch = doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert "fieldValidation" in [p["name"] for p in patch["parameters"]]
    assert "resources" in doc["components"]["schemas"]["io.k8s.api.v1.Container"]["properties"]
    assert call("GET", "/openapi/v3/apis/nothing/v1")[0] == 404


@pytest.mark.parametrize(
    "query",
    [
        "limit=ten",
        "limit=-1",
        "continue=%7Bnot",
        "continue=%5B1%2C2%5D",
        "watch=maybe",
        "watch=1&timeoutSeconds=soon",
    ],
)
def test_malformed_list_and_watch_options_are_a_400(call, query):
    code, status = call("GET", f"/api/v1/namespaces/default/pods?{query}")
    assert (code, status["reason"]) == (400, "BadRequest")


def test_a_deeply_nested_body_is_a_400_not_a_crash(call):
    deep = b"[" * 100_000 + b"]" * 100_000
    code, status = call("POST", "/api/v1/namespaces/default/configmaps", deep)
    assert code == 400 and status["reason"] == "BadRequest"


def test_an_object_nested_just_under_the_parser_limit_is_refused_or_stored_never_a_500(call):
    value: dict = {}
    for _ in range(900):
        value = {"x": value}
    body = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "deep"},
            "binaryData": {},
            "data": {},
            "extra": value,
        }
    ).encode()
    assert call("POST", "/api/v1/namespaces/default/configmaps", body)[0] in (201, 400)


TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


@pytest.mark.parametrize(
    ("include", "row_object"),
    [
        ("Object", {"kind": "Namespace", "apiVersion": "v1"}),
        ("", {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1"}),
        ("Metadata", {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1"}),
    ],
)
def test_a_table_row_carries_the_object_kubectl_asks_for_with_include_object(call, include, row_object):
    status, doc = call("GET", f"/api/v1/namespaces?includeObject={include}", accept=TABLE)
    assert status == 200 and doc["kind"] == "Table"
    row = next(r for r in doc["rows"] if r["cells"][0] == "default")
    assert row_object.items() <= row["object"].items()
    assert ("status" in row["object"]) == (include == "Object")


def test_a_table_with_include_object_none_has_rows_without_objects(call):
    status, doc = call("GET", "/api/v1/namespaces/default?includeObject=None", accept=TABLE)
    assert status == 200 and doc["rows"][0]["object"] is None


def test_an_unknown_include_object_is_refused_naming_the_option_and_its_values(call):
    status, doc = call("GET", "/api/v1/namespaces?includeObject=Everything", accept=TABLE)
    assert status == 400
    assert "includeObject" in doc["message"] and '"Object"' in doc["message"]
