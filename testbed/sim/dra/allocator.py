"""kube-scheduler's structured allocator (DRA), simulated for exactly-count device requests.

It reads only the ResourceSlice, DeviceClass and ResourceClaim objects it is given (as JSON dicts in
`resource.k8s.io/v1` shape) and takes no facts from dynmig: it knows nothing of MIG, profiles or
placements, only devices, attributes, selectors and counters.

Checked against kubernetes `staging/src/k8s.io/dynamic-resource-allocation/structured/`: `allocator.go`
(`NewAllocator` picks the implementation supporting the enabled features; partitionable devices are
served by `internal/incubating`), `internal/incubating/pools_incubating.go` (`GatherPools`, `addSlice`,
`buildPool`, `getAndValidateCounterSets`, `validateDeviceCounterConsumption`) and
`internal/incubating/allocator_incubating.go` (`Allocate`, `allocateOne`, `isSelectable`,
`selectorsMatch`, `allocateDevice`, `checkAvailableCounters`, `deallocateCountersForDevice`).
Reproduced:

- pools: slices grouped by (driver, pool name); a slice of an older generation is ignored, a newer one
  replaces what was gathered; a pool whose current generation has fewer slices than
  `resourceSliceCount` is incomplete and nothing is allocated from it; duplicate device names,
  duplicate counter set names, or a device consuming a counter set or counter the pool does not
  define make it invalid (skipped; reported only when nothing could be allocated);
- a slice with `sharedCounters` is a counter slice: its counter sets serve the pool, it holds no
  devices; slices for other nodes are not gathered, slices with `allNodes` are;
- order: pools in the order given by `pool_order` (upstream iterates a Go map, so no order is defined;
  pass an RNG to draw one), slices in the order given (upstream: the informer cache's list, also
  a map), devices in slice order;
- per requested device: skip devices allocated already or in this attempt, then the DeviceClass's
  selectors, then the request's (all must be true; a CEL runtime error, e.g. a missing attribute, is
  fatal for the whole scheduling attempt), then counters;
- counters: available = the pool's counter sets minus what devices already allocated consume (only
  allocated devices the pool's slices still list are counted), then every device of the attempt adds
  its consumption and the attempt fails on that device if any counter of any set would go below
  zero; a rejected device's consumption is taken back;
- search: depth first over claims, requests and devices, a request's later devices starting after the
  earlier one (combinations, not permutations), backtracking on failure; the first full solution wins.

Not simulated (refused with `AllocationError` rather than guessed): allocationMode All, firstAvailable
subrequests, claim constraints, admin access, device taints, consumable capacity, binding
conditions, node selectors on slices or devices. CEL is the real language (`sim.apiserver.cel`, the
`common-expression-language` package); `device.capacity` values are exposed as integers (upstream:
quantities), with Kubernetes' quantity library over them (`k8s.io/apiserver/pkg/cel/library/
quantity.go`: `quantity("9Gi")`, `compareTo`, `isLessThan`, `isGreaterThan`, `asInteger`), so a
selector written for a cluster (`device.capacity["d"].memory.compareTo(quantity("9Gi")) >= 0`)
works here; one comparing a capacity with `>=` works here only (upstream: a type error).
"""

from __future__ import annotations

import functools
import itertools
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sim.apiserver.cel import CelError, evaluate

JSON = dict[str, Any]
DeviceID = tuple[str, str, str]  # (driver, pool, device)

_SUFFIX = {
    "": 1,
    "Ki": 1 << 10,
    "Mi": 1 << 20,
    "Gi": 1 << 30,
    "Ti": 1 << 40,
    "Pi": 1 << 50,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
}
_QUANTITY = re.compile(r"^([0-9]{1,30})(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$")
MAX_CLAIM_DEVICES = 32  # resourceapi.AllocationResultsMaxSize


class SliceError(ValueError):
    """A ResourceSlice the simulation cannot read."""


class AllocationError(RuntimeError):
    """A fatal allocation error (upstream returns it from Allocate and the scheduling attempt stops)."""


@functools.lru_cache(maxsize=4096)
def _quantity(text: str) -> int | None:
    m = _QUANTITY.match(text)
    return None if m is None else int(m.group(1)) * _SUFFIX[m.group(2) or ""]


def quantity(text: object) -> int:
    """An integer Kubernetes quantity (`4864Mi`, `1`, `2G`); fractions and exponents are refused."""
    value = _quantity(text) if isinstance(text, str) else None
    if value is None:
        raise SliceError(f"quantity {text!r} is not an integer quantity")
    return value


@dataclass(frozen=True, eq=False)
class Device:
    name: str
    attributes: tuple[tuple[str, object], ...]  # (qualified or bare name, value)
    capacity: tuple[tuple[str, int], ...]
    consumes: tuple[tuple[str, tuple[tuple[str, int], ...]], ...]  # (counter set, counters)
    content: int = 0  # interned id of (attributes, capacity): what a CEL selector can see


_CONTENT: dict[tuple[object, ...], int] = {}
_IDS = itertools.count(1)  # never reused: a device parsed before a clear keeps an id no other content gets


def _content_id(attributes: tuple[tuple[str, object], ...], capacity: tuple[tuple[str, int], ...]) -> int:
    key = (attributes, capacity)
    hit = _CONTENT.get(key)
    if hit is None:
        if len(_CONTENT) > 100_000:
            _CONTENT.clear()
            _MATCHES.clear()
        hit = _CONTENT[key] = next(_IDS)
    return hit


@dataclass(frozen=True, eq=False)
class Slice:
    name: str
    driver: str
    pool: str
    generation: int
    count: int
    node: str  # "" for allNodes
    devices: tuple[Device, ...]
    counter_sets: tuple[tuple[str, tuple[tuple[str, int], ...]], ...]


def _value(attr: object) -> object:
    if not isinstance(attr, dict) or len(attr) != 1:
        raise SliceError(f"attribute {attr!r}: exactly one of int, bool, string, version")
    ((kind, v),) = attr.items()
    if kind not in ("int", "bool", "string", "version"):
        raise SliceError(f"attribute kind {kind!r}")
    return v


def _counters(raw: object) -> tuple[tuple[str, int], ...]:
    if not isinstance(raw, dict):
        raise SliceError("counters must be a map")
    return tuple((str(k), quantity((v or {}).get("value"))) for k, v in raw.items())


# Parsed devices by the identity of their JSON object, which is held here so the id stays its own:
# as with client-go's informer caches, an object handed to the store is never modified afterwards.
_DEVICES: dict[int, tuple[object, Device]] = {}


def _device(d: Any) -> Device:
    hit = _DEVICES.get(id(d))
    if hit is not None and hit[0] is d:
        return hit[1]
    if not isinstance(d, dict) or not isinstance(d.get("name"), str):
        raise SliceError("a device needs a name")
    attributes = tuple((str(k), _value(v)) for k, v in (d.get("attributes") or {}).items())
    capacity = tuple((str(k), quantity((v or {}).get("value"))) for k, v in (d.get("capacity") or {}).items())
    device = Device(
        name=d["name"],
        attributes=attributes,
        capacity=capacity,
        consumes=tuple(
            (str(c["counterSet"]), _counters(c.get("counters"))) for c in d.get("consumesCounters") or []
        ),
        content=_content_id(attributes, capacity),
    )
    if len(_DEVICES) > 200_000:
        _DEVICES.clear()
    _DEVICES[id(d)] = (d, device)
    return device


def parse_slice(obj: object) -> Slice:
    """Read a `resource.k8s.io/v1` ResourceSlice (the fields the allocator uses)."""
    if not isinstance(obj, dict) or obj.get("kind") != "ResourceSlice":
        raise SliceError("not a ResourceSlice")
    spec = obj.get("spec") or {}
    pool = spec.get("pool") or {}
    for key in ("nodeSelector", "perDeviceNodeSelection"):
        if spec.get(key):
            raise SliceError(f"{key} is not simulated")
    node = spec.get("nodeName") or ""
    if not node and not spec.get("allNodes"):
        raise SliceError("one of nodeName or allNodes is required")
    devices = tuple(_device(d) for d in spec.get("devices") or [])
    counter_sets = tuple(
        (str(s["name"]), _counters(s.get("counters"))) for s in spec.get("sharedCounters") or []
    )
    return Slice(
        name=str((obj.get("metadata") or {}).get("name", "")),
        driver=str(spec.get("driver", "")),
        pool=str(pool.get("name", "")),
        generation=int(pool.get("generation", 0)),
        count=int(pool.get("resourceSliceCount", 0)),
        node=node,
        devices=devices,
        counter_sets=counter_sets,
    )


@dataclass
class Pool:
    driver: str
    name: str
    slices: list[Slice] = field(default_factory=list)  # device slices, in gathering order
    counter_sets: dict[str, dict[str, int]] = field(default_factory=dict)
    incomplete: bool = False
    invalid: str = ""
    by_name: dict[str, Device] = field(default_factory=dict)  # every device of its device slices


def _build(driver: str, name: str, slices: list[Slice]) -> Pool:
    """buildPool: counter slices serve the pool's counter sets, the others hold its devices."""
    pool = Pool(driver, name)
    if len(slices) != slices[0].count:
        pool.incomplete = True
        return pool
    names: set[str] = set()
    for s in slices:
        if s.counter_sets:
            for set_name, counters in s.counter_sets:
                if set_name in pool.counter_sets:
                    pool.invalid = f"duplicate counter set name {set_name}"
                    return pool
                pool.counter_sets[set_name] = dict(counters)
        else:
            pool.slices.append(s)
            for d in s.devices:
                if d.name in names:
                    pool.invalid = f"duplicate device name {d.name}"
                    return pool
                names.add(d.name)
                pool.by_name[d.name] = d
    for s in pool.slices:
        for d in s.devices:
            for set_name, counters in d.consumes:
                known = pool.counter_sets.get(set_name)
                if known is None:
                    pool.invalid = f"counter set {set_name} not found"
                    return pool
                for counter, _ in counters:
                    if counter not in known:
                        pool.invalid = f"counter {counter} not found in counter set {set_name}"
                        return pool
    return pool


def gather_pools(slices: Iterable[Slice], node: str) -> list[Pool]:
    """The pools of the node's slices (and slices for all nodes), in first-seen order."""
    grouped: dict[tuple[str, str], list[Slice]] = {}
    for s in slices:
        if s.node and s.node != node:
            continue
        key = (s.driver, s.pool)
        have = grouped.get(key)
        if have is None or s.generation > have[0].generation:
            grouped[key] = [s]
        elif s.generation == have[0].generation:
            have.append(s)
    return [_built(driver, name, group) for (driver, name), group in grouped.items()]


# A pool's verdict (incomplete, invalid, counter sets) depends on which slice objects it has, not on
# their order; the cache holds the slices, so their ids stay theirs while cached.
_POOLS: dict[frozenset[int], tuple[list[Slice], Pool]] = {}


def _built(driver: str, name: str, group: list[Slice]) -> Pool:
    key = frozenset(id(s) for s in group)
    hit = _POOLS.get(key)
    if hit is None:
        if len(_POOLS) > 20_000:
            _POOLS.clear()
        hit = _POOLS[key] = (list(group), _build(driver, name, group))
    verdict = hit[1]
    if verdict.incomplete or verdict.invalid:
        return verdict
    ordered = [s for s in group if not s.counter_sets]  # device slices in this call's order
    return Pool(driver, name, ordered, verdict.counter_sets, by_name=verdict.by_name)


@dataclass(frozen=True)
class _Request:
    claim: int
    name: str
    device_class: str
    selectors: tuple[str, ...]
    count: int


def _requests(claims: Sequence[JSON]) -> list[_Request]:
    out = []
    for ci, claim in enumerate(claims):
        devices = (claim.get("spec") or {}).get("devices") or {}
        if devices.get("constraints"):
            raise AllocationError("claim constraints are not simulated")
        for r in devices.get("requests") or []:
            if r.get("firstAvailable"):
                raise AllocationError(f"request {r.get('name')}: firstAvailable is not simulated")
            ex = r.get("exactly") or {}
            mode = ex.get("allocationMode", "ExactCount")
            if mode != "ExactCount":
                raise AllocationError(f"request {r.get('name')}: allocationMode {mode} is not simulated")
            if ex.get("adminAccess") or ex.get("capacity") or ex.get("tolerations"):
                raise AllocationError(
                    f"request {r.get('name')}: admin access, capacity, tolerations not simulated"
                )
            if not ex.get("deviceClassName"):
                raise AllocationError(f"request {r.get('name')}: missing device class name")
            sels = []
            for i, s in enumerate(ex.get("selectors") or []):
                expr = (s.get("cel") or {}).get("expression")
                if not isinstance(expr, str):
                    raise AllocationError(f"request {r.get('name')}, selector #{i}: CEL expression empty")
                sels.append(expr)
            out.append(
                _Request(
                    ci, str(r.get("name")), str(ex["deviceClassName"]), tuple(sels), int(ex.get("count", 1))
                )
            )
    total = sum(r.count for r in out)
    if total > MAX_CLAIM_DEVICES * max(1, len(claims)):
        raise AllocationError(f"{total} devices requested, more than {MAX_CLAIM_DEVICES} per claim")
    return out


_MATCHES: dict[tuple[str, str, int], bool] = {}


def _activation(driver: str, device: Device) -> JSON:
    """The CEL `device` variable as upstream builds it: attributes and capacities by domain, bare
    names in the driver's domain."""
    attrs: dict[str, dict[str, object]] = {}
    for name, v in device.attributes:
        domain, _, ident = name.rpartition("/")
        attrs.setdefault(domain or driver, {})[ident] = v
    caps: dict[str, dict[str, int]] = {}
    for name, q in device.capacity:
        domain, _, ident = name.rpartition("/")
        caps.setdefault(domain or driver, {})[ident] = q
    return {
        "device": {"driver": driver, "attributes": attrs, "capacity": caps, "allowMultipleAllocations": False}
    }


def _cel_quantity(text: object) -> int:
    try:
        return quantity(text)
    except SliceError as exc:
        raise ValueError(f"quantity: {exc}") from None


QUANTITY_LIBRARY = {  # over integer capacities: a quantity is its integer value here
    "quantity": _cel_quantity,
    "compareTo": lambda a, b: (a > b) - (a < b),
    "isLessThan": lambda a, b: a < b,
    "isGreaterThan": lambda a, b: a > b,
    "asInteger": lambda a: a,
}


def _matches(expr: str, driver: str, device: Device, where: str) -> bool:
    key = (expr, driver, device.content)  # CEL is pure: the result depends on what it sees
    hit = _MATCHES.get(key)
    if hit is not None:
        return hit
    try:
        result = evaluate(expr, _activation(driver, device), QUANTITY_LIBRARY)
    except CelError as exc:
        raise AllocationError(f"{where}: CEL runtime error: {exc}") from exc
    if not isinstance(result, bool):  # upstream: a compile error (the expression must be a bool)
        raise AllocationError(f"{where}: CEL compile error: result {result!r} is not a bool")
    _MATCHES[key] = result
    return result


class Allocator:
    """One scheduling cycle's allocator: the slices, classes and allocated devices of that moment."""

    def __init__(self, slices: Sequence[Slice], classes: dict[str, JSON], allocated: Iterable[DeviceID]):
        # NewAllocator: slices split by node name once (order kept), the rest shared by every node
        self.on_node: dict[str, list[Slice]] = {}
        self.shared: list[Slice] = []
        for s in slices:
            (self.on_node.setdefault(s.node, []) if s.node else self.shared).append(s)
        self.classes = classes
        self.allocated = set(allocated)
        self.allocated_in: dict[tuple[str, str], list[str]] = {}  # (driver, pool) -> device names
        for driver, pool, device in self.allocated:
            self.allocated_in.setdefault((driver, pool), []).append(device)

    def allocate(
        self, node: str, claims: Sequence[JSON], pool_order: random.Random | None = None
    ) -> list[JSON] | None:
        """Allocation results for every claim on `node`, or None when they do not fit there."""
        pools = gather_pools([*self.on_node.get(node, []), *self.shared], node)
        if pool_order is not None:
            pool_order.shuffle(pools)
        requests = _requests(claims)
        class_selectors = {}
        for r in requests:
            cls = self.classes.get(r.device_class)
            if cls is None:
                raise AllocationError(f"request {r.name}: could not retrieve device class {r.device_class}")
            class_selectors[r.device_class] = tuple(
                (s.get("cel") or {}).get("expression", "")
                for s in (cls.get("spec") or {}).get("selectors") or []
            )
        run = _Run(self, pools, requests, class_selectors, [_kobj(c) for c in claims])
        if not run.one(0, 0, (0, 0, 0)):
            if any(p.invalid for p in pools):
                raise AllocationError("invalid resource pools were encountered")  # upstream: per-node error
            return None
        out: list[JSON] = [{"devices": {"results": []}} for _ in claims]
        for r, dev_id in run.chosen:
            out[r.claim]["devices"]["results"].append(
                {"request": r.name, "driver": dev_id[0], "pool": dev_id[1], "device": dev_id[2]}
            )
        for result in out:
            result["nodeSelector"] = {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            }
        return out


_CLAIM = "\x00claim\x00"  # stands for the claim's name in selector errors cached across claims


def _kobj(claim: JSON) -> str:
    """klog.KObj: `namespace/name`, or the name alone for an object without a namespace."""
    meta = claim.get("metadata") or {}
    ns, name = meta.get("namespace") or "", meta.get("name") or ""
    return f"{ns}/{name}" if ns else str(name)


_VERDICTS: dict[tuple[object, ...], tuple[Slice, tuple[tuple[int, str], ...]]] = {}


class _Run:
    """One `Allocate` call: the depth-first search of allocateOne."""

    def __init__(
        self,
        a: Allocator,
        pools: list[Pool],
        requests: list[_Request],
        class_selectors: dict[str, tuple[str, ...]],
        claim_names: list[str],
    ):
        self.a, self.pools, self.requests = a, pools, requests
        self.class_selectors, self.claim_names = class_selectors, claim_names
        self.chosen: list[tuple[_Request, DeviceID]] = []
        self.in_flight: set[DeviceID] = set()
        self.available: dict[int, dict[str, dict[str, int]]] = {}  # per pool index
        self.consumed: dict[int, dict[str, dict[str, int]]] = {}
        self.overdrawn: dict[int, bool] = {}

    def _selectable(self, r: _Request, pool: Pool, device: Device) -> bool:
        """isSelectable: the DeviceClass's selectors, then the request's (an error is fatal)."""
        for i, expr in enumerate(self.class_selectors[r.device_class]):
            if not _matches(expr, pool.driver, device, f"class {r.device_class}: selector #{i}"):
                return False
        return all(
            _matches(expr, pool.driver, device, f"claim {_CLAIM}: selector #{i}")
            for i, expr in enumerate(r.selectors)
        )

    def _candidates(self, r: _Request, pool: Pool, s: Slice) -> tuple[tuple[int, str], ...]:
        """(index, CEL error or "") of the slice's devices the request's selectors do not reject, in
        slice order. Only a shortcut: a device they reject is skipped wherever the loop meets it, and
        an error is raised only when the loop reaches that device (upstream checks "in use" first)."""
        key = (id(s), pool.driver, self.class_selectors[r.device_class], r.selectors)
        hit = _VERDICTS.get(key)
        if hit is None:
            out = []
            for dj, device in enumerate(s.devices):
                try:
                    if self._selectable(r, pool, device):
                        out.append((dj, ""))
                except AllocationError as exc:
                    out.append((dj, str(exc)))
            if len(_VERDICTS) > 50_000:
                _VERDICTS.clear()
            hit = _VERDICTS[key] = (s, tuple(out))
        return hit[1]

    def _available(self, pi: int) -> dict[str, dict[str, int]]:
        """The pool's counters minus what its allocated devices consume (computed once per call)."""
        have = self.available.get(pi)
        if have is None:
            pool = self.pools[pi]
            have = {name: dict(counters) for name, counters in pool.counter_sets.items()}
            for name in self.a.allocated_in.get((pool.driver, pool.name), ()):
                d = pool.by_name.get(name)
                if d is None:  # allocated, but no longer listed: its counters are not counted
                    continue
                for set_name, counters in d.consumes:
                    avail = have.get(set_name, {})
                    for c, v in counters:
                        if c in avail:
                            avail[c] -= v  # may go negative: then nothing is available
            self.available[pi] = have
            self.overdrawn[pi] = any(v < 0 for counters in have.values() for v in counters.values())
        return have

    def _take_counters(self, pi: int, device: Device) -> bool:
        """checkAvailableCounters: add the device's consumption; fail if any counter of any set of the
        pool is then short. Every earlier accepted device passed this check, so only the sets this
        device touches can newly fail, unless a counter is already below zero (allocated devices
        over-consuming it), which fails every device of the pool, as upstream's full loop does."""
        available = self._available(pi)
        if self.overdrawn[pi]:
            return False
        consumed = self.consumed.setdefault(pi, {})
        for set_name, counters in device.consumes:
            used = consumed.setdefault(set_name, {})
            for c, v in counters:
                used[c] = used.get(c, 0) + v
        for set_name, _ in device.consumes:
            avail, used = available.get(set_name, {}), consumed[set_name]
            for c, v in avail.items():
                if v < used.get(c, 0):
                    self._give_counters(pi, device)
                    return False
        return True

    def _give_counters(self, pi: int, device: Device) -> None:
        consumed = self.consumed[pi]
        for set_name, counters in device.consumes:
            for c, v in counters:
                consumed[set_name][c] -= v

    def one(self, ri: int, di: int, start: tuple[int, int, int]) -> bool:
        """allocateOne for device `di` of request `ri`, searching from `start` (pool, slice, device)."""
        if ri >= len(self.requests):
            return True
        r = self.requests[ri]
        if di >= r.count:
            return self.one(ri + 1, 0, (0, 0, 0))
        for pi in range(start[0], len(self.pools)):
            pool = self.pools[pi]
            if pool.incomplete or pool.invalid:
                continue
            s0 = start[1] if pi == start[0] else 0
            for si in range(s0, len(pool.slices)):
                s = pool.slices[si]
                d0 = start[2] if (pi, si) == start[:2] else 0
                for dj, error in self._candidates(r, pool, s):
                    if dj < d0:
                        continue
                    device = s.devices[dj]
                    dev_id = (pool.driver, pool.name, device.name)
                    if dev_id in self.a.allocated or dev_id in self.in_flight:
                        continue
                    if error:  # the cached text names the claim by a marker: this run's claim
                        raise AllocationError(error.replace(_CLAIM, self.claim_names[r.claim]))
                    if device.consumes and not self._take_counters(pi, device):
                        continue
                    self.in_flight.add(dev_id)
                    self.chosen.append((r, dev_id))
                    if self.one(ri, di + 1, (pi, si, dj + 1)):
                        return True
                    self.chosen.pop()
                    self.in_flight.discard(dev_id)
                    if device.consumes:
                        self._give_counters(pi, device)
        return False
