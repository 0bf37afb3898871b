"""ResourceSlices (`resource.k8s.io/v1`) for one node's MIG GPUs, natural or steered, bounded and validated.

Shape, as NVIDIA's driver publishes with Kubernetes 1.35+ (`generateSplitResourceSlices`): one pool
per node, named after it; the counter sets in slices of their own (the v1 API allows a slice either
`sharedCounters` or `devices`, never both: `pkg/apis/resource/validation`), then the devices.

- `natural_slices`: what NVIDIA's driver publishes: one device slice per GPU (GPUs in minor order),
  every allowed profile × placement in it, sorted by name.
- `steered_slices`: the candidates of `mig.dra.steer` with each profile's candidates kept together in
  one slice (the allocator's order between slices is not defined), then the allocated devices.

Limits (k8s.io/api/resource/v1 types.go): 128 devices per slice, 64 when any consumes counters; 8
counter sets per slice and 32 counters per set; 2 counter consumptions per device and 32 counters per
consumption; 32 attributes and capacities together per device; device names DNS labels; string
attribute values up to 64 characters. `validate_slice` checks each; the builders never emit a slice
that fails it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from typing import Any

from mig.dra.devices import MIB, Gpu, MigDevice, counter_set, counter_set_name, natural_devices
from mig.dra.steer import steer

API_VERSION = "resource.k8s.io/v1"
MAX_DEVICES = 128
MAX_DEVICES_WITH_COUNTERS = 64
MAX_COUNTER_SETS = 8
MAX_COUNTERS_PER_SET = 32
MAX_CONSUMPTIONS = 2
MAX_COUNTERS_PER_CONSUMPTION = 32
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_STRING_VALUE = 64
MAX_SLICES_PER_POOL = 64  # dynmig's own bound: a node never needs more

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_C_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,31}$")

JSON = dict[str, Any]


def _quantity(counter_or_capacity: str, value: int) -> str:
    """Memory as NVIDIA's BinarySI quantities print it (whole MiB as `<n>Mi`), the rest as integers."""
    if counter_or_capacity == "memory" and value % MIB == 0:
        return f"{value // MIB}Mi"
    return str(value)


def device_json(d: MigDevice, model_key: str) -> JSON:
    return {
        "name": d.name,
        "attributes": {
            "type": {"string": "mig"},
            "profile": {"string": d.profile},
            "parentUUID": {"string": d.gpu_uuid},
            "productName": {"string": d.product},
            "model": {"string": model_key},
            "placementStart": {"int": d.placement.start},
            "placementSize": {"int": d.placement.size},
        },
        "capacity": {name: {"value": _quantity(name, v)} for name, v in d.capacity},
        "consumesCounters": [
            {
                "counterSet": d.counter_set,
                "counters": {k: {"value": _quantity(k, v)} for k, v in d.consumes().items()},
            }
        ],
    }


@functools.lru_cache(maxsize=65536)
def _checked_device(d: MigDevice, model_key: str) -> JSON:
    """`device_json`, validated once per distinct device; shared between slices: never modify it."""
    out = device_json(d, model_key)
    problems = _device_problems(out, {d.counter_set})
    if problems:
        raise ValueError(f"device {d.name}: {'; '.join(problems)}")
    return out


def counter_set_json(gpu: Gpu) -> JSON:
    return {
        "name": counter_set_name(gpu.minor),
        "counters": {k: {"value": _quantity(k, v)} for k, v in counter_set(gpu).items()},
    }


def _chunks(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _slice(node: str, driver: str, name: str, spec: JSON) -> JSON:
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {"driver": driver, "nodeName": node, "pool": {"name": node}, **spec},
    }


def _pool(
    node: str, driver: str, gpus: Sequence[Gpu], device_groups: Iterable[Sequence[JSON]], gen: int
) -> list[JSON]:
    counter_sets = [counter_set_json(g) for g in sorted(gpus, key=lambda g: g.minor)]
    out = [
        _slice(node, driver, f"{node}-{_short(driver)}-counters-{i}", {"sharedCounters": list(chunk)})
        for i, chunk in enumerate(_chunks(counter_sets, MAX_COUNTER_SETS))
    ]
    for i, group in enumerate(g for g in device_groups if g):
        out.append(_slice(node, driver, f"{node}-{_short(driver)}-devices-{i}", {"devices": list(group)}))
    if len(out) > MAX_SLICES_PER_POOL:
        raise ValueError(f"node {node}: {len(out)} slices, more than {MAX_SLICES_PER_POOL}")
    for s in out:
        s["spec"]["pool"] |= {"generation": gen, "resourceSliceCount": len(out)}
        problems = _validate(s, None, deep=False)  # each device was checked when first built
        if problems:
            raise ValueError(f"slice {s['metadata']['name']}: {'; '.join(problems)}")
    return out


def _short(driver: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", driver.lower()).strip("-")[:40]


def natural_slices(node: str, driver: str, gpus: Sequence[Gpu], generation: int) -> list[JSON]:
    """NVIDIA's layout: counters, then one slice per GPU with its devices sorted by name."""
    groups = [
        [_checked_device(d, g.model.key) for d in natural_devices(g)]
        for g in sorted(gpus, key=lambda g: g.minor)
    ]
    return _pool(node, driver, gpus, groups, generation)


def steered_slices(node: str, driver: str, gpus: Sequence[Gpu], generation: int) -> list[JSON]:
    """dynmig's layout: counters, the steered candidates (a profile's candidates in one slice, in
    the engine's one-by-one order), then the allocated devices (never candidates; listed so their
    counters count)."""
    keys = {g.minor: g.model.key for g in gpus}
    st = steer(sorted(gpus, key=lambda g: g.minor))
    groups: list[list[JSON]] = [[]]
    for _, devices in st.candidates:
        block = [_checked_device(d, keys[d.gpu_minor]) for d in devices]
        for part in _chunks(block, MAX_DEVICES_WITH_COUNTERS):  # a profile beyond 64: order kept per part
            if len(groups[-1]) + len(part) > MAX_DEVICES_WITH_COUNTERS:
                groups.append([])
            groups[-1].extend(part)
    allocated = [_checked_device(d, keys[d.gpu_minor]) for d in st.allocated]
    groups.extend(list(c) for c in _chunks(allocated, MAX_DEVICES_WITH_COUNTERS))
    return _pool(node, driver, gpus, groups, generation)


# ---- validation -----------------------------------------------------------------------------------
def _attribute_problem(name: str, value: object) -> str | None:
    if not _C_IDENT.match(name):
        return f"attribute name {name!r} is not a C identifier of at most 32 characters"
    if not isinstance(value, dict) or len(value) != 1:
        return f"attribute {name}: exactly one of int, bool, string, version"
    ((kind, v),) = value.items()
    if kind == "string" or kind == "version":
        if not isinstance(v, str) or len(v) > MAX_STRING_VALUE:
            return f"attribute {name}: a string of at most {MAX_STRING_VALUE} characters"
    elif kind == "int":
        if not isinstance(v, int) or isinstance(v, bool):
            return f"attribute {name}: an integer"
    elif kind == "bool":
        if not isinstance(v, bool):
            return f"attribute {name}: a boolean"
    else:
        return f"attribute {name}: unknown kind {kind!r}"
    return None


def _device_problems(dev: object, set_names: set[str] | None) -> list[str]:
    if not isinstance(dev, dict):
        return ["a device is not an object"]
    name = dev.get("name")
    if not isinstance(name, str) or not _DNS_LABEL.match(name):
        return [f"device name {name!r} is not a DNS label"]
    out = []
    attrs, caps = dev.get("attributes") or {}, dev.get("capacity") or {}
    if not isinstance(attrs, dict) or not isinstance(caps, dict):
        return [f"device {name}: attributes and capacity must be maps"]
    if len(attrs) + len(caps) > MAX_ATTRIBUTES_AND_CAPACITIES:
        out.append(f"device {name}: more than {MAX_ATTRIBUTES_AND_CAPACITIES} attributes and capacities")
    for k, v in attrs.items():
        problem = _attribute_problem(k, v)
        if problem:
            out.append(f"device {name}: {problem}")
    for k, v in caps.items():
        if not _C_IDENT.match(k) or not isinstance(v, dict) or not isinstance(v.get("value"), str):
            out.append(f"device {name}: capacity {k!r} needs a C-identifier name and a quantity value")
    consumes = dev.get("consumesCounters") or []
    if not isinstance(consumes, list) or len(consumes) > MAX_CONSUMPTIONS:
        out.append(f"device {name}: at most {MAX_CONSUMPTIONS} counter consumptions")
        return out
    seen = set()
    for c in consumes:
        cs = c.get("counterSet") if isinstance(c, dict) else None
        counters = c.get("counters") if isinstance(c, dict) else None
        if not isinstance(cs, str) or not isinstance(counters, dict) or cs in seen:
            out.append(f"device {name}: each consumption names one new counter set and a counter map")
            continue
        seen.add(cs)
        if len(counters) > MAX_COUNTERS_PER_CONSUMPTION:
            out.append(f"device {name}: more than {MAX_COUNTERS_PER_CONSUMPTION} counters from {cs}")
        if set_names is not None and cs not in set_names:
            out.append(f"device {name}: counter set {cs} is not in the pool")
    return out


def validate_slice(obj: object, counter_sets: set[str] | None = None) -> list[str]:
    """Problems the API server (or dynmig's own bounds) would reject this ResourceSlice for ([] = valid).

    `counter_sets`, if given, are the counter set names of the pool: consumptions must name one."""
    return _validate(obj, counter_sets, deep=True)


def _validate(obj: object, counter_sets: set[str] | None, deep: bool) -> list[str]:
    if (
        not isinstance(obj, dict)
        or obj.get("apiVersion") != API_VERSION
        or obj.get("kind") != "ResourceSlice"
    ):
        return [f"not a {API_VERSION} ResourceSlice"]
    name = (obj.get("metadata") or {}).get("name")
    out = (
        []
        if isinstance(name, str) and _DNS_SUBDOMAIN.match(name)
        else [f"name {name!r} is not a DNS subdomain"]
    )
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [*out, "no spec"]
    driver = spec.get("driver")
    if not isinstance(driver, str) or len(driver) > 63 or not _DNS_SUBDOMAIN.match(driver):
        out.append(f"driver {driver!r} is not a DNS subdomain of at most 63 characters")
    if not isinstance(spec.get("nodeName"), str) or not spec["nodeName"]:
        out.append("nodeName is required (node-local pool)")
    pool = spec.get("pool")
    if not isinstance(pool, dict) or not isinstance(pool.get("name"), str) or not pool["name"]:
        out.append("pool.name is required")
    else:
        gen, count = pool.get("generation"), pool.get("resourceSliceCount")
        if not isinstance(gen, int) or gen < 0 or not isinstance(count, int) or count < 1:
            out.append("pool.generation ≥ 0 and pool.resourceSliceCount ≥ 1 are required")
    has_counters, has_devices = "sharedCounters" in spec, "devices" in spec
    if has_counters == has_devices:
        out.append("exactly one of sharedCounters or devices")
    if has_counters:
        sets = spec["sharedCounters"]
        if not isinstance(sets, list) or not sets or len(sets) > MAX_COUNTER_SETS:
            out.append(f"1 to {MAX_COUNTER_SETS} counter sets")
        else:
            names = [s.get("name") if isinstance(s, dict) else None for s in sets]
            if len(set(names)) != len(names):
                out.append("duplicate counter set names")
            for s in sets:
                counters = s.get("counters") if isinstance(s, dict) else None
                if not isinstance(s.get("name"), str) or not _DNS_LABEL.match(s["name"]):
                    out.append(f"counter set name {s.get('name')!r} is not a DNS label")
                if not isinstance(counters, dict) or not counters or len(counters) > MAX_COUNTERS_PER_SET:
                    out.append(f"counter set {s.get('name')}: 1 to {MAX_COUNTERS_PER_SET} counters")
    if has_devices:
        devices = spec["devices"]
        if not isinstance(devices, list):
            return [*out, "devices must be a list"]
        limit = (
            MAX_DEVICES_WITH_COUNTERS
            if any(isinstance(d, dict) and d.get("consumesCounters") for d in devices)
            else MAX_DEVICES
        )
        if len(devices) > limit:
            out.append(f"{len(devices)} devices, more than {limit}")
        names = [d.get("name") if isinstance(d, dict) else None for d in devices]
        if len(set(names)) != len(names):
            out.append("duplicate device names")
        for d in devices[: MAX_DEVICES + 1] if deep else ():
            out.extend(_device_problems(d, counter_sets))
    return out
