"""The `scale` subresource of Deployments, as kube-apiserver serves it (what `kubectl scale` uses).

An `autoscaling/v1` Scale is a view of its parent: metadata (name, namespace, uid,
resourceVersion, creationTimestamp), `spec.replicas`, and `status.replicas` with the parent's
label selector as a string in `status.selector`. A GET reads the view; a PUT or a patch (merge,
strategic merge or JSON patch, applied to the view) changes only the parent's `spec.replicas`, with
the same optimistic concurrency as any update (a resourceVersion named in the Scale must be the
parent's). Discovery lists `deployments/scale` as group `autoscaling`, version `v1`, kind `Scale`,
as kubectl's scale client expects.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from sim.apiserver import patches
from sim.apiserver.errors import ApiError, invalid
from sim.apiserver.selectors import selector_string

GROUP, VERSION, KIND = "autoscaling", "v1", "Scale"
_META = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")


def view(obj: dict[str, Any]) -> dict[str, Any]:
    """The Scale of a stored Deployment."""
    meta = obj.get("metadata") or {}
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    return {
        "kind": KIND,
        "apiVersion": f"{GROUP}/{VERSION}",
        "metadata": {k: meta[k] for k in _META if k in meta},
        "spec": {"replicas": spec.get("replicas", 1)},
        "status": {"replicas": status.get("replicas", 0), "selector": selector_string(spec.get("selector"))},
    }


def _replicas(name: str, scale: Any) -> int:
    """The replicas a Scale asks for, validated as kube-apiserver validates a Scale."""
    if not isinstance(scale, dict):
        raise ApiError(400, "the body of a Scale must be a JSON object")
    spec = scale.get("spec")
    replicas = spec.get("replicas", 0) if isinstance(spec, dict) else 0
    if isinstance(replicas, bool) or not isinstance(replicas, int):
        raise ApiError(400, f"spec.replicas of a Scale must be an integer, not {json.dumps(replicas)[:64]}")
    if replicas < 0:
        raise invalid(
            KIND,
            GROUP,
            name,
            "spec.replicas",
            f"Invalid value: {replicas}: must be greater than or equal to 0",
        )
    if replicas > 2**31 - 1:
        raise ApiError(400, f"spec.replicas of a Scale must fit in a 32-bit integer, not {replicas}")
    return replicas


def from_body(name: str, body: Any) -> tuple[int, str]:
    """(replicas, resourceVersion the body pins or "") of a PUT Scale body."""
    replicas = _replicas(name, body)
    meta = body.get("metadata") if isinstance(body, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    if meta.get("name") and meta["name"] != name:
        raise ApiError(
            400, f"the name of the object ({meta['name']}) does not match the name on the URL ({name})"
        )
    return replicas, str(meta.get("resourceVersion") or "")


def patcher(name: str, content_type: str, raw: bytes) -> Callable[[dict[str, Any]], tuple[int, str]]:
    """A function of the current parent: the (replicas, pinned resourceVersion) the patched Scale asks."""
    ctype = content_type.split(";")[0].strip()
    if ctype not in (patches.JSON_PATCH, patches.MERGE_PATCH, patches.STRATEGIC_PATCH):
        raise ApiError(
            415,
            f"the body of the request was in an unknown format - accepted media types include: "
            f"{patches.JSON_PATCH}, {patches.MERGE_PATCH}, {patches.STRATEGIC_PATCH}",
        )
    try:
        doc = json.loads(raw or b"null")
    except RecursionError as exc:
        raise ApiError(400, "the patch nests too deeply to be a Scale") from exc
    except ValueError as exc:
        raise ApiError(400, f"the patch body is not valid JSON: {exc}") from exc
    if ctype != patches.JSON_PATCH and not isinstance(doc, dict):
        raise ApiError(400, "a merge patch must be a JSON object")

    def patched(current: dict[str, Any]) -> tuple[int, str]:
        before = view(current)
        try:
            if ctype == patches.JSON_PATCH:
                after = patches.apply_json_patch(before, doc)
            elif ctype == patches.MERGE_PATCH:
                after = patches.apply_merge_patch(before, doc)
            else:
                after = patches.apply_strategic_merge_patch(before, doc)
        except patches.PatchError as exc:
            raise ApiError(422, str(exc), "Invalid") from exc
        replicas = _replicas(name, after)
        meta = after.get("metadata") if isinstance(after, dict) else None
        rv = str((meta or {}).get("resourceVersion") or "") if isinstance(meta, dict) else ""
        return replicas, "" if rv == before["metadata"].get("resourceVersion") else rv

    return patched


def scaled(current: dict[str, Any], replicas: int) -> dict[str, Any]:
    """The parent with `spec.replicas` set (a shallow copy: the write path copies before changing)."""
    return {**current, "spec": {**(current.get("spec") or {}), "replicas": replicas}}
