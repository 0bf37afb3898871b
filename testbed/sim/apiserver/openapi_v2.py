"""`/openapi/v2`: the whole API's Swagger 2.0 document, in JSON or gnostic's protobuf, as kube-apiserver
serves it.

Who reads it: kubectl 1.35 validates `create -f`/`apply -f`/`replace -f` with `--validate=strict` by
default. For a kind whose OpenAPI v3 PATCH operation takes `fieldValidation` it leaves validation to
the server; for anything else, notably a `kind: List` (what `kubectl get -o yaml` writes), it
validates on the client against this document: client-go's `OpenAPISchema()` GETs `/openapi/v2`
with Accept `application/com.github.proto-openapi.spec.v2@v1.0+protobuf` (no JSON or
`/swagger-2.0.0.pb-v1` fallback) and unmarshals gnostic's `openapi_v2.Document`; kubectl then finds
each item's definition by its `x-kubernetes-group-version-kind` and reports unknown fields and wrong
types by path. The definitions are the kinds' schemas the v3 documents use (schemas.py), with
`$ref: "#/definitions/..."` as Swagger 2.0 writes references.

`paths` is served empty on purpose: kubectl apply, when a v3 PATCH operation lacks strategic merge
patch, asks this document which patch types the kind's PATCH consumes; any answer without strategic
merge would switch it to JSON merge patch, and one with it would make it merge lists by this
document's keys, which carry no `x-kubernetes-patch-merge-key`. With no path for the kind kubectl
computes strategic merge patches from its built-in types, as it does today.

Negotiation as kube-openapi's handler does it: Accept clauses in order of preference; JSON for
`application/json` and `*/*` (or no Accept), protobuf for either protobuf media type (answered as
`application/com.github.proto-openapi.spec.v2.v1.0+protobuf`), 406 otherwise; a quoted ETag (the
SHA-512 of the body, per encoding) and 304 for a matching If-None-Match. Both bodies are built once.

Protobuf field numbers: gnostic-models `openapiv2/OpenAPIv2.proto` (package openapi.v2), read at
commit a84a29ee8efac8d764f8dd251aa316fcaa61c60c: Document{swagger=1, info=2, paths=8,
definitions=9}, Info{title=1, version=2}, Paths{path=2}, Definitions and Properties
{additional_properties=1}, NamedSchema{name=1, value=2}, NamedAny{name=1, value=2}, Any{yaml=2},
Schema{_ref=1, format=2, description=4, unique_items=16, required=19, additional_properties=21,
type=22, items=23, all_of=24, properties=25, vendor_extension=31}, AdditionalPropertiesItem
{schema=1, boolean=2}, TypeItem{value=1}, ItemsItem{schema=1}.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from typing import Any

from sim.apiserver import openapi, schemas
from sim.apiserver.protobuf import encode_bool, encode_bytes, encode_string
from sim.apiserver.resources import RESOURCES

JSON = "application/json"
PROTOBUF = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
# (type, subtype) a client may ask for -> what is served, in kube-openapi's order
_ACCEPTED = (
    ("application", "json", JSON),
    ("application", "com.github.proto-openapi.spec.v2@v1.0+protobuf", PROTOBUF),
    ("application", "com.github.proto-openapi.spec.v2.v1.0+protobuf", PROTOBUF),
)
_V3_REF = "#/components/schemas/"


def _v2_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A v3 component schema in Swagger 2.0 form: references are bare `$ref`s to definitions."""
    if (all_of := schema.get("allOf")) and len(all_of) == 1 and "$ref" in all_of[0]:
        return {"$ref": "#/definitions/" + all_of[0]["$ref"].removeprefix(_V3_REF)}
    out = dict(schema)
    if "properties" in out:
        out["properties"] = {k: _v2_schema(v) for k, v in out["properties"].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), dict):
            out[key] = _v2_schema(out[key])
    return out


@cache
def document() -> dict[str, Any]:
    roots: dict[str, tuple[str, str, str]] = {}
    for rt in RESOURCES:
        model = schemas.model_of(rt)
        if model is not None and (rt.group, rt.version) in openapi.group_versions():
            roots[model] = (rt.group, rt.version, rt.kind)
    definitions = {name: _v2_schema(s) for name, s in schemas.component_schemas(roots).items()}
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": "v1.35.0-dynmig-sim"},
        "paths": {},
        "definitions": dict(sorted(definitions.items())),
    }


# ---- gnostic protobuf ---------------------------------------------------------------------------


def _named(number: int, name: str, value: bytes) -> bytes:
    return encode_bytes(number, encode_string(1, name) + encode_bytes(2, value))


def _pb_schema(schema: dict[str, Any]) -> bytes:
    out = b""
    for key, value in schema.items():
        if key == "$ref":
            out += encode_string(1, value)
        elif key == "format":
            out += encode_string(2, value)
        elif key == "description":
            out += encode_string(4, value)
        elif key == "uniqueItems":
            out += encode_bool(16, value)
        elif key == "required":
            out += b"".join(encode_string(19, r) for r in value)
        elif key == "additionalProperties":
            inner = encode_bool(2, value) if isinstance(value, bool) else encode_bytes(1, _pb_schema(value))
            out += encode_bytes(21, inner)
        elif key == "type":
            out += encode_bytes(22, encode_string(1, value))
        elif key == "items":
            out += encode_bytes(23, encode_bytes(1, _pb_schema(value)))
        elif key == "allOf":
            out += b"".join(encode_bytes(24, _pb_schema(s)) for s in value)
        elif key == "properties":  # present even when empty: kubectl reads "no properties" as a map
            out += encode_bytes(25, b"".join(_named(1, k, _pb_schema(v)) for k, v in value.items()))
        elif key.startswith("x-"):  # vendor extensions travel as YAML text; JSON is YAML
            out += _named(31, key, encode_string(2, json.dumps(value)))
        else:
            raise ValueError(f"no protobuf encoding for the schema keyword {key!r}")
    return out


def _pb_document(doc: dict[str, Any]) -> bytes:
    info = encode_string(1, doc["info"]["title"]) + encode_string(2, doc["info"]["version"])
    definitions = b"".join(_named(1, name, _pb_schema(s)) for name, s in doc["definitions"].items())
    return (
        encode_string(1, doc["swagger"])
        + encode_bytes(2, info)
        + encode_bytes(8, b"")  # paths: none (see the module docstring)
        + encode_bytes(9, definitions)
    )


@cache
def encoded(media_type: str) -> tuple[bytes, str]:
    """(body, quoted ETag) for JSON or PROTOBUF."""
    doc = document()
    body = json.dumps(doc, separators=(",", ":")).encode() if media_type == JSON else _pb_document(doc)
    return body, '"' + hashlib.sha512(body).hexdigest().upper() + '"'


def _clauses(accept: str) -> list[tuple[str, str]]:
    """(type, subtype) of each Accept clause, most preferred first (q=0 clauses dropped)."""
    ranked: list[tuple[float, int, str, str]] = []
    for i, clause in enumerate(accept.split(",")[:64]):
        media, *params = (p.strip() for p in clause.split(";"))
        q = 1.0
        for p in params:
            name, _, value = p.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        kind, _, sub = media.lower().partition("/")
        if kind and q > 0:
            ranked.append((-q, i, kind, sub or "*"))
    return [(kind, sub) for _, _, kind, sub in sorted(ranked)]


def negotiate(accept: str) -> str | None:
    """The media type to serve for an Accept header, or None (406)."""
    for kind, sub in _clauses(accept or "*/*"):
        for want_kind, want_sub, served in _ACCEPTED:
            if kind in (want_kind, "*") and sub in (want_sub, "*"):
                return served
    return None
