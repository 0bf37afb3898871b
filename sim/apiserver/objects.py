"""Per-type rules applied on create and update, as the real registry strategies do (the parts that
matter to clients: defaults, what an update may change, names)."""

from __future__ import annotations

import copy
import random
import re
import string
import time
import uuid
from typing import Any

from sim.apiserver.errors import invalid
from sim.apiserver.resources import ResourceType

_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_LABEL_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def rfc3339(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def generate_name(prefix: str) -> str:
    return prefix + "".join(random.choices(string.ascii_lowercase + string.digits, k=5))


def check_name(rt: ResourceType, name: str) -> None:
    pattern = _LABEL_NAME_RE if rt.plural == "namespaces" else _NAME_RE
    limit = 63 if rt.plural == "namespaces" else 253
    if not name or len(name) > limit or not pattern.match(name):
        raise invalid(rt.kind, rt.group, name, "metadata.name",
                      f"Invalid value: {name!r}: a lowercase RFC 1123 name must consist of lower case "
                      "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric "
                      "character")


def prepare_create(rt: ResourceType, obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    """Stamp identity and defaults onto a new object (uid, creationTimestamp, type defaults)."""
    meta = obj.setdefault("metadata", {})
    meta["uid"] = str(uuid.uuid4())
    meta["creationTimestamp"] = now()
    for drop in ("deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion", "selfLink"):
        meta.pop(drop, None)
    if rt.namespaced:
        meta["namespace"] = namespace
    else:
        meta.pop("namespace", None)
    obj["apiVersion"] = rt.group_version
    obj["kind"] = rt.kind
    if rt.key == ("", "pods"):
        _pod_defaults(rt, obj)
    elif rt.key == ("", "namespaces"):
        meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
        obj.setdefault("spec", {"finalizers": ["kubernetes"]})
        obj["status"] = {"phase": "Active"}
    elif rt.key == ("", "nodes"):
        obj.setdefault("spec", {})
        obj.setdefault("status", {})
    elif rt.key == ("", "secrets"):
        obj.setdefault("type", "Opaque")
    return obj


def _pod_defaults(rt: ResourceType, pod: dict[str, Any]) -> None:
    spec = pod.setdefault("spec", {})
    if not spec.get("containers"):
        raise invalid(rt.kind, rt.group, pod["metadata"].get("name", ""), "spec.containers",
                      "Required value")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("priority", 0)
    # A new pod's status is the server's to set: Pending, whatever the client sent.
    pod["status"] = {"phase": "Pending", "qosClass": "BestEffort"}


_POD_MUTABLE_SPEC = ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds",
                     "schedulingGates")


def _pod_spec_shape(spec: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in spec.items() if k not in _POD_MUTABLE_SPEC}
    for key in ("containers", "initContainers"):
        if key in out:
            out[key] = [{k: v for k, v in c.items() if k != "image"} for c in out[key]]
    return out


def prepare_update(rt: ResourceType, new: dict[str, Any], old: dict[str, Any],
                   subresource: str) -> dict[str, Any]:
    """Carry over what an update may not change, as the type's update strategy does."""
    new = copy.deepcopy(new)
    meta, old_meta = new.setdefault("metadata", {}), old["metadata"]
    for key in ("uid", "creationTimestamp", "name", "namespace", "deletionTimestamp",
                "deletionGracePeriodSeconds", "generateName"):
        if key in old_meta:
            meta[key] = old_meta[key]
        else:
            meta.pop(key, None)
    new["apiVersion"], new["kind"] = rt.group_version, rt.kind
    if subresource == "status":
        # The status endpoint changes status only; spec and metadata stay as stored.
        out = copy.deepcopy(old)
        out["status"] = new.get("status", {})
        out["metadata"]["resourceVersion"] = meta.get("resourceVersion", old_meta.get("resourceVersion"))
        return out
    if rt.status_via_subresource and "status" in old:
        new["status"] = copy.deepcopy(old["status"])
    if rt.key == ("", "pods") and _pod_spec_shape(new.get("spec", {})) != _pod_spec_shape(old.get("spec", {})):
        raise invalid(rt.kind, rt.group, old_meta["name"], "spec",
                      "Forbidden: pod updates may not change fields other than `spec.containers[*]."
                      "image`, `spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, "
                      "`spec.tolerations` (only additions to existing tolerations), "
                      "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was "
                      "previously negative)")
    if rt.key == ("", "namespaces"):
        meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = old_meta["name"]
    return new


def same_content(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """True when two versions differ at most in resourceVersion/managedFields (a no-op write)."""
    def strip(o: dict[str, Any]) -> dict[str, Any]:
        m = {k: v for k, v in o.get("metadata", {}).items() if k not in ("resourceVersion", "managedFields")}
        return {**o, "metadata": m}
    return strip(a) == strip(b)
