"""The Kubernetes object schemas the simulated API server knows, for its OpenAPI v3 documents and
for server-side field validation (`fieldValidation=Strict|Warn|Ignore`).

Where the facts come from: the official Kubernetes Python client's generated models
(`kubernetes.client.models`), which are generated from kube-apiserver's own OpenAPI document and
carry, per type, each field's JSON name and type. They describe Kubernetes, not dynmig, so the
simulation learns the real field set from them instead of a hand-written copy.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from kubernetes.client import models

from sim.apiserver.resources import ResourceType

# (group, kind) -> the client's model class for that kind
MODELS = {
    ("", "Pod"): "V1Pod",
    ("", "Namespace"): "V1Namespace",
    ("", "Node"): "V1Node",
    ("", "Event"): "CoreV1Event",
    ("", "Secret"): "V1Secret",
    ("", "ConfigMap"): "V1ConfigMap",
    ("", "Service"): "V1Service",
    ("", "ServiceAccount"): "V1ServiceAccount",
    ("", "Binding"): "V1Binding",
    ("coordination.k8s.io", "Lease"): "V1Lease",
    ("policy", "PodDisruptionBudget"): "V1PodDisruptionBudget",
    ("events.k8s.io", "Event"): "EventsV1Event",
    ("apps", "Deployment"): "V1Deployment",
    ("apps", "ReplicaSet"): "V1ReplicaSet",
    ("apps", "DaemonSet"): "V1DaemonSet",
    ("batch", "Job"): "V1Job",
    ("rbac.authorization.k8s.io", "ClusterRole"): "V1ClusterRole",
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): "V1ClusterRoleBinding",
    ("rbac.authorization.k8s.io", "Role"): "V1Role",
    ("rbac.authorization.k8s.io", "RoleBinding"): "V1RoleBinding",
    ("networking.k8s.io", "NetworkPolicy"): "V1NetworkPolicy",
    ("resource.k8s.io", "DeviceClass"): "V1DeviceClass",
    ("resource.k8s.io", "ResourceSlice"): "V1ResourceSlice",
    ("resource.k8s.io", "ResourceClaim"): "ResourceV1ResourceClaim",
    ("resource.k8s.io", "ResourceClaimTemplate"): "V1ResourceClaimTemplate",
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"): "V1MutatingWebhookConfiguration",
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"): "V1ValidatingWebhookConfiguration",
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"): "V1ValidatingAdmissionPolicy",
    (
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicyBinding",
    ): "V1ValidatingAdmissionPolicyBinding",
}
_LIST = re.compile(r"^List\[(.+)\]$")
_DICT = re.compile(r"^Dict\[str, (.+)\]$")
MAX_REPORTED = 20  # unknown fields named in one error; the rest are counted


def model_of(rt: ResourceType) -> str | None:
    return MODELS.get((rt.group, rt.kind))


@cache
def fields_of(model: str) -> dict[str, str]:
    """JSON field name -> client type string ("str", "List[V1Container]", "Dict[str, str]", ...)."""
    cls = getattr(models, model)
    return {cls.attribute_map[attr]: kind for attr, kind in cls.openapi_types.items()}


@cache
def is_model(kind: str) -> bool:
    return hasattr(models, kind) and hasattr(getattr(models, kind), "openapi_types")


def unknown_fields(model: str, obj: Any, path: str = "", out: list[str] | None = None) -> list[str]:
    """Paths of the fields in `obj` that `model` does not have, as kube-apiserver's strict decoder
    names them (`spec.containers[0].imagee`)."""
    out = [] if out is None else out
    if not isinstance(obj, dict):
        return out
    known = fields_of(model)
    for key, value in obj.items():
        here = f"{path}.{key}" if path else key
        kind = known.get(key)
        if kind is None:
            out.append(here)
        else:
            _walk(kind, value, here, out)
    return out


def _walk(kind: str, value: Any, path: str, out: list[str]) -> None:
    if len(out) > MAX_REPORTED:
        return
    shape, inner = _shape(kind)
    if shape == "list" and isinstance(value, list):
        for i, item in enumerate(value):
            _walk(inner, item, f"{path}[{i}]", out)
    elif shape == "dict" and isinstance(value, dict):
        for key, item in value.items():
            _walk(inner, item, f"{path}.{key}", out)
    elif shape == "model":
        unknown_fields(kind, value, path, out)


@cache
def _shape(kind: str) -> tuple[str, str]:
    """("list" | "dict", item type), ("model", kind) or ("scalar", kind) for a client type string."""
    if m := _LIST.match(kind):
        return "list", m.group(1)
    if m := _DICT.match(kind):
        return "dict", m.group(1)
    return ("model" if is_model(kind) else "scalar"), kind


def describe_unknown(paths: list[str]) -> list[str]:
    shown = [f'unknown field "{p}"' for p in paths[:MAX_REPORTED]]
    if len(paths) > MAX_REPORTED:
        shown.append(f"and {len(paths) - MAX_REPORTED} more unknown fields")
    return shown


def duplicate_fields_hook(found: list[str]) -> Any:
    """A json.loads object_pairs_hook that records duplicated keys (strict decoding refuses them)."""

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out and len(found) <= MAX_REPORTED:
                found.append(key)
            out[key] = value
        return out

    return hook


# ---- OpenAPI v3 component schemas ------------------------------------------------------------------

_SCALARS: dict[str, dict[str, Any]] = {
    "str": {"type": "string"},
    "int": {"type": "integer", "format": "int64"},
    "float": {"type": "number", "format": "double"},
    "bool": {"type": "boolean"},
    "bytes": {"type": "string", "format": "byte"},
    "datetime": {"type": "string", "format": "date-time"},
    "object": {"x-kubernetes-preserve-unknown-fields": True},
}


_MODEL_NAME = re.compile(r"^([A-Z][a-z]+)??(V\d+(?:alpha\d+|beta\d+)?)([A-Z].*)$")


def schema_name(model: str) -> str:
    """A Kubernetes-style schema name for a client model: V1PodSpec -> io.k8s.api.v1.PodSpec."""
    m = _MODEL_NAME.match(model)
    if not m:
        return f"io.k8s.api.{model}"
    group, version, name = m.groups()
    return ".".join(p for p in ("io.k8s.api", (group or "").lower(), version.lower(), name) if p)


def _ref(model: str) -> str:
    return f"#/components/schemas/{schema_name(model)}"


def _schema_of(kind: str, needed: set[str]) -> dict[str, Any]:
    if kind in _SCALARS:
        return dict(_SCALARS[kind])
    if m := _LIST.match(kind):
        return {"type": "array", "items": _schema_of(m.group(1), needed)}
    if m := _DICT.match(kind):
        return {"type": "object", "additionalProperties": _schema_of(m.group(1), needed)}
    if is_model(kind):
        needed.add(kind)
        return {"allOf": [{"$ref": _ref(kind)}]}
    return {}


def component_schemas(roots: dict[str, tuple[str, str, str]]) -> dict[str, Any]:
    """OpenAPI v3 schemas for `roots` (model -> (group, version, kind)) and every type they use."""
    out: dict[str, Any] = {}
    todo = set(roots)
    while todo:
        model = todo.pop()
        if model in out:
            continue
        needed: set[str] = set()
        props = {name: _schema_of(kind, needed) for name, kind in fields_of(model).items()}
        schema: dict[str, Any] = {"type": "object", "properties": props}
        if model in roots:
            group, version, kind = roots[model]
            schema["x-kubernetes-group-version-kind"] = [{"group": group, "version": version, "kind": kind}]
        out[model] = schema
        todo |= needed - set(out)
    return {schema_name(m): schema for m, schema in out.items()}


def ref(model: str) -> dict[str, Any]:
    return {"$ref": _ref(model)}
