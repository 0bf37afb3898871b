"""Discovery documents (legacy, non-aggregated) and server-side Table printing for kubectl."""

from __future__ import annotations

from typing import Any

from sim.apiserver import printers, scale
from sim.apiserver.errors import ApiError
from sim.apiserver.resources import RESOURCES, ResourceType, groups


def version() -> dict[str, Any]:
    return {
        "major": "1",
        "minor": "35",
        "gitVersion": "v1.35.0-dynmig-sim",
        "gitCommit": "sim",
        "gitTreeState": "clean",
        "buildDate": "2025-12-01T00:00:00Z",
        "goVersion": "go1.25",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def api_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def api_group_list() -> dict[str, Any]:
    out = []
    for group, rts in groups().items():
        gv = {"groupVersion": f"{group}/{rts[0].version}", "version": rts[0].version}
        out.append({"name": group, "versions": [gv], "preferredVersion": gv})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": out}


def api_group(group: str) -> dict[str, Any] | None:
    rts = groups().get(group)
    if not rts:
        return None
    gv = {"groupVersion": f"{group}/{rts[0].version}", "version": rts[0].version}
    return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": [gv], "preferredVersion": gv}


def _resource_entry(rt: ResourceType) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": rt.plural,
        "singularName": rt.singular_name,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": list(rt.verbs),
    }
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    return entry


def resource_list(group: str, version: str) -> dict[str, Any] | None:
    rts = [r for r in RESOURCES if r.group == group and r.version == version]
    if not rts:
        return None
    out = []
    for rt in rts:
        out.append(_resource_entry(rt))
        for sub in rt.subresources:
            kind = {
                "binding": "Binding",
                "eviction": "Eviction",
                "exec": "PodExecOptions",
                "attach": "PodAttachOptions",
                "portforward": "PodPortForwardOptions",
            }.get(sub, rt.kind)
            streaming = ["create", "get"]
            verbs = {
                "binding": ["create"],
                "log": ["get"],
                "eviction": ["create"],
                "exec": streaming,
                "attach": streaming,
                "portforward": streaming,
            }.get(sub, ["get", "patch", "update"])
            entry = {
                "name": f"{rt.plural}/{sub}",
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": kind,
                "verbs": verbs,
            }
            if sub == "scale":  # served in another group's kind, which discovery names
                entry.update(group=scale.GROUP, version=scale.VERSION, kind=scale.KIND)
            out.append(entry)
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": out}


INCLUDE_OBJECT = ("Metadata", "None", "Object")  # metav1.IncludeObjectPolicy's values


def table_include(query: dict[str, str]) -> str:
    """The Table's `includeObject` option, checked as kube-apiserver's ValidateTableOptions does
    (apimachinery's pkg/apis/meta/v1beta1/validation): empty means Metadata."""
    include = query.get("includeObject", "") or "Metadata"
    if include not in INCLUDE_OBJECT:
        supported = ", ".join(f'"{v}"' for v in INCLUDE_OBJECT)
        raise ApiError(
            400,
            f"Unable to convert to Table as requested: includeObject: Unsupported value: "
            f"{include[:64]!r}: supported values: {supported}",
            "BadRequest",
        )
    return include


def table(
    rt: ResourceType,
    items: list[dict[str, Any]],
    list_meta: dict[str, Any],
    headers: bool = True,
    include: str = "Metadata",
) -> dict[str, Any]:
    """A meta.k8s.io/v1 Table, as kubectl asks for with `Accept: ...;as=Table`. A watch sends the
    column definitions with its first row only (headers=False after that), as kube-apiserver does.
    Each row's `object` follows `include` as asTable in kube-apiserver's
    staging/src/k8s.io/apiserver/pkg/endpoints/handlers/response.go does: the whole object in the
    resource's version (kubectl's `--sort-by` asks for it), its PartialObjectMetadata, or null."""
    cols = printers.columns(rt)
    defs = [
        {"name": n, "type": t, "format": "name" if n == "Name" else "", "description": n, "priority": p}
        for n, t, p, _ in cols
    ]
    rows = [{"cells": [f(o) for _, _, _, f in cols], "object": _row_object(rt, o, include)} for o in items]
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": defs if headers else [],
        "rows": rows,
    }


def _row_object(rt: ResourceType, obj: dict[str, Any], include: str) -> dict[str, Any] | None:
    if include == "None":
        return None
    if include == "Object":
        return {"kind": rt.kind, "apiVersion": rt.group_version, **obj}
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}
