"""OpenAPI v3 discovery (`/openapi/v3`) and one document per group-version, as kube-apiserver serves.

What a client does with them: kubectl 1.35 validates `create -f`/`apply`/`replace` with
`--validate=strict` by default. It first asks the group-version's OpenAPI v3 document whether the
kind's PATCH operation takes the `fieldValidation` query parameter; when it does, kubectl leaves
validation to the server and sends `fieldValidation=Strict` (registry.py refuses unknown fields
then). So each document lists, per resource, its operations with `x-kubernetes-group-version-kind`
and the write parameters, plus the kinds' schemas (schemas.py) for `kubectl explain`.

The PATCH request body lists apply patch (server-side apply, apply.py), JSON patch and merge patch:
the schemas carry no strategic-merge keys, so kubectl computes strategic merge patches from its
built-in types, as for any server whose document lacks them.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from typing import Any

from sim.apiserver import schemas
from sim.apiserver.resources import RESOURCES, ResourceType

WRITE_PARAMS = ("dryRun", "fieldManager", "fieldValidation")


def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def group_versions() -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    for rt in RESOURCES:
        if (rt.group, rt.version) not in seen and schemas.model_of(rt):
            seen.append((rt.group, rt.version))
    return seen


def root() -> dict[str, Any]:
    """`/openapi/v3`: where each group-version's document is, with a content hash."""
    paths = {}
    for group, version in group_versions():
        digest = hashlib.sha512(_encoded(group, version)).hexdigest().upper()
        paths[_gv_path(group, version)] = {
            "serverRelativeURL": f"/openapi/v3/{_gv_path(group, version)}?hash={digest}"
        }
    return {"paths": paths}


def document(path: str) -> bytes | None:
    """The encoded document for `api/v1` or `apis/<group>/<version>`, or None."""
    for group, version in group_versions():
        if _gv_path(group, version) == path.strip("/"):
            return _encoded(group, version)
    return None


@cache
def _encoded(group: str, version: str) -> bytes:
    return json.dumps(_document(group, version), separators=(",", ":")).encode()


def _param(name: str, where: str = "query") -> dict[str, Any]:
    return {
        "name": name,
        "in": where,
        "schema": {"type": "string", "uniqueItems": True},
        **({"required": True} if where == "path" else {}),
    }


def _operation(
    rt: ResourceType, action: str, verb: str, body: str | None, model: str, params: tuple[str, ...] = ()
) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": f"{verb}{rt.kind}",
        "parameters": [_param(p) for p in params],
        "responses": {
            "200": {"description": "OK", "content": {"application/json": {"schema": schemas.ref(model)}}}
        },
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
    }
    if body == "object":
        op["requestBody"] = {
            "content": {"application/json": {"schema": schemas.ref(model)}},
            "required": True,
        }
    elif body == "patch":
        patch = {"schema": {"type": "object"}}
        op["requestBody"] = {
            "content": {
                "application/apply-patch+yaml": patch,
                "application/json-patch+json": patch,
                "application/merge-patch+json": patch,
            },
            "required": True,
        }
    return op


def _paths(rt: ResourceType, model: str) -> dict[str, Any]:
    base = "/" + _gv_path(rt.group, rt.version) + ("/namespaces/{namespace}" if rt.namespaced else "")
    scope = [_param("namespace", "path")] if rt.namespaced else []
    named = [*scope, _param("name", "path")]
    collection: dict[str, Any] = {"parameters": scope}
    item: dict[str, Any] = {"parameters": named}
    if "list" in rt.verbs:
        collection["get"] = _operation(
            rt, "list", "list", None, model, ("labelSelector", "fieldSelector", "resourceVersion", "watch")
        )
    if "create" in rt.verbs:
        collection["post"] = _operation(rt, "post", "create", "object", model, WRITE_PARAMS)
    if "get" in rt.verbs:
        item["get"] = _operation(rt, "get", "read", None, model)
    if "update" in rt.verbs:
        item["put"] = _operation(rt, "put", "replace", "object", model, WRITE_PARAMS)
    if "patch" in rt.verbs:
        item["patch"] = _operation(rt, "patch", "patch", "patch", model, (*WRITE_PARAMS, "force"))
    if "delete" in rt.verbs:
        item["delete"] = _operation(rt, "delete", "delete", None, model, ("dryRun", "gracePeriodSeconds"))
    out = {f"{base}/{rt.plural}": collection}
    if len(item) > 1:
        out[f"{base}/{rt.plural}/{{name}}"] = item
    if "status" in rt.subresources:
        out[f"{base}/{rt.plural}/{{name}}/status"] = {
            "parameters": named,
            "get": _operation(rt, "get", "read", None, model),
            "put": _operation(rt, "put", "replace", "object", model, WRITE_PARAMS),
            "patch": _operation(rt, "patch", "patch", "patch", model, (*WRITE_PARAMS, "force")),
        }
    return out


def _document(group: str, version: str) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    roots: dict[str, tuple[str, str, str]] = {}
    for rt in RESOURCES:
        model = schemas.model_of(rt)
        if rt.group != group or rt.version != version or model is None:
            continue
        roots[model] = (rt.group, rt.version, rt.kind)
        paths.update(_paths(rt, model))
    title = "Kubernetes" if not group else f"Kubernetes {group}"
    return {
        "openapi": "3.0.0",
        "info": {"title": title, "version": "v1.35.0-dynmig-sim"},
        "paths": paths,
        "components": {"schemas": schemas.component_schemas(roots)},
    }
