"""The body and options of a server-side apply (PATCH with `application/apply-patch+yaml`).

The body is YAML or JSON (kubectl and helm send JSON; JSON is read as JSON, anything else as one
YAML document with a safe loader). Hostile bodies get a 400 naming the problem: more than one
document, not an object, values YAML has that JSON lacks (timestamps stay strings, as the real
decoder keeps them; binary, sets, NaN are refused), nesting deeper than MAX_DEPTH, or more than
MAX_VALUES values once YAML aliases are expanded (the body itself is already capped at 3 MiB).
Then the object must be the one the URL names: kind and apiVersion of the resource, its name and
namespace, and no managedFields (kube-apiserver's apply patcher and field manager checks).
"""

from __future__ import annotations

import json
import math
from typing import Any, ClassVar

import yaml

from sim.apiserver.errors import ApiError
from sim.apiserver.resources import ResourceType

MAX_DEPTH = 100
MAX_VALUES = 200_000


class _TooDeep(Exception):
    pass


class _Loader(yaml.SafeLoader):
    """SafeLoader without the timestamp type, stopping at MAX_DEPTH nested nodes."""

    yaml_implicit_resolvers: ClassVar[dict[Any, list[tuple[str, Any]]]] = {
        first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _TooDeep
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _bad(message: str) -> ApiError:
    return ApiError(400, f"the apply patch is not a Kubernetes object: {message}", "BadRequest")


def decode(raw: bytes) -> dict[str, Any]:
    """The applied object, or a 400 naming what is wrong with the body."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _bad(f"the body is not UTF-8 text (byte {exc.start})") from exc
    head = text.lstrip()[:1]
    try:
        # JSON as JSON (what kubectl and helm send); else YAML through a SafeLoader subclass
        doc = json.loads(text) if head in ("{", "[") else yaml.load(text, Loader=_Loader)
    except (_TooDeep, RecursionError) as exc:
        raise _bad(f"it nests deeper than {MAX_DEPTH} levels") from exc
    except ValueError as exc:
        raise _bad(f"invalid JSON: {exc}") from exc
    except yaml.YAMLError as exc:  # the real patcher's wording
        raise ApiError(400, f"error decoding YAML: {' '.join(str(exc).split())[:300]}", "BadRequest") from exc
    if not isinstance(doc, dict):
        raise _bad(f"the body is {type(doc).__name__ if doc is not None else 'empty'}, not an object")
    return _plain(doc)


def _plain(doc: dict[str, Any]) -> dict[str, Any]:
    """The document as JSON values (string keys), checked for depth and expanded size without
    recursion: a YAML alias shares a node, so an alias bomb is counted, not copied, until the cap."""
    count = 0
    out: dict[str, Any] = {}
    stack: list[tuple[Any, Any, int]] = [(doc, out, 1)]
    while stack:
        src, dst, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise _bad(f"it nests deeper than {MAX_DEPTH} levels")
        pairs = src.items() if isinstance(src, dict) else enumerate(src)
        for key, value in pairs:
            count += 1
            if count > MAX_VALUES:
                raise _bad(f"it holds more than {MAX_VALUES} values (YAML aliases included)")
            if isinstance(dst, dict):
                if isinstance(key, bool):
                    key = "true" if key else "false"
                elif key is None:
                    key = "null"
                elif not isinstance(key, str):
                    if not isinstance(key, (int, float)):
                        raise _bad(f"a map key of type {type(key).__name__}")
                    key = str(key)
            if isinstance(value, dict):
                child: Any = {}
                stack.append((value, child, depth + 1))
            elif isinstance(value, list):
                child = []
                stack.append((value, child, depth + 1))
            else:
                child = _scalar(value)
            if isinstance(dst, dict):
                dst[key] = child
            else:
                dst.append(child)
    return out


def _scalar(value: Any) -> Any:
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _bad(f"the number {value} is not finite (JSON has no NaN or infinity)")
        return value
    raise _bad(f"a value of YAML type {type(value).__name__}, which JSON has no form for")


def check_object(rt: ResourceType, obj: dict[str, Any], namespace: str, name: str) -> None:
    """The applied object names this resource and this object, and carries no managedFields."""
    version, kind = obj.get("apiVersion"), obj.get("kind")
    if not version or not kind:
        missing = "apiVersion" if not version else "kind"
        raise ApiError(400, f"Object '{missing}' is missing in the apply patch", "BadRequest")
    if version != rt.group_version:
        raise ApiError(
            400,
            "Incorrect version specified in apply patch. Specified patch version: "
            f"{str(version)[:64]}, expected: {rt.group_version}",
            "BadRequest",
        )
    if kind != rt.kind:
        raise ApiError(
            400,
            f"the kind in the apply patch ({str(kind)[:64]}) does not match the resource's kind ({rt.kind})",
            "BadRequest",
        )
    meta = obj.get("metadata")
    if meta is None:
        meta = obj["metadata"] = {}
    if not isinstance(meta, dict):
        raise ApiError(400, "metadata must be an object", "BadRequest")
    if meta.get("managedFields") is not None:
        raise ApiError(400, "metadata.managedFields must be nil", "BadRequest")
    if meta.get("name") and meta["name"] != name:
        raise ApiError(
            400,
            f"the name of the object ({str(meta['name'])[:64]}) does not match the name on the URL ({name})",
            "BadRequest",
        )
    if rt.namespaced and meta.get("namespace") and meta["namespace"] != namespace:
        raise ApiError(
            400,
            "the namespace of the provided object does not match the namespace sent on the request",
            "BadRequest",
        )


def required_manager() -> ApiError:
    """PatchOptions validation: an apply must name its field manager (422, as the real server)."""
    return ApiError(
        422,
        'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch',
        "Invalid",
        {
            "group": "meta.k8s.io",
            "kind": "PatchOptions",
            "causes": [
                {
                    "reason": "FieldValueRequired",
                    "message": "Required value: is required for apply patch",
                    "field": "fieldManager",
                }
            ],
        },
    )


def forbidden_force() -> ApiError:
    return ApiError(
        422,
        'PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified for non-apply patch',
        "Invalid",
        {
            "group": "meta.k8s.io",
            "kind": "PatchOptions",
            "causes": [
                {
                    "reason": "FieldValueForbidden",
                    "message": "Forbidden: may not be specified for non-apply patch",
                    "field": "force",
                }
            ],
        },
    )
