"""A brute-force reference planner: the ranking rule applied to every GPU and every legal placement.

`PlacementIndex` reaches its choice through buckets, memo tables and lazy sorting so that a decision
over 40,000 GPUs stays fast. This module reaches the same choice the slow, obvious way, so a test can
hold the index to it: every schedulable, eligible GPU of the fleet, every covering profile of the
request, every free placement of that profile, each given its full key from the stated criteria, and
the smallest key wins. Nothing here is memoized, bucketed or shared with the index's search.

The criteria come from where they are defined, so the reference follows when they change:
- profile rank from `preference.candidate_order`,
- fragmentation loss from `plan.fragmentation`: for a GPU holding nothing, the price of the node
  slots for N-whole-GPU pods its node loses (`demand.node_risk` of the node's empty schedulable GPUs
  before the pod, under `demand.node_prices`), with `keep_nodes_whole` whether its node is empty
  (`plan.opens_node` of the node's fill and empty GPUs before the pod; it ranks nodes, not the GPUs of
  one node, as `mig.placement.plan` states), the profile's share of its model's GPU
  (`ProfileSet.share`), the demand price of the slots destroyed (`ProfileSet.risk`), then over
  `ProfileSet.value` (usable capacity, large placeable value and placeable value, before minus
  after the placement), `plan.whole_gpu_cost` for a
  placement taking the whole GPU (from its model's counts of schedulable and empty GPUs), and the
  profile's memory,
- the policy order and the placement-start tie-break from `plan.rank_key`,
- then node name, GPU index on its node and GPU UUID (the fleet's order).

Node fill is the share of slices used over the node's schedulable GPUs (all of them, whatever the
pod's GPU filters); GPU fill is the share of the GPU's axis used. A model's counts of schedulable and
empty GPUs cover every schedulable GPU of that NVML type in the fleet, whatever the pod's filters or
`nodes`. For a multi-device pod the stated rule is greedy: nodes in the order of the lead (largest)
device's best key on them; on a node, each device largest first takes its best key against the
node's tentative masks (node fill and the model counts stay what they were before the pod, and the
empty-node term is left out: it is the same for every GPU of the node); the first node taking every
device wins.

Quadratic and allocation-heavy on purpose: for tests and small fleets only.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from mig.placement.demand import PRIOR, Mix, NodeMix, node_prices, node_risk, risk_weights
from mig.placement.occupancy import ProfileSet, profile_set
from mig.placement.plan import (
    DevicePlacement,
    Loss,
    Plan,
    fragmentation,
    opens_node,
    rank_key,
    whole_gpu_cost,
)
from mig.placement.preference import candidate_order
from mig.placement.request import GpuState, Memory, Percent, PodRequest, memory_on
from mig.types import Placement

Device = tuple[int, int, Memory]


@dataclass(frozen=True)
class _Option:
    """One (GPU, profile, placement) for one device, with its full comparison key."""

    key: tuple[object, ...]
    gpu: GpuState
    pset: ProfileSet
    profile: int
    placement: Placement


def _pset(gpu: GpuState) -> ProfileSet | None:
    return profile_set(gpu.profiles) if gpu.profiles else None


def _schedulable(gpu: GpuState) -> bool:
    pset = _pset(gpu)
    return gpu.healthy and not gpu.cordoned and pset is not None and bool(pset.profiles)


def _eligible(pod: PodRequest, gpu: GpuState) -> bool:
    return _schedulable(gpu) and pod.type_exclusion(gpu.type) is None and pod.uuid_exclusion(gpu.uuid) is None


def _used(pset: ProfileSet, mask: int) -> int:
    return (mask & pset.full_mask).bit_count()


def node_fill(gpus: Sequence[GpuState]) -> float:
    """Share of slices used over the node's schedulable GPUs (0.0 when it has none)."""
    live = [(g, p) for g in gpus if _schedulable(g) and (p := _pset(g)) is not None]
    total = sum(p.axis for _, p in live)
    return sum(_used(p, g.occupied_mask) for g, p in live) / total if total else 0.0


def _loss(pset: ProfileSet, mask: int, placement: Placement) -> tuple[int, int, int]:
    cap, large, value = pset.value(mask)
    cap_after, large_after, value_after = pset.value(mask | placement.mask)
    return (cap - cap_after, large - large_after, value - value_after)


def slot_counts(fleet: Sequence[GpuState]) -> dict[str, dict[str, int]]:
    """Per NVML type: per profile name, the free slots of it (`ProfileSet.slots`) over its schedulable GPUs."""
    out: dict[str, dict[str, int]] = {}
    for g in fleet:
        pset = _pset(g)
        if _schedulable(g) and pset is not None:
            counts = out.setdefault(g.type, {})
            for name, n in zip(pset.names, pset.slots(g.occupied_mask), strict=True):
                counts[name] = counts.get(name, 0) + n
    return out


def weights_for(gpu: GpuState, mix: Mix, slots: dict[str, dict[str, int]]) -> tuple[int, ...]:
    """The price per profile of one free slot on this GPU (`demand.risk_weights` over `ProfileSet.offered`)."""
    pset = _pset(gpu)
    if pset is None:
        return ()
    return risk_weights(pset.names, pset.offered(mix), slots.get(gpu.type, {}))


def model_counts(fleet: Sequence[GpuState]) -> dict[str, tuple[int, int]]:
    """Per NVML type: (schedulable GPUs in the fleet, those of them holding nothing)."""
    counts: dict[str, list[int]] = {}
    for g in fleet:
        pset = _pset(g)
        if _schedulable(g) and pset is not None:
            c = counts.setdefault(g.type, [0, 0])
            c[0] += 1
            c[1] += _used(pset, g.occupied_mask) == 0
    return {t: (total, empty) for t, (total, empty) in counts.items()}


def empty_gpus(gpus: Sequence[GpuState]) -> int:
    """The node's schedulable GPUs holding nothing."""
    return sum(
        1 for g in gpus if _schedulable(g) and (p := _pset(g)) is not None and not _used(p, g.occupied_mask)
    )


def options(
    pod: PodRequest,
    ask: Memory,
    gpu: GpuState,
    mask: int,
    fill: float,
    model: tuple[int, int],
    weights: tuple[int, ...],
    nodes: int = 0,
    empty_node: int = 0,
) -> list[_Option]:
    """Every legal (profile, placement) for one device on this GPU at `mask`, with its full key;
    `model` is its model's (schedulable, empty) GPU counts (see `model_counts`), `weights` its price
    per profile slot (see `weights_for`), `nodes` the price of the node slots taking this GPU
    destroys while it is empty at `mask` (`demand.node_risk` of its node's empty GPUs), `empty_node`
    whether taking it opens its node for the pod (`plan.opens_node` of the node before the pod; the
    same for every GPU of the node, so 0 when ranking the GPUs of one node)."""
    pset = _pset(gpu)
    if pset is None:
        return []
    used = _used(pset, mask) / pset.axis
    extra = nodes if not _used(pset, mask) else 0
    out = []
    for rank, idx in candidate_order(pset.profiles, memory_on(ask, gpu.memory_mb), pod.preference):
        for p in pset.profiles[idx].placements:
            if p.size <= 0 or p.mask & mask:
                continue
            key = (
                *rank_key(
                    pod,
                    rank,
                    _frag(pset, mask, p, idx, model, weights, extra, empty_node),
                    fill,
                    used,
                    p.start,
                ),
                gpu.node,
                gpu.index,
                gpu.uuid,
            )
            out.append(_Option(key, gpu, pset, idx, p))
    return out


def _frag(
    pset: ProfileSet,
    mask: int,
    p: Placement,
    idx: int,
    model: tuple[int, int],
    weights: tuple[int, ...],
    nodes: int = 0,
    empty_node: int = 0,
) -> Loss:
    whole = whole_gpu_cost(pset.capacity(0), *model) if p.size >= pset.axis else 0.0
    risk = pset.risk(mask, p, weights)
    return fragmentation(
        _loss(pset, mask, p), whole, pset.profiles[idx].memory_mb, risk, pset.share(idx), nodes, empty_node
    )


def _pickiness(device: Device, total_mb: int) -> tuple[int, int, int, int]:
    ci, di, ask = device
    mem = memory_on(ask, total_mb)
    return (0 if mem is None else 1, -(mem or 0), ci, di)


def _placed(device: Device, o: _Option) -> DevicePlacement:
    prof = o.pset.profiles[o.profile]
    return DevicePlacement(
        device[0], device[1], o.gpu.node, o.gpu.uuid, prof.name, o.placement, prof.memory_mb, prof.core
    )


def _on_node(
    pod: PodRequest,
    devices: list[Device],
    gpus: list[GpuState],
    fill: float,
    counts: dict[str, tuple[int, int]],
    weights: dict[str, tuple[int, ...]],
    nodes: int = 0,
) -> Plan | None:
    """Every device on this node, largest first, each taking its best option; None if one does not fit.
    `nodes`: the node-slot price of taking one of its empty GPUs (from its empty GPUs before the pod).
    The empty-node term is 0 here: whether the pod opens this node is the same for all its GPUs."""
    eligible = [g for g in gpus if _eligible(pod, g)]
    masks = {g.uuid: g.occupied_mask for g in eligible}
    largest = max((g.memory_mb for g in eligible), default=0)
    placed = []
    for device in sorted(devices, key=lambda d: _pickiness(d, largest)):
        found = [
            o
            for g in eligible
            for o in options(pod, device[2], g, masks[g.uuid], fill, counts[g.type], weights[g.uuid], nodes)
        ]
        if not found:
            return None
        best = min(found, key=lambda o: o.key)
        masks[best.gpu.uuid] |= best.placement.mask
        placed.append(_placed(device, best))
    placed.sort(key=lambda d: (d.container_index, d.device_index))
    return Plan(gpus[0].node, tuple(placed))


def reference_plan(
    pod: PodRequest,
    fleet: Sequence[GpuState],
    nodes: Collection[str] | None = None,
    mix: Mix = PRIOR,
    node_mix: NodeMix = (),
    keep_nodes_whole: bool = False,
) -> Plan | None:
    """The plan the stated ranking rule picks for `pod` on `fleet` (restricted to `nodes`), or None,
    with placements priced by the demand `mix` and `node_mix` (`PlacementIndex.set_demand`) and
    empty nodes kept whole when `keep_nodes_whole` (`PlacementIndex(keep_nodes_whole=...)`)."""
    devices = pod.devices()
    if not devices:
        return Plan(node="", devices=())
    by_node: dict[str, list[GpuState]] = {}
    for g in fleet:
        by_node.setdefault(g.node, []).append(g)
    fills = {n: node_fill(gpus) for n, gpus in by_node.items()}
    counts = model_counts(fleet)
    slots = slot_counts(fleet)
    weights = {g.uuid: weights_for(g, mix, slots) for g in fleet}
    empties = {n: empty_gpus(gpus) for n, gpus in by_node.items()}
    histogram: dict[int, int] = {}
    for e in empties.values():
        histogram[e] = histogram.get(e, 0) + 1
    prices = node_prices(node_mix, histogram)
    risk = {n: node_risk(prices, e) for n, e in empties.items()}
    opens = {n: opens_node(fills[n], e) if keep_nodes_whole else 0 for n, e in empties.items()}
    shares = any(isinstance(d[2], Percent) for d in devices)
    largest = max((g.memory_mb for g in fleet), default=0) if shares else 0
    lead = min(devices, key=lambda d: _pickiness(d, largest))
    best_on_node: dict[str, tuple[object, ...]] = {}
    for node, gpus in by_node.items():
        if nodes is not None and node not in nodes:
            continue
        keys = [
            o.key
            for g in gpus
            if _eligible(pod, g)
            for o in options(
                pod,
                lead[2],
                g,
                g.occupied_mask,
                fills[node],
                counts[g.type],
                weights[g.uuid],
                risk[node],
                opens[node],
            )
        ]
        if keys:
            best_on_node[node] = min(keys)
    for node in sorted(best_on_node, key=lambda n: best_on_node[n]):
        plan = _on_node(pod, devices, by_node[node], fills[node], counts, weights, risk[node])
        if plan is not None:
            return plan
    return None
