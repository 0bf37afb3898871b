"""Node scores for pods with DRA claims: the rule dynmig's extender `prioritize` verb applies.

On a DRA node kube-scheduler's allocator picks the device (first fit over the steered slices, which
list the engine's choice first), but which feasible node the pod goes to is decided by scores, and
with DRA claims those tie: the node is drawn at random. `prioritize` scores every candidate node by
what the engine would lose placing the claim's devices there, so kube-scheduler's `selectHost`
takes the node the engine would take.

The rule (`node_key`, lower is better): per requested device in turn, the best free placement over
the node's GPUs of a profile the request accepts, by the engine's fragmentation loss
(`mig.placement.plan.fragmentation`: the profile's share of its model's GPU, usable capacity lost, a
whole GPU's cost to its model, large placeable value lost, profile memory, value lost; no demand
risk, as steering has none); the losses of a claim's devices are summed, each taken as if the earlier
ones were placed. Between equal losses the fuller node first (binpack: keep emptier nodes whole).
`scores` maps the keys of the candidate nodes to kube-scheduler's extender range 0..10 by rank:
the best key 10, the next 9, ... at least 1; a node the claim does not fit on gets 0.

Which profiles a claim asks for is read from its CEL selectors only when each request has the simple
form the examples use, `device.attributes["<driver>"].profile == "X"` or `... in ["X", "Y"]`
(`claim_asks`); anything else (another expression, firstAvailable, allocationMode All, constraints)
gives None and the pod is not scored: never a guess.

Pure: the bench (`bench/dra.py`) and the product (`webhooks/prioritize.py`) share it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mig.catalog import GpuModel
from mig.dra.devices import Gpu, Instance
from mig.dra.steer import placement_loss
from mig.dra.view import DraView, claimed, devices_by_gpu, published_devices
from mig.placement import profile_set
from mig.placement.occupancy import ProfileSet
from mig.placement.plan import fragmentation, whole_gpu_cost
from mig.placement.published import from_catalog

MAX_SCORE = 10  # k8s.io/kube-scheduler/extender/v1 MaxExtenderPriority
MIN_FEASIBLE_SCORE = 1  # a node the claim fits on never scores as one it does not
MAX_DEVICES = 64  # devices asked by one pod that are scored; more is not a pod we score


@dataclass(frozen=True)
class Ask:
    """One request of a claim: `count` devices, each of any of `profiles`."""

    profiles: frozenset[str]
    count: int = 1


_NAME = r"[A-Za-z0-9][A-Za-z0-9.+_-]{0,63}"
_QUOTED = rf'"({_NAME})"'
_LIST = rf"\[\s*{_QUOTED}(?:\s*,\s*{_QUOTED})*\s*,?\s*\]"
_MAX_EXPRESSION = 4096
_MAX_REQUESTS = 32


def _selector_profiles(expression: object, driver: str) -> frozenset[str] | None:
    """The profiles of a `device.attributes["<driver>"].profile == / in` selector, else None."""
    if not isinstance(expression, str) or len(expression) > _MAX_EXPRESSION:
        return None
    head = rf'^\s*device\.attributes\[\s*"{re.escape(driver)}"\s*\]\.profile\s*'
    one = re.fullmatch(head + rf"==\s*{_QUOTED}\s*", expression)
    if one:
        return frozenset({one.group(1)})
    many = re.fullmatch(head + rf"in\s*({_LIST})\s*", expression)
    if many:
        return frozenset(re.findall(_QUOTED, many.group(1)))
    return None


def _request_ask(request: object, driver: str) -> Ask | None:
    if not isinstance(request, Mapping) or request.get("firstAvailable") is not None:
        return None
    exact = request.get("exactly")
    if not isinstance(exact, Mapping) or exact.get("allocationMode", "ExactCount") != "ExactCount":
        return None
    count = exact.get("count", 1)
    selectors = exact.get("selectors")
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_DEVICES:
        return None
    if not isinstance(selectors, list) or not selectors or len(selectors) > 8:
        return None
    profiles: frozenset[str] | None = None
    for sel in selectors:
        cel = sel.get("cel") if isinstance(sel, Mapping) else None
        got = _selector_profiles(cel.get("expression") if isinstance(cel, Mapping) else None, driver)
        if got is None:
            return None
        profiles = got if profiles is None else profiles & got
    return Ask(profiles, count) if profiles else None


def claim_asks(claim: object, driver: str) -> list[Ask] | None:
    """The claim's requests as Asks, or None unless every request is of the simple profile form."""
    spec: Any = claim.get("spec") if isinstance(claim, Mapping) else None
    devices: Any = spec.get("devices") if isinstance(spec, Mapping) else None
    if not isinstance(devices, Mapping) or devices.get("constraints"):
        return None
    requests = devices.get("requests")
    if not isinstance(requests, list) or not 1 <= len(requests) <= _MAX_REQUESTS:
        return None
    asks = [_request_ask(r, driver) for r in requests]
    if any(a is None for a in asks) or sum(a.count for a in asks if a) > MAX_DEVICES:
        return None
    return [a for a in asks if a]


NodeKey = tuple[tuple[float, ...], float]

_PSETS: dict[tuple[str, tuple[str, ...]], ProfileSet] = {}


def _pset(g: Gpu) -> ProfileSet:
    key = (g.model.key, g.allowed)
    hit = _PSETS.get(key)
    if hit is None:
        if len(_PSETS) > 4096:
            _PSETS.clear()
        hit = _PSETS[key] = profile_set(from_catalog(g.model, g.allowed))
    return hit


_GPU_BEST: dict[tuple[object, ...], tuple[tuple[float, ...], int] | None] = {}


def _gpu_best(
    g: Gpu, mask: int, profiles: frozenset[str], model_gpus: int, model_empty: int
) -> tuple[tuple[float, ...], int] | None:
    """(loss, placement mask) of the GPU's best free placement of any of `profiles`. Memoized: it
    depends only on what is in the key, and most GPUs of a fleet share a few occupancies."""
    memo = (g.model.key, g.allowed, mask, profiles, model_gpus, model_empty)
    if memo in _GPU_BEST:
        return _GPU_BEST[memo]
    ps = _pset(g)
    names = ps.names
    best: tuple[tuple[float, ...], int] | None = None
    for spec in g.specs():
        if spec.name not in profiles or spec.name not in names:
            continue
        share = ps.share(names.index(spec.name))
        for p in spec.placements:
            if p.size <= 0 or p.mask & mask:
                continue
            whole = 0.0
            if p.size >= ps.axis:
                whole = whole_gpu_cost(ps.capacity(0), model_gpus, max(1, model_empty))
            raw = fragmentation(placement_loss(ps, mask, p), whole, spec.memory_mib, share=share)
            loss = tuple(float(x) for x in raw)
            if best is None or loss < best[0]:
                best = (loss, p.mask)
    if len(_GPU_BEST) > 65536:
        _GPU_BEST.clear()
    _GPU_BEST[memo] = best
    return best


def _best(
    gpus: Sequence[Gpu], masks: list[int], profiles: frozenset[str], empty: Mapping[str, int]
) -> tuple[tuple[float, ...], int, int] | None:
    """(loss, GPU position, placement mask) of the node's best free placement of any of `profiles`
    (the first GPU in order between equal losses, as steering lists them)."""
    count: dict[str, int] = {}
    for g in gpus:
        count[g.model.key] = count.get(g.model.key, 0) + 1
    best: tuple[tuple[float, ...], int, int] | None = None
    for i, g in enumerate(gpus):
        found = _gpu_best(g, masks[i], profiles, count[g.model.key], empty[g.model.key])
        if found is not None and (best is None or found[0] < best[0]):
            best = (found[0], i, found[1])
    return best


def _used(gpus: Sequence[Gpu]) -> float:
    """The node's share of memory slices taken (0 empty, 1 full)."""
    total = sum(g.axis for g in gpus)
    return sum(g.mask.bit_count() for g in gpus) / total if total else 0.0


def node_key(gpus: Sequence[Gpu], asks: Sequence[Ask]) -> NodeKey | None:
    """The engine's cost of placing every asked device on this node (lower is better), or None when
    they do not all fit on its free placements."""
    if not asks or sum(a.count for a in asks) > MAX_DEVICES or any(a.count < 1 for a in asks):
        return None
    masks = [g.mask for g in gpus]
    empty: dict[str, int] = {}
    for g, m in zip(gpus, masks, strict=True):
        empty[g.model.key] = empty.get(g.model.key, 0) + (0 if m else 1)
    total: list[float] = []
    for ask in asks:
        for _ in range(ask.count):
            found = _best(gpus, masks, ask.profiles, empty)
            if found is None:
                return None
            loss, i, pmask = found
            if not masks[i]:
                empty[gpus[i].model.key] -= 1
            masks[i] |= pmask
            total = [a + b for a, b in zip(total, loss, strict=True)] if total else list(loss)
    return (tuple(total), -_used(gpus))


def scores(keys: Mapping[str, NodeKey | None]) -> dict[str, int]:
    """Extender scores (0..MAX_SCORE) by rank of the nodes' keys: equal keys score alike."""
    ranked = sorted({k for k in keys.values() if k is not None})
    rank = {k: max(MIN_FEASIBLE_SCORE, MAX_SCORE - i) for i, k in enumerate(ranked)}
    return {node: 0 if k is None else rank[k] for node, k in keys.items()}


def node_gpus(
    slices: Iterable[object],
    claims: Iterable[object],
    driver: str,
    allowed: Callable[[GpuModel], tuple[str, ...]] | None = None,
) -> dict[str, list[Gpu]]:
    """Per node the driver's GPUs as its newest ResourceSlices publish them, occupied by the devices
    the cluster's ResourceClaims hold. A GPU's allowed profiles are `allowed(model)` (the device
    config's allowlist, which the plugin publishes from) or, without it or when it names none of
    the model's profiles, the profiles its slices list. Unreadable objects are left out."""
    view = DraView()
    devices = published_devices(slices, driver, view)
    held = claimed(claims, devices, driver, view)
    by_gpu = devices_by_gpu(devices.values())
    taken: dict[tuple[str, str], set[Instance]] = {}
    for d, _ in held:
        taken.setdefault((d.node, d.gpu_uuid), set()).add(Instance(d.profile, d.placement))
    out: dict[str, list[Gpu]] = {}
    for (node, uuid), ds in sorted(by_gpu.items(), key=lambda kv: (kv[0][0], kv[1][0].minor, kv[0][1])):
        model = ds[0].model
        names = tuple(n for n in allowed(model) if model.profile(n) is not None) if allowed else ()
        if not names:
            seen = {d.profile for d in ds}
            names = tuple(n for n in model.profile_names if n in seen)
        insts = tuple(sorted(taken.get((node, uuid), ()), key=lambda i: (i.placement.start, i.profile)))
        out.setdefault(node, []).append(Gpu(ds[0].minor, uuid, model, names, insts))
    return out
