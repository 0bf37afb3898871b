"""Discovery documents (legacy, non-aggregated) and server-side Table printing for kubectl."""

from __future__ import annotations

import time
from calendar import timegm
from typing import Any

from sim.apiserver.resources import RESOURCES, ResourceType, groups


def version() -> dict[str, Any]:
    return {"major": "1", "minor": "35", "gitVersion": "v1.35.0-dynmig-sim", "gitCommit": "sim",
            "gitTreeState": "clean", "buildDate": "2025-12-01T00:00:00Z", "goVersion": "go1.25",
            "compiler": "gc", "platform": "linux/amd64"}


def api_versions(server_address: str) -> dict[str, Any]:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]}


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
    entry: dict[str, Any] = {"name": rt.plural, "singularName": rt.singular_name, "namespaced": rt.namespaced,
                             "kind": rt.kind, "verbs": list(rt.verbs)}
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
            kind = "Binding" if sub == "binding" else rt.kind
            verbs = {"binding": ["create"], "log": ["get"]}.get(sub, ["get", "patch", "update"])
            out.append({"name": f"{rt.plural}/{sub}", "singularName": "", "namespaced": rt.namespaced,
                        "kind": kind, "verbs": verbs})
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": out}


def _age(ts: str | None) -> str:
    if not ts:
        return "<unknown>"
    try:
        secs = int(time.time() - timegm(time.strptime(ts, "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return "<unknown>"
    if secs < 120:
        return f"{max(secs, 0)}s"
    if secs < 7200:
        return f"{secs // 60}m"
    if secs < 172800:
        return f"{secs // 3600}h"
    return f"{secs // 86400}d"


def _columns(rt: ResourceType) -> list[tuple[str, str, Any]]:
    if rt.key == ("", "pods"):
        return [("Status", "string", lambda o: ("Terminating" if o["metadata"].get("deletionTimestamp")
                                                else o.get("status", {}).get("phase", ""))),
                ("Node", "string", lambda o: o.get("spec", {}).get("nodeName") or "<none>")]
    if rt.key == ("", "nodes"):
        def ready(o: dict[str, Any]) -> str:
            conds = {c.get("type"): c.get("status") for c in o.get("status", {}).get("conditions") or []}
            state = "Ready" if conds.get("Ready") == "True" else "NotReady"
            return state + (",SchedulingDisabled" if o.get("spec", {}).get("unschedulable") else "")
        return [("Status", "string", ready)]
    if rt.key == ("", "namespaces"):
        return [("Status", "string", lambda o: o.get("status", {}).get("phase", ""))]
    if rt.key == ("", "events"):
        return [("Type", "string", lambda o: o.get("type", "")), ("Reason", "string", lambda o: o.get("reason", "")),
                ("Message", "string", lambda o: o.get("message", ""))]
    return []


def table(rt: ResourceType, items: list[dict[str, Any]], list_meta: dict[str, Any],
          headers: bool = True) -> dict[str, Any]:
    """A meta.k8s.io/v1 Table, as kubectl asks for with `Accept: ...;as=Table`. A watch sends the
    column definitions with its first row only (headers=False after that), as kube-apiserver does."""
    cols = [("Name", "string", lambda o: o["metadata"]["name"])] + _columns(rt) + \
        [("Age", "string", lambda o: _age(o["metadata"].get("creationTimestamp")))]
    defs = [{"name": n, "type": t, "format": "name" if n == "Name" else "", "description": n, "priority": 0}
            for n, t, _ in cols]
    rows = []
    for o in items:
        partial = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]}
        rows.append({"cells": [f(o) for _, _, f in cols], "object": partial})
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta,
            "columnDefinitions": defs if headers else [], "rows": rows}
