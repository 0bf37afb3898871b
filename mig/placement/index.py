"""The fleet index the scheduler keeps between requests, and the one-shot `plan_pod`.

GPUs are grouped by (profile set, occupancy mask, NVML type) and, inside a group, by the fill of
their node. A decision evaluates each group once (a memoized table lookup), ranks (group, node fill)
buckets, and only then looks at the GPUs of the best bucket, so a decision over 5,000 nodes × 8 GPUs
does not walk every placement of every GPU. A reservation moves the GPUs of one node between buckets.
A blocked node (`block`: the caller knows a bind there would fail now, e.g. on its node lock) keeps
its GPUs in buckets of their own until it is unblocked, so a decision that skips blocked nodes never
walks them, and any other decision ranks both kinds of bucket together.

Multi-device pods: the pickiest device (largest request) leads. Nodes are tried in the order of the
lead device's best candidate on them; on each, every device of the pod is planned together, largest
request first, against the node's tentative occupancy (so `nvidia.com/gpu: 2` may land twice on one
GPU). The first node that takes the whole pod wins.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from itertools import compress, repeat
from operator import attrgetter

from mig.placement import reasons as R
from mig.placement.demand import PRIOR, Mix, NodeMix, node_prices, node_risk, risk_weights
from mig.placement.occupancy import Choice, ProfileSet, profile_set
from mig.placement.plan import (
    DevicePlacement,
    Loss,
    Plan,
    fragmentation,
    opens_node,
    rank_key,
    whole_gpu_cost,
)
from mig.placement.request import BINPACK, GpuState, Memory, Percent, PodRequest, memory_on
from mig.types import Placement

_SORT_KEY = attrgetter("sort_key")
_NODE = attrgetter("node")
PRICED_MEMO = 4096  # risk weights remembered across decisions (cleared when full, or the mix changes)
Device = tuple[int, int, Memory]  # (containerIndex, deviceIndex, MiB, a share of GPU memory, or None)


class _Gpu:
    """Mutable index entry for one GPU."""

    __slots__ = (
        "cordoned",
        "healthy",
        "index",
        "mask",
        "node",
        "order",
        "profiles",
        "pset",
        "sort_key",
        "total",
        "type",
        "uuid",
    )

    def __init__(self, state: GpuState, pset: ProfileSet | None):
        self.node, self.uuid, self.type, self.index = state.node, state.uuid, state.type, state.index
        self.pset, self.mask, self.healthy = pset, state.occupied_mask, state.healthy
        self.profiles = state.profiles  # as published: the same object again keeps its set
        self.order = (state.index, state.node)
        self.sort_key = (state.node, state.index, state.uuid)  # the fleet's order: the tie-break in a bucket
        self.total = state.memory_mb
        self.cordoned = state.cordoned

    @property
    def schedulable(self) -> bool:
        return self.healthy and not self.cordoned and self.pset is not None and bool(self.pset.profiles)

    @property
    def profile_set(self) -> ProfileSet:
        """The profile set of a schedulable GPU: only those are bucketed and planned on."""
        assert self.pset is not None, "a schedulable GPU has a profile set"
        return self.pset

    def group(self) -> tuple[int, int, str, int]:
        return (id(self.pset), self.mask, self.type, self.total)

    def used(self) -> int:
        return (self.mask & self.pset.full_mask).bit_count() if self.pset else 0

    def snapshot(self) -> R.GpuSnapshot:
        return (
            self.index,
            self.uuid,
            self.type,
            self.pset,
            self.mask,
            self.healthy,
            self.total,
            self.cordoned,
        )


def _pickiness(device: Device, total_mb: int = 0) -> tuple[int, int, int, int]:
    """Largest request first; a share of GPU memory is sized against `total_mb` for this ordering."""
    ci, di, ask = device
    mem = memory_on(ask, total_mb)
    return (0 if mem is None else 1, -(mem or 0), ci, di)


@dataclass
class _Candidate:
    rank: tuple[int, int]
    profile: int
    choice: Choice


# GPUs of one (group, node fill) bucket, sorted by `_Gpu.sort_key`: the first usable one is the best
_Members = list[_Gpu]
_Bucket = list[tuple[_Candidate, _Members]]  # (candidate, GPUs) of the groups sharing a key
_Memo = dict[tuple[object, ...], tuple[tuple[object, ...], _Candidate] | None]
# a node's place in a group: (its fill, its count of empty schedulable GPUs)
_NodeKey = tuple[float, int]
# (candidate, node key -> GPUs, node key -> bucket key) of one group, for `_best_first`
_Group = tuple[_Candidate, dict[_NodeKey, _Members], Callable[[_NodeKey], tuple[object, ...]]]


def _best_on(
    pset: ProfileSet, mask: int, mem: int | None, pod: PodRequest, weights: tuple[int, ...]
) -> _Candidate | None:
    """The best profile and placement for one device at this occupancy, or None."""
    for rank, idx in pset.order(mem, pod.preference):
        choice = pset.best_at_risk(mask, idx, weights)
        if choice is not None:
            return _Candidate(rank, idx, choice)
    return None


def _has_filters(pod: PodRequest) -> bool:
    return bool(pod.use_uuids or pod.nouse_uuids or pod.use_types or pod.nouse_types)


def _gpu_order(pair: tuple[_Gpu, object]) -> tuple[str, int, str]:
    return pair[0].sort_key


def _walk(cand: _Candidate, members: _Members, allowed: set[str] | None) -> Iterator[tuple[_Gpu, _Candidate]]:
    """The bucket's GPUs on `allowed` nodes (None: all), in bucket order, each with the candidate.
    The skipping runs at C speed (a bucket of empty GPUs may hold thousands, most of them on nodes
    kube-scheduler did not send)."""
    gpus = (
        iter(members)
        if allowed is None
        else compress(members, map(allowed.__contains__, map(_NODE, members)))
    )
    return zip(gpus, repeat(cand))


def _best_first(
    heads: list[tuple[tuple[object, ...], int, list[_NodeKey]]], groups: list[_Group]
) -> Iterator[_Bucket]:
    """The (group, node key) buckets in key order, lazily: `heads` holds each group's best key not
    yet yielded (its node keys still to come in `fills`, sorted by their bucket key, best last), so a
    heap over groups yields keys in the order `sorted` would, and equal keys (of different groups, or
    of one group's node keys) are yielded together as one bucket. Most decisions stop at the first."""
    heapq.heapify(heads)
    while heads:
        top = heads[0][0]
        bucket: _Bucket = []
        while heads and heads[0][0] == top:
            _, seq, fills = heapq.heappop(heads)
            cand, by_fill, key_of = groups[seq]
            bucket.append((cand, by_fill[fills.pop()]))
            if fills:
                heapq.heappush(heads, (key_of(fills[-1]), seq, fills))
        yield bucket


_Groups = dict[tuple[int, int, str, int], dict[_NodeKey, _Members]]  # group key -> node key -> GPUs


_GroupKey = tuple[int, int, str, int]


def _runs(gpus: Iterable[_Gpu]) -> list[tuple[_GroupKey, list[_Gpu]]]:
    """One node's schedulable GPUs by group, each run in GPU order. A node leads the GPU order, so
    in a bucket (group, node fill) a node's GPUs are adjacent: each run moves as one slice."""
    by_group: dict[_GroupKey, list[_Gpu]] = {}
    for g in gpus:
        by_group.setdefault(g.group(), []).append(g)
    for run in by_group.values():
        if len(run) > 1:
            run.sort(key=_SORT_KEY)
    return list(by_group.items())


def _put(groups: _Groups, key: _GroupKey, run: list[_Gpu], fill: _NodeKey) -> None:
    """File one node's GPUs of one group (`_runs`; none of that node's are filed there) in their
    (group, node fill) bucket, in GPU order."""
    members = groups.setdefault(key, {}).setdefault(fill, [])
    at = bisect.bisect_left(members, run[0].sort_key, key=_SORT_KEY)
    members[at:at] = run


def _take(groups: _Groups, key: _GroupKey, run: list[_Gpu], fill: _NodeKey) -> None:
    """Take one node's GPUs of one group (all of that node's in the bucket, `_runs`) out of their
    (group, node fill) bucket; empty buckets and groups go."""
    buckets = groups[key]
    members = buckets[fill]
    at = bisect.bisect_left(members, run[0].sort_key, key=_SORT_KEY)
    del members[at : at + len(run)]
    if not members:
        del buckets[fill]
        if not buckets:
            del groups[key]


class PlacementIndex:
    """Occupancy of a fleet of MIG GPUs, kept up to date by the scheduler.

    Add GPUs with `upsert` (from node annotations), mark reservations with `reserve`/`release` (or
    `apply(plan)`), and ask `plan(pod)`. Planning never changes the index; the caller applies the plan
    once it has committed to it. Not thread-safe: the scheduler serializes access.
    """

    def __init__(self, gpus: Iterable[GpuState] = (), keep_nodes_whole: bool = False):
        """`keep_nodes_whole` (opt-in): rank a placement that opens an empty node after any on a node
        in use (`plan.opens_node`; off, the `empty node` term is 0 for every placement)."""
        self.keep_nodes_whole = keep_nodes_whole
        self._gpus: dict[str, _Gpu] = {}
        # group key -> node fill -> GPUs in sort_key order
        self._groups: _Groups = {}
        self._nodes: dict[str, dict[str, _Gpu]] = {}
        self._fill: dict[str, _NodeKey] = {}  # node -> (fill, empty schedulable GPUs)
        # count of empty schedulable GPUs -> nodes with that many (node slots for multi-GPU pods)
        self._empties: dict[int, int] = {}
        # node -> immutable snapshot of its GPUs (for refusals)
        self._sig: dict[str, tuple[R.GpuSnapshot, ...]] = {}
        # NVML type -> [schedulable GPUs, empty ones among them], for the whole-GPU model choice
        self._types: dict[str, list[int]] = {}
        # blocked nodes: their GPUs count as any (fill, types, snapshots) but are bucketed in `_parked`
        self._blocked: set[str] = set()
        self._parked: _Groups = {}
        # NVML type -> profile name -> free slots of it over the type's schedulable GPUs (`ProfileSet.slots`)
        self._slots: dict[str, dict[str, int]] = {}
        self._mix: Mix = PRIOR
        self._node_mix: NodeMix = ()
        self._node_prices: dict[int, int] = {}  # this decision's, per N (`demand.node_prices`)
        self._offered: dict[int, tuple[float, ...]] = {}  # id(profile set) -> work offered per profile
        self._weights: dict[tuple[int, str], tuple[int, ...]] = {}  # this decision's, per (set, type)
        # (id(profile set), the model's free slots per profile) -> weights, under the current mix
        self._priced: dict[tuple[int, tuple[int | None, ...]], tuple[int, ...]] = {}
        for g in gpus:
            self.upsert(g)

    # ---- maintenance -------------------------------------------------------------------------
    def upsert(self, state: GpuState) -> None:
        """Add or replace a GPU (its published profiles, health and reserved placements). A GPU that
        stays on its node is replaced in one change of that node (the filter's reservations do this)."""
        old = self._gpus.get(state.uuid)
        if old is not None and old.node != state.node:
            self.remove(state.uuid)
        if old is not None and old.profiles is state.profiles:
            pset = old.pset  # a change of occupancy: the published profiles are the same object
        else:
            pset = profile_set(state.profiles) if state.profiles else None
        g = _Gpu(state, pset)

        def put() -> None:
            self._gpus[g.uuid] = g
            self._nodes.setdefault(g.node, {})[g.uuid] = g

        self._change(g.node, put)

    def remove(self, uuid: str) -> None:
        g = self._gpus.get(uuid)
        if g is None:
            return

        def drop() -> None:
            del self._gpus[uuid]
            del self._nodes[g.node][uuid]

        self._change(g.node, drop)

    def remove_node(self, node: str) -> None:
        for uuid in list(self._nodes.get(node, ())):
            self.remove(uuid)

    def reserve(self, uuid: str, placement: Placement) -> None:
        """Mark a placement taken; an overlap with a held placement is a bug upstream, so it raises."""
        g = self._gpus[uuid]
        if g.mask & placement.mask:
            raise ValueError(f"placement {placement} overlaps occupied slices on GPU {uuid}")
        self._change(g.node, lambda: setattr(g, "mask", g.mask | placement.mask))

    def release(self, uuid: str, placement: Placement) -> None:
        g = self._gpus.get(uuid)
        if g is not None:
            self._change(g.node, lambda: setattr(g, "mask", g.mask & ~placement.mask))

    def apply(self, plan: Plan) -> None:
        for d in plan.devices:
            self.reserve(d.gpu_uuid, d.placement)

    def occupied_mask(self, uuid: str) -> int:
        return self._gpus[uuid].mask

    def nodes(self) -> list[str]:
        return sorted(self._nodes)

    def block(self, nodes: Iterable[str]) -> None:
        """From now on exactly `nodes` are blocked: `plan(..., skip_blocked=True)` decides as if they
        were left out of its `nodes` (they may be unknown yet, or change meanwhile). Only the nodes
        entering or leaving the set move: a caller that passes its current set on every decision
        pays for the changes. A set is read as it is, not copied."""
        wanted = nodes if isinstance(nodes, (set, frozenset)) else set(nodes)
        for node in wanted.symmetric_difference(self._blocked):
            self._toggle_block(node)

    def _toggle_block(self, node: str) -> None:
        """Move a node's GPUs between the ranked buckets and the parked ones (same keys, same fill)."""
        source = self._buckets_of(node)
        self._blocked.symmetric_difference_update((node,))
        fill = self._fill.get(node)
        if fill is None:  # a node the index does not hold (yet): none of its GPUs is filed
            return
        target = self._buckets_of(node)
        for key, run in _runs(g for g in self._nodes[node].values() if g.schedulable):
            _take(source, key, run, fill)
            _put(target, key, run, fill)

    def _buckets_of(self, node: str) -> _Groups:
        """Where the node's GPUs are filed: the parked buckets while it is blocked, else the ranked."""
        return self._parked if node in self._blocked else self._groups

    def _change(self, node: str, mutate: Callable[[], None]) -> None:
        """Apply a change to one node: its GPUs leave their buckets, change, and come back. The
        per-model counts move only for GPUs whose occupancy changed (a reservation changes one GPU,
        but the node's fill moves all of them between buckets)."""
        before = {id(g): (g, g.mask) for g in self._nodes.get(node, {}).values() if g.schedulable}
        if before:
            source, fill = self._buckets_of(node), self._fill[node]
            for key, run in _runs(g for g, _ in before.values()):
                _take(source, key, run, fill)
        mutate()
        gpus = self._nodes.get(node)
        live = [g for g in gpus.values() if g.schedulable] if gpus else []
        for g in live:
            old = before.pop(id(g), None)
            if old is None or old[1] != g.mask:
                if old is not None:
                    self._count_type(g, -1, old[1])
                self._count_type(g, 1, g.mask)
        for g, mask in before.values():  # gone, or no longer schedulable
            self._count_type(g, -1, mask)
        old_fill = self._fill.get(node)
        if old_fill is not None:
            self._count_empties(old_fill[1], -1)
        if not gpus:
            self._nodes.pop(node, None)
            self._fill.pop(node, None)
            self._sig.pop(node, None)
            return
        total = sum(g.profile_set.axis for g in live)
        empty = sum(1 for g in live if not g.used())
        fill = self._fill[node] = (sum(g.used() for g in live) / total if total else 0.0, empty)
        self._count_empties(empty, 1)
        self._sig[node] = tuple(g.snapshot() for g in sorted(gpus.values(), key=lambda g: (g.index, g.uuid)))
        groups = self._buckets_of(node)
        for key, run in _runs(live):
            _put(groups, key, run, fill)

    def _count_empties(self, empty: int, step: int) -> None:
        left = self._empties.get(empty, 0) + step
        if left:
            self._empties[empty] = left
        else:
            self._empties.pop(empty, None)

    def _count_type(self, g: _Gpu, step: int, mask: int) -> None:
        """Count (step 1) or uncount (-1) a schedulable GPU at occupancy `mask` in its model's totals."""
        pset = g.profile_set
        counts = self._types.setdefault(g.type, [0, 0])
        counts[0] += step
        counts[1] += step if not mask & pset.full_mask else 0
        slots = self._slots.setdefault(g.type, {})
        for name, n in zip(pset.names, pset.slots(mask), strict=True):
            slots[name] = slots.get(name, 0) + step * n

    @property
    def demand(self) -> Mix:
        """The demand mix placements are priced by now (`PRIOR` until one is set)."""
        return self._mix

    @property
    def node_demand(self) -> NodeMix:
        """The work of pods asking for N whole GPUs on one node that node slots are priced by now."""
        return self._node_mix

    def set_demand(self, mix: Mix, nodes: NodeMix = ()) -> None:
        """The demand mix to price placements by (`mig.placement.demand.DemandEstimate.mix`); `PRIOR`
        (the default) prices every published profile as if one instance of it were running. `nodes`
        (`DemandEstimate.node_mix`): the work of pods asking for N whole GPUs on one node, which
        prices taking an empty GPU of a node by the node slots it destroys (`demand.node_risk`)."""
        if mix != self._mix:
            self._mix = tuple(mix)
            self._offered.clear()
            self._priced.clear()
        self._node_mix = tuple(nodes)

    def _risk_weights(self, pset: ProfileSet, gtype: str) -> tuple[int, ...]:
        """This decision's price per profile of one free slot on a GPU of this set and type."""
        key = (id(pset), gtype)
        hit = self._weights.get(key)
        if hit is None:
            slots = self._slots.get(gtype, {})
            # the same set and free slots under the same mix price the same (memoized across decisions)
            priced = (id(pset), tuple(map(slots.get, pset.names)))
            hit = self._priced.get(priced)
            if hit is None:
                offered = self._offered.get(id(pset))
                if offered is None:
                    offered = self._offered[id(pset)] = pset.offered(self._mix)
                if len(self._priced) >= PRICED_MEMO:
                    self._priced.clear()
                hit = self._priced[priced] = risk_weights(pset.names, offered, slots)
            self._weights[key] = hit
        return hit

    def _loss(
        self,
        cand: _Candidate,
        pset: ProfileSet,
        gtype: str,
        nodes: int = 0,
        empty_node: int = 0,
    ) -> Loss:
        """The candidate's fragmentation loss (`plan.fragmentation`); for a placement taking the whole
        GPU, its model's counts of schedulable and empty GPUs price it (`plan.whole_gpu_cost`);
        `nodes` is the price of the node slots it destroys (`demand.node_risk`)."""
        whole = 0.0
        if cand.choice.placement.size >= pset.axis:
            total, empty = self._types[gtype]
            whole = whole_gpu_cost(pset.capacity(0), total, empty)
        prof = pset.profiles[cand.profile]
        return fragmentation(
            cand.choice.loss,
            whole,
            prof.memory_mb,
            cand.choice.risk,
            pset.share(cand.profile),
            nodes,
            empty_node,
        )

    # ---- planning ----------------------------------------------------------------------------
    def plan(
        self, pod: PodRequest, nodes: Collection[str] | None = None, skip_blocked: bool = False
    ) -> Plan | R.Refusal:
        """Place every requested device of `pod` on one node (restricted to `nodes` if given). With
        `skip_blocked`, never on a blocked node: the decision and refusal are the ones over `nodes`
        without the blocked ones, found without looking at their GPUs."""
        devices = pod.devices()
        if not devices:
            return Plan(node="", devices=())
        allowed = set(nodes) if nodes is not None else None
        self._weights = {}  # priced from the fleet as it is now
        self._node_prices = node_prices(self._node_mix, self._empties) if self._node_mix else {}
        # with `skip`, the walk never meets a blocked node (their GPUs are parked), so only the
        # refusal has to leave them out of `allowed`
        skip = skip_blocked and bool(self._blocked)
        shares = any(isinstance(d[2], Percent) for d in devices)
        largest = max((g.total for g in self._gpus.values()), default=0) if shares else 0
        lead = min(devices, key=lambda d: _pickiness(d, largest))
        tried: set[str] = set()
        memo: _Memo = {}  # (profile set, mask, request, type) -> (key on a node, best), this decision
        for g, cand in self._lead_candidates(pod, lead, allowed, skip):
            if g.node in tried:
                continue
            tried.add(g.node)
            if len(devices) == 1:
                return Plan(g.node, (self._placement(lead, g, cand),))
            plan = self._plan_node(pod, devices, g.node, memo)
            if plan is not None:
                return plan
        if skip:
            allowed = (set(self._nodes) if allowed is None else allowed) - self._blocked
        return self._refusal(pod, devices, lead, allowed, tried)

    def plan_on(self, pod: PodRequest, node: str) -> Plan | None:
        """`plan(pod, (node,))` when it places the pod, else None, found on that node's GPUs alone
        (`plan` walks the fleet's buckets for the best candidates, which costs the fleet's size
        even when one node is allowed)."""
        devices = pod.devices()
        if not devices or node not in self._nodes:
            return None
        self._weights = {}  # priced from the fleet as it is now, as `plan` does
        self._node_prices = node_prices(self._node_mix, self._empties) if self._node_mix else {}
        return self._plan_node(pod, devices, node, {})

    def _eligible(self, pod: PodRequest, g: _Gpu) -> bool:
        return pod.uuid_exclusion(g.uuid) is None

    def _lead_candidates(
        self, pod: PodRequest, lead: Device, allowed: set[str] | None, skip_blocked: bool
    ) -> Iterator[tuple[_Gpu, _Candidate]]:
        """GPUs able to take the lead device, best first (lazily: only the best buckets are sorted).

        The ranking rule, applied here and in `_plan_node` (first difference wins, lower is better):
        `plan.rank_key` — profile rank (preference, then smallest covering), then the policy's order
        of fragmentation loss, node fill and GPU fill, then placement start (binpack/binpack: loss
        then node fill) — and then node name, GPU index on its node, GPU UUID. Fragmentation loss
        (`plan.fragmentation`) is: the profile's share of its model's GPU; the demand price of the
        slots it destroys; usable capacity
        lost as a share of the GPU; for a placement taking the whole GPU, the GPU's compute slices
        over the share of its model's schedulable GPUs that are empty fleet-wide (whatever the pod's
        filters or `nodes`); value of the free half-GPU-or-larger placements lost; the profile's
        memory; placeable value lost. So a whole-GPU job goes to the model the small requests left
        empty (between models about as empty, the one with fewer compute slices), and a small request
        takes the least memory among candidates that cost the same capacity and large placements. Each GPU
        contributes its best (profile, placement) only, which is the same as ranking every placement
        because rank leads and, within one GPU, fill is fixed.

        It is evaluated once per bucket, not per GPU: a bucket is the GPUs sharing the group key
        (profile set, occupancy mask, NVML type, total memory) and their node's fill, and every
        criterion above before the GPU-order tie-break is computed from the bucket's first GPU (a
        model's counts of schedulable and empty GPUs are kept per NVML type by `_change`). So
        any criterion that varies per GPU or per node beyond those five things (a label, a health
        score, a node's other GPUs' types...) would silently be ranked per bucket, i.e. wrongly. A new
        criterion must either join `_Gpu.group()` / the fill bucket or be applied per GPU below;
        `mig.placement.reference` ranks every GPU and placement directly and
        tests/mig/test_reference_planner.py holds the index to it.
        """
        type_ok: dict[str, bool] = {}
        filtered = _has_filters(pod)
        # per group with a candidate: its best key not yet ranked, and its fills still to rank (best
        # last: the fullest node first for binpack, the emptiest for spread)
        groups: list[_Group] = []
        heads: list[tuple[tuple[object, ...], int, list[_NodeKey]]] = []
        fuller_first = pod.node_policy == BINPACK
        # a blocked node's GPUs sit in `_parked` buckets; ranked beside the others, a bucket of each
        # with the same key is one bucket (`_best_first`)
        sources = (self._groups,) if skip_blocked else (self._groups, self._parked)
        for (_, mask, gtype, total), by_fill in (item for source in sources for item in source.items()):
            if filtered:
                ok = type_ok.get(gtype)
                if ok is None:
                    ok = type_ok[gtype] = pod.type_exclusion(gtype) is None
                if not ok:
                    continue
            first = next(iter(by_fill.values()))[0]
            pset = first.profile_set
            cand = _best_on(pset, mask, memory_on(lead[2], total), pod, self._risk_weights(pset, gtype))
            if cand is None:
                continue
            used = first.used() / pset.axis
            start = cand.choice.placement.start
            loss = self._loss(cand, pset, gtype)
            empty_gpu = not mask & pset.full_mask
            if self._node_prices and empty_gpu:
                # an empty GPU: its node's empty GPUs price the node slots taking it destroys, and
                # its node's fill says whether taking it opens an empty node (`plan.opens_node`)
                losses: dict[tuple[int, int], Loss] = {}

                def priced_key(
                    fill: _NodeKey,
                    cand: _Candidate = cand,
                    pset: ProfileSet = pset,
                    gtype: str = gtype,
                    used: float = used,
                    start: int = start,
                    losses: dict[tuple[int, int], Loss] = losses,
                ) -> tuple[object, ...]:
                    at = (fill[1], opens_node(*fill) if self.keep_nodes_whole else 0)
                    loss = losses.get(at)
                    if loss is None:
                        loss = losses[at] = self._loss(
                            cand, pset, gtype, node_risk(self._node_prices, fill[1]), at[1]
                        )
                    return rank_key(pod, cand.rank, loss, fill[0], used, start)

                key_of: Callable[[_NodeKey], tuple[object, ...]] = priced_key
                fills = sorted(by_fill, key=key_of, reverse=True)
            else:
                # on an empty GPU of an empty node, the loss of opening it (its node's fill is 0.0,
                # so it sorts where the fill puts it under every policy's key)
                opens = empty_gpu and self.keep_nodes_whole
                opened = self._loss(cand, pset, gtype, 0, 1) if opens else loss

                def plain_key(
                    fill: _NodeKey,
                    cand: _Candidate = cand,
                    loss: Loss = loss,
                    opened: Loss = opened,
                    opens: bool = opens,
                    used: float = used,
                    start: int = start,
                ) -> tuple[object, ...]:
                    return rank_key(
                        pod,
                        cand.rank,
                        opened if opens and opens_node(*fill) else loss,
                        fill[0],
                        used,
                        start,
                    )

                key_of = plain_key
                fills = sorted(by_fill, reverse=not fuller_first)
            heads.append((key_of(fills[-1]), len(groups), fills))
            groups.append((cand, by_fill, key_of))

        # Each bucket is kept in GPU order, so its usable GPUs come in rank order by walking it and
        # skipping the others; the walk stops where the caller does (most decisions take the first).
        # kube-scheduler sends a sample of the nodes and binds in progress lock some, so the first
        # GPU of a bucket is often not usable: the walk costs the GPUs skipped (at C speed), not the bucket.
        for entries in _best_first(heads, groups):
            walks = [_walk(cand, members, allowed) for cand, members in entries]
            for g, cand in walks[0] if len(walks) == 1 else heapq.merge(*walks, key=_gpu_order):
                if not filtered or self._eligible(pod, g):
                    yield g, cand

    def _placement(self, device: Device, g: _Gpu, cand: _Candidate) -> DevicePlacement:
        prof = g.profile_set.profiles[cand.profile]
        return DevicePlacement(
            device[0], device[1], g.node, g.uuid, prof.name, cand.choice.placement, prof.memory_mb, prof.core
        )

    def _plan_node(self, pod: PodRequest, devices: list[Device], node: str, memo: _Memo) -> Plan | None:
        """All devices of the pod on one node, largest request first, or None if they do not all fit.

        Each device takes its best key by the rule stated in `_lead_candidates`, per GPU of this node,
        against the node's tentative masks; node fill, and each model's count of empty GPUs, stay
        what they were before this pod. The empty-node term is left out (`_node_key` passes 0): it
        ranks nodes, not the GPUs of one node (`mig.placement.plan`).
        """
        filtered = _has_filters(pod)
        gpus = [
            (g, g.profile_set)
            for g in self._nodes[node].values()
            if g.schedulable
            and (not filtered or (self._eligible(pod, g) and pod.type_exclusion(g.type) is None))
        ]
        masks = [g.mask for g, _ in gpus]
        # node slots priced from the node's empty GPUs before this pod (as its fill)
        empty = self._fill[node][1] if self._node_prices else -1
        placed: list[DevicePlacement] = []
        largest = max((g.total for g, _ in gpus), default=0)
        for device in sorted(devices, key=lambda d: _pickiness(d, largest)):
            best: tuple[tuple[tuple[object, ...], int], int, _Candidate] | None = None
            ask = device[2]
            for i, (g, pset) in enumerate(gpus):
                mask = masks[i]
                mem = memory_on(ask, g.total) if isinstance(ask, Percent) else ask
                nodes = empty if empty >= 0 and not mask & pset.full_mask else -1
                mkey = (pset, mask, mem, g.type, nodes)
                if mkey in memo:
                    hit = memo[mkey]
                else:
                    hit = memo[mkey] = self._node_key(pod, pset, mask, mem, g.type, nodes)
                if hit is None:
                    continue
                key = (hit[0], g.index)
                if best is None or key < best[0]:
                    best = (key, i, hit[1])
            if best is None:
                return None
            _, i, cand = best
            masks[i] |= cand.choice.placement.mask
            placed.append(self._placement(device, gpus[i][0], cand))
        placed.sort(key=lambda d: (d.container_index, d.device_index))
        return Plan(node=node, devices=tuple(placed))

    def _node_key(
        self, pod: PodRequest, pset: ProfileSet, mask: int, mem: int | None, gtype: str, empty: int = -1
    ) -> tuple[tuple[object, ...], _Candidate] | None:
        """A GPU's best candidate for one device and its key among the GPUs of one node: the rule of
        `_lead_candidates` with node fill left out (it is the same for every GPU of the node, and so
        is the node name), so it is shared by every GPU of the decision at this occupancy (and, for
        an empty GPU while node slots are priced, its node's count of empty GPUs: `empty`, else -1)."""
        cand = _best_on(pset, mask, mem, pod, self._risk_weights(pset, gtype))
        if cand is None:
            return None
        used = (mask & pset.full_mask).bit_count() / pset.axis
        loss = self._loss(cand, pset, gtype, node_risk(self._node_prices, empty) if empty >= 0 else 0)
        return rank_key(pod, cand.rank, loss, 0.0, used, cand.choice.placement.start), cand

    # ---- refusal -----------------------------------------------------------------------------
    def _refusal(
        self,
        pod: PodRequest,
        devices: list[Device],
        lead: Device,
        allowed: set[str] | None,
        tried: set[str],
    ) -> R.Refusal:
        """A refusal over an immutable snapshot of the nodes (`reasons.refusal` words it)."""
        # Snapshots are replaced, never mutated, on a change, so a shallow copy is a snapshot of the
        # fleet.
        if allowed is None:
            sigs = dict(self._sig)
            count = len(self._gpus)  # every GPU of the index is in its node's snapshot
        else:
            sigs = {n: self._sig.get(n, ()) for n in allowed}
            count = sum(len(g) for g in sigs.values())
        return R.refusal(pod, sigs, count, [ask for _, _, ask in devices], lead[2], set(tried))


def plan_pod(pod: PodRequest, gpus: Iterable[GpuState]) -> Plan | R.Refusal:
    """One-shot planning over a list of GPUs (builds a throwaway index)."""
    return PlacementIndex(gpus).plan(pod)
