"""The `resource.k8s.io/v1` kinds' create/update strategies: what kube-apiserver stamps on them and
the part of their validation a DRA user or driver would notice.

Why only part: the real validation is ~2,000 lines; a driver under test needs to hear "no" where a
real cluster says no to something a driver plausibly writes (a slice with both `sharedCounters` and
`devices`, a changed pool name, a claim whose allocation it rewrites), not a re-implementation of
every format rule. Everything here is cheap and checked against kubernetes/kubernetes:

- `pkg/registry/resource/resourceslice/strategy.go`: generation 1 on create, +1 on any spec change;
- `pkg/registry/resource/deviceclass/strategy.go`: the same generation rule;
- `pkg/registry/resource/resourceclaim/strategy.go`: `PrepareForCreate` clears the status; the main
  endpoint keeps the stored status, `/status` keeps the stored spec and metadata;
- `pkg/apis/resource/validation/validation.go`: `validateResourceSliceSpec` (driver and pool name
  required, `resourceSliceCount` > 0, `generation` >= 0, exactly one of `nodeName`, `nodeSelector`,
  `allNodes`, `perDeviceNodeSelection`; `nodeName` set means non-empty; "only one of
  `sharedCounters` or `devices` is allowed"; pool name, driver and nodeName immutable; unique device
  names), `ValidateResourceClaimUpdate` and `ValidateResourceClaimTemplateUpdate` (spec
  immutable), `validateResourceClaimStatusUpdate` (`reservedFor` needs an allocation, entries need
  resource, name and uid and are unique by uid, none added once the claim is being deleted; a set
  allocation cannot change, only be cleared), `validateDeviceRequest` (each request names exactly
  one of `exactly` or `firstAvailable`, request names unique), and a DeviceClass's
  `spec.extendedResourceName` (KEP-5004) must be an extended resource name: a qualified name
  (`<DNS subdomain>/<name>`) outside the `kubernetes.io` domains, not `requests.` (the rule of
  `pkg/apis/core/v1/helper.IsExtendedResourceName`; the message is ours); `status.devices` entries
  (`validateDeviceStatus`) each name an allocated device once, their data at most 10 KiB.
"""

from __future__ import annotations

import json
import re
from typing import Any

from sim.apiserver.errors import invalid_fields
from sim.apiserver.resources import ResourceType

GROUP = "resource.k8s.io"
Problem = tuple[str, str, str]
_INVALID, _REQUIRED, _FORBIDDEN, _DUPLICATE = (
    "FieldValueInvalid",
    "FieldValueRequired",
    "FieldValueForbidden",
    "FieldValueDuplicate",
)
_TOO_LONG = "FieldValueTooLong"
_NODE_FIELDS = ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def prepare_create(rt: ResourceType, obj: dict[str, Any]) -> None:
    """What the kind's PrepareForCreate stamps: a generation for slices and classes, an empty
    status for claims (a claim is born unallocated whatever the body says)."""
    if rt.group != GROUP:
        return
    if rt.kind in ("ResourceSlice", "DeviceClass"):
        obj.setdefault("metadata", {})["generation"] = 1
    elif rt.kind == "ResourceClaim":
        obj["status"] = {}


def prepare_update(rt: ResourceType, new: dict[str, Any], old: dict[str, Any], subresource: str) -> None:
    """PrepareForUpdate: a slice's or class's generation follows its spec (writers of slices
    compare it to see whether their change landed)."""
    if rt.group != GROUP or rt.kind not in ("ResourceSlice", "DeviceClass") or subresource:
        return
    generation = int(_dict(old.get("metadata")).get("generation") or 1)
    changed = new.get("spec") != old.get("spec")
    new.setdefault("metadata", {})["generation"] = generation + changed


def validate(
    rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None, subresource: str = ""
) -> None:
    """Refuse (422 Invalid, naming every field) what kube-apiserver refuses; `old` is None on create."""
    if rt.group != GROUP:
        return
    problems: list[Problem] = []
    if rt.kind == "ResourceSlice":
        problems = _slice(_dict(obj.get("spec")), None if old is None else _dict(old.get("spec")))
    elif rt.kind == "ResourceClaim":
        problems = _claim(obj, old, subresource)
    elif rt.kind == "DeviceClass":
        problems = _device_class(_dict(obj.get("spec")))
    elif rt.kind == "ResourceClaimTemplate":
        if old is not None and obj.get("spec") != old.get("spec"):
            problems = [("spec", _INVALID, "field is immutable")]
        elif old is None:
            spec = _dict(_dict(obj.get("spec")).get("spec"))
            problems = _devices(_dict(spec.get("devices")), "spec.spec.devices")
    if problems:
        name = str(_dict(obj.get("metadata")).get("name") or "")
        raise invalid_fields(rt.kind, rt.group, name, problems)


_QUALIFIED = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)


def _device_class(spec: dict[str, Any]) -> list[Problem]:
    name = spec.get("extendedResourceName")
    if name is None:
        return []
    path = "spec.extendedResourceName"
    if (
        not isinstance(name, str)
        or not _QUALIFIED.match(name)
        or "kubernetes.io/" in name
        or name.startswith("requests.")
        or len(name.split("/")[0]) > 253
    ):
        why = "must be an extended resource name: <DNS subdomain>/<name> outside kubernetes.io, e.g. nvidia.com/gpu"
        return [(path, _INVALID, f"Invalid value: {name!r}: {why}")]
    return []


def _slice(spec: dict[str, Any], old: dict[str, Any] | None) -> list[Problem]:
    out: list[Problem] = []
    if not isinstance(spec.get("driver"), str) or not spec.get("driver"):
        out.append(("spec.driver", _REQUIRED, "Required value"))
    pool = _dict(spec.get("pool"))
    if not isinstance(pool.get("name"), str) or not pool.get("name"):
        out.append(("spec.pool.name", _REQUIRED, "Required value"))
    count = pool.get("resourceSliceCount")
    if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
        out.append(
            ("spec.pool.resourceSliceCount", _INVALID, f"Invalid value: {count!r}: must be greater than zero")
        )
    generation = pool.get("generation", 0)
    if not isinstance(generation, int) or isinstance(generation, bool) or generation < 0:
        out.append(
            (
                "spec.pool.generation",
                _INVALID,
                f"Invalid value: {generation!r}: must be greater than or equal to zero",
            )
        )
    if old is not None:
        for path, new_value, old_value in (
            ("spec.pool.name", pool.get("name"), _dict(old.get("pool")).get("name")),
            ("spec.driver", spec.get("driver"), old.get("driver")),
            ("spec.nodeName", spec.get("nodeName"), old.get("nodeName")),
        ):
            if new_value != old_value:
                out.append((path, _INVALID, f"Invalid value: {new_value!r}: field is immutable"))
    out += _node_choice(spec)
    if spec.get("sharedCounters") is not None and spec.get("devices") is not None:
        out.append(
            ("spec", _INVALID, 'Invalid value: "": only one of `sharedCounters` or `devices` is allowed')
        )
    out += _unique(spec.get("devices"), "name", "spec.devices")
    out += _unique(spec.get("sharedCounters"), "name", "spec.sharedCounters")
    return out


def _node_choice(spec: dict[str, Any]) -> list[Problem]:
    """Exactly one way of saying which nodes the slice's devices are reachable from."""
    out: list[Problem] = []
    chosen = []
    node = spec.get("nodeName")
    if node is not None:
        if isinstance(node, str) and node:
            chosen.append("`nodeName`")
        else:
            out.append(
                (
                    "spec.nodeName",
                    _INVALID,
                    f"Invalid value: {node!r}: must be either unset or set to a non-empty string",
                )
            )
    if spec.get("nodeSelector") is not None:
        chosen.append("`nodeSelector`")
    for flag in ("allNodes", "perDeviceNodeSelection"):
        value = spec.get(flag)
        if value is True:
            chosen.append(f"`{flag}`")
        elif value is not None:
            out.append(
                (f"spec.{flag}", _INVALID, f"Invalid value: {value!r}: must be either unset or set to true")
            )
    wanted = "exactly one of " + ", ".join(f"`{f}`" for f in _NODE_FIELDS) + " is required"
    if not chosen:
        out.append(("spec", _REQUIRED, f"Required value: {wanted}"))
    elif len(chosen) > 1:
        out.append(
            (
                "spec",
                _INVALID,
                f'Invalid value: "{{{", ".join(chosen)}}}": {wanted}, but multiple fields are set',
            )
        )
    return out


def _unique(items: Any, key: str, path: str) -> list[Problem]:
    out: list[Problem] = []
    if items is not None and not isinstance(items, list):
        return [(path, _INVALID, "Invalid value: must be a list")]
    seen: set[Any] = set()
    for i, item in enumerate(_list(items)):
        value = _dict(item).get(key)
        if value in seen:
            out.append((f"{path}[{i}].{key}", _DUPLICATE, f"Duplicate value: {value!r}"))
        if isinstance(value, (str, int)):
            seen.add(value)
    return out


def _devices(devices: dict[str, Any], path: str) -> list[Problem]:
    """A claim's device requests: each one kind of request, names unique."""
    out: list[Problem] = []
    requests = devices.get("requests")
    out += _unique(requests, "name", f"{path}.requests")
    for i, request in enumerate(_list(requests)):
        request = _dict(request)
        where = f"{path}.requests[{i}]"
        if not isinstance(request.get("name"), str) or not request.get("name"):
            out.append((f"{where}.name", _REQUIRED, "Required value"))
        kinds = [k for k in ("exactly", "firstAvailable") if request.get(k)]
        if not kinds:
            out.append(
                (where, _REQUIRED, "Required value: exactly one of `exactly` or `firstAvailable` is required")
            )
        elif len(kinds) > 1:
            out.append(
                (
                    where,
                    _INVALID,
                    "Invalid value: null: exactly one of `exactly` or `firstAvailable` is required, "
                    "but multiple fields are set",
                )
            )
    return out


def _claim(obj: dict[str, Any], old: dict[str, Any] | None, subresource: str) -> list[Problem]:
    if old is None:
        return _devices(_dict(_dict(obj.get("spec")).get("devices")), "spec.devices")
    if subresource != "status":
        if obj.get("spec") != old.get("spec"):
            return [("spec", _INVALID, "field is immutable")]
        return []
    deleted = bool(_dict(obj.get("metadata")).get("deletionTimestamp"))
    return _claim_status(_dict(obj.get("status")), _dict(old.get("status")), deleted)


def _claim_status(status: dict[str, Any], old: dict[str, Any], deleted: bool) -> list[Problem]:
    out: list[Problem] = []
    reserved = status.get("reservedFor")
    if reserved is not None and not isinstance(reserved, list):
        return [("status.reservedFor", _INVALID, "Invalid value: must be a list")]
    for i, ref in enumerate(_list(reserved)):
        ref = _dict(ref)
        for key in ("resource", "name", "uid"):
            if not isinstance(ref.get(key), str) or not ref.get(key):
                out.append((f"status.reservedFor[{i}].{key}", _REQUIRED, "Required value"))
    out += _unique(reserved, "uid", "status.reservedFor")
    allocation, old_allocation = status.get("allocation"), old.get("allocation")
    if allocation is not None and not isinstance(allocation, dict):
        out.append(("status.allocation", _INVALID, "Invalid value: must be an object"))
    if _list(reserved):
        if allocation is None:
            out.append(
                (
                    "status.reservedFor",
                    _FORBIDDEN,
                    "Forbidden: may not be specified when `allocated` is not set",
                )
            )
        elif deleted:
            before = {str(_dict(r).get("uid")) for r in _list(old.get("reservedFor"))}
            if any(str(_dict(r).get("uid")) not in before for r in _list(reserved)):
                out.append(
                    (
                        "status.reservedFor",
                        _FORBIDDEN,
                        "Forbidden: new entries may not be added while `deallocationRequested` or "
                        "`deletionTimestamp` are set",
                    )
                )
    if old_allocation is not None and allocation is not None and allocation != old_allocation:
        out.append(("status.allocation", _INVALID, "Invalid value: field is immutable"))
    elif allocation is not None and old_allocation is None:
        out += _results(_dict(allocation))
    return out + _device_status(status.get("devices"), allocation)


def _device_status(devices: Any, allocation: Any) -> list[Problem]:
    """validateDeviceStatus: each entry names an allocated device once; its data is at most 10 KiB."""
    if devices is None:
        return []
    if not isinstance(devices, list):
        return [("status.devices", _INVALID, "Invalid value: must be a list")]
    results = _list(_dict(_dict(allocation).get("devices")).get("results"))
    allocated = {(_dict(r).get("driver"), _dict(r).get("pool"), _dict(r).get("device")) for r in results}
    out: list[Problem] = []
    seen = set()
    for i, entry in enumerate(devices):
        entry = _dict(entry)
        key = (entry.get("driver"), entry.get("pool"), entry.get("device"))
        path = f"status.devices[{i}]"
        if key not in allocated:
            out.append(
                (path, _INVALID, f"Invalid value: {list(key)}: must be an allocated device in the claim")
            )
        if key in seen:
            out.append((path, _DUPLICATE, f"Duplicate value: {list(key)}"))
        seen.add(key)
        if len(json.dumps(entry.get("data"))) > 10 * 1024:
            out.append((f"{path}.data", _TOO_LONG, "Too long: may not be more than 10240 bytes"))
    return out


def _results(allocation: dict[str, Any]) -> list[Problem]:
    """A new allocation's results each name the request, driver, pool and device."""
    out: list[Problem] = []
    for i, result in enumerate(_list(_dict(allocation.get("devices")).get("results"))):
        result = _dict(result)
        for key in ("request", "driver", "pool", "device"):
            if not isinstance(result.get(key), str) or not result.get(key):
                out.append((f"status.allocation.devices.results[{i}].{key}", _REQUIRED, "Required value"))
    return out
