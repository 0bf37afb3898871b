"""The fleet index the scheduler keeps between requests, and the one-shot `plan_pod`.

GPUs are grouped by (profile set, occupancy mask, NVML type). A decision evaluates each group once
(a memoized table lookup), ranks the groups, and only then looks at the GPUs of the best groups, so
a decision over 5,000 nodes × 8 GPUs does not walk every placement of every GPU. Reservations move a
GPU between groups in O(1).

Multi-device pods: the pickiest device (largest request) leads. Nodes are tried in the order of the
lead device's best candidate on them; on each, every device of the pod is planned together, largest
request first, against the node's tentative occupancy (so `nvidia.com/gpu: 2` may land twice on one
GPU). The first node that takes the whole pod wins.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass

from mig.placement import reasons as R
from mig.placement.occupancy import Choice, ProfileSet, free_slices, profile_set
from mig.placement.plan import DevicePlacement, Plan, prefix_length, rank_key
from mig.placement.request import GpuState, PodRequest
from mig.types import Placement

Device = tuple[int, int, int | None]  # (containerIndex, deviceIndex, memory MiB or None)


class _Gpu:
    """Mutable index entry for one GPU."""

    __slots__ = ("healthy", "index", "mask", "node", "pset", "type", "uuid")

    def __init__(self, state: GpuState, pset: ProfileSet | None):
        self.node, self.uuid, self.type, self.index = state.node, state.uuid, state.type, state.index
        self.pset, self.mask, self.healthy = pset, state.occupied_mask, state.healthy

    @property
    def schedulable(self) -> bool:
        return self.healthy and self.pset is not None and bool(self.pset.profiles)

    def group(self) -> tuple[int, int, str]:
        return (id(self.pset), self.mask, self.type)

    def used(self) -> int:
        return (self.mask & self.pset.full_mask).bit_count() if self.pset else 0


def _pickiness(device: Device) -> tuple:
    ci, di, mem = device
    return (0 if mem is None else 1, -(mem or 0), ci, di)


@dataclass
class _Candidate:
    rank: tuple[int, int]
    profile: int
    choice: Choice


class PlacementIndex:
    """Occupancy of a fleet of MIG GPUs, kept up to date by the scheduler.

    Add GPUs with `upsert` (from node annotations), mark reservations with `reserve`/`release` (or
    `apply(plan)`), and ask `plan(pod)`. Planning never changes the index; the caller applies the plan
    once it has committed to it.
    """

    def __init__(self, gpus: Iterable[GpuState] = ()):
        self._gpus: dict[str, _Gpu] = {}
        self._groups: dict[tuple[int, int, str], dict[str, _Gpu]] = {}
        self._nodes: dict[str, dict[str, _Gpu]] = {}
        self._node_used: dict[str, int] = {}
        self._node_total: dict[str, int] = {}
        for g in gpus:
            self.upsert(g)

    # ---- maintenance -------------------------------------------------------------------------
    def upsert(self, state: GpuState) -> None:
        """Add or replace a GPU (its published profiles, health and reserved placements)."""
        self.remove(state.uuid)
        pset = profile_set(state.profiles) if state.profiles else None
        g = _Gpu(state, pset)
        self._gpus[g.uuid] = g
        self._nodes.setdefault(g.node, {})[g.uuid] = g
        self._link(g)

    def remove(self, uuid: str) -> None:
        g = self._gpus.pop(uuid, None)
        if g is None:
            return
        self._unlink(g)
        node = self._nodes[g.node]
        del node[uuid]
        if not node:
            del self._nodes[g.node]

    def remove_node(self, node: str) -> None:
        for uuid in list(self._nodes.get(node, ())):
            self.remove(uuid)

    def set_healthy(self, uuid: str, healthy: bool) -> None:
        g = self._gpus[uuid]
        self._unlink(g)
        g.healthy = healthy
        self._link(g)

    def reserve(self, uuid: str, placement: Placement) -> None:
        """Mark a placement taken; an overlap with a held placement is a bug upstream, so it raises."""
        g = self._gpus[uuid]
        if g.mask & placement.mask:
            raise ValueError(f"placement {placement} overlaps occupied slices on GPU {uuid}")
        self._set_mask(g, g.mask | placement.mask)

    def release(self, uuid: str, placement: Placement) -> None:
        g = self._gpus.get(uuid)
        if g is not None:
            self._set_mask(g, g.mask & ~placement.mask)

    def apply(self, plan: Plan) -> None:
        for d in plan.devices:
            self.reserve(d.gpu_uuid, d.placement)

    def occupied_mask(self, uuid: str) -> int:
        return self._gpus[uuid].mask

    def _set_mask(self, g: _Gpu, mask: int) -> None:
        self._unlink(g)
        g.mask = mask
        self._link(g)

    def _link(self, g: _Gpu) -> None:
        if not g.schedulable:
            return
        self._groups.setdefault(g.group(), {})[g.uuid] = g
        self._node_used[g.node] = self._node_used.get(g.node, 0) + g.used()
        self._node_total[g.node] = self._node_total.get(g.node, 0) + g.pset.axis

    def _unlink(self, g: _Gpu) -> None:
        if not g.schedulable:
            return
        key = g.group()
        members = self._groups[key]
        del members[g.uuid]
        if not members:
            del self._groups[key]
        self._node_used[g.node] -= g.used()
        self._node_total[g.node] -= g.pset.axis
        if not self._node_total[g.node]:
            del self._node_used[g.node], self._node_total[g.node]

    def _node_fill(self, node: str) -> float:
        total = self._node_total.get(node, 0)
        return self._node_used.get(node, 0) / total if total else 0.0

    # ---- planning ----------------------------------------------------------------------------
    def plan(self, pod: PodRequest, nodes: Collection[str] | None = None) -> Plan | R.Refusal:
        """Place every requested device of `pod` on one node (restricted to `nodes` if given)."""
        devices = pod.devices()
        if not devices:
            return Plan(node="", devices=())
        allowed = set(nodes) if nodes is not None else None
        lead = min(devices, key=_pickiness)
        tried: set[str] = set()
        for g in self._lead_candidates(pod, lead, allowed):
            if g.node in tried:
                continue
            tried.add(g.node)
            plan = self._plan_node(pod, devices, g.node)
            if plan is not None:
                return plan
        return self._refusal(pod, devices, lead, allowed, tried)

    def _best_on(self, pset: ProfileSet, mask: int, mem: int | None, pod: PodRequest) -> _Candidate | None:
        for rank, idx in pset.order(mem, pod.preference):
            choice = pset.best(mask, idx)
            if choice is not None:
                return _Candidate(rank, idx, choice)
        return None

    def _eligible(self, pod: PodRequest, g: _Gpu) -> bool:
        return pod.uuid_exclusion(g.uuid) is None

    def _lead_candidates(self, pod: PodRequest, lead: Device, allowed: set[str] | None) -> Iterator[_Gpu]:
        """GPUs able to take the lead device, best first (lazily: only the best tiers are sorted)."""
        mem = lead[2]
        cut = prefix_length(pod)
        type_ok: dict[str, bool] = {}
        tiers: dict[tuple, list[tuple[_Candidate, dict[str, _Gpu]]]] = {}
        for (_, mask, gtype), members in self._groups.items():
            ok = type_ok.get(gtype)
            if ok is None:
                ok = type_ok[gtype] = pod.type_exclusion(gtype) is None
            if not ok:
                continue
            pset = next(iter(members.values())).pset
            cand = self._best_on(pset, mask, mem, pod)
            if cand is None:
                continue
            prefix = (cand.rank, cand.choice.loss)[:cut]
            tiers.setdefault(prefix, []).append((cand, members))
        filtered = bool(pod.use_uuids or pod.nouse_uuids)
        for prefix in sorted(tiers):
            heap = []
            for cand, members in tiers[prefix]:
                start = cand.choice.placement.start
                for g in members.values():
                    if allowed is not None and g.node not in allowed:
                        continue
                    if filtered and not self._eligible(pod, g):
                        continue
                    key = rank_key(pod, cand.rank, cand.choice.loss, self._node_fill(g.node),
                                   g.used() / g.pset.axis, start, g.index, g.node)
                    heap.append((key, g.uuid))
            heapq.heapify(heap)
            while heap:
                yield self._gpus[heapq.heappop(heap)[1]]

    def _plan_node(self, pod: PodRequest, devices: list[Device], node: str) -> Plan | None:
        """All devices of the pod on one node, largest request first, or None if they do not all fit."""
        gpus = [g for g in self._nodes[node].values()
                if g.schedulable and self._eligible(pod, g) and pod.type_exclusion(g.type) is None]
        masks = {g.uuid: g.mask for g in gpus}
        fill = self._node_fill(node)
        placed: list[DevicePlacement] = []
        for ci, di, mem in sorted(devices, key=_pickiness):
            best: tuple | None = None
            for g in gpus:
                cand = self._best_on(g.pset, masks[g.uuid], mem, pod)
                if cand is None:
                    continue
                used = (masks[g.uuid] & g.pset.full_mask).bit_count() / g.pset.axis
                key = rank_key(pod, cand.rank, cand.choice.loss, fill, used,
                               cand.choice.placement.start, g.index, node)
                if best is None or key < best[0]:
                    best = (key, g, cand)
            if best is None:
                return None
            _, g, cand = best
            prof = g.pset.profiles[cand.profile]
            masks[g.uuid] |= cand.choice.placement.mask
            placed.append(DevicePlacement(ci, di, node, g.uuid, prof.name, cand.choice.placement,
                                          prof.memory_mb, prof.core))
        placed.sort(key=lambda d: (d.container_index, d.device_index))
        return Plan(node=node, devices=tuple(placed))

    # ---- refusal -----------------------------------------------------------------------------
    def _refusal(
        self, pod: PodRequest, devices: list[Device], lead: Device, allowed: set[str] | None,
        tried: set[str],
    ) -> R.Refusal:
        out: list[R.Reason] = []
        names = sorted(allowed) if allowed is not None else sorted(self._nodes)
        for node in names:
            gpus = sorted(self._nodes.get(node, {}).values(), key=lambda g: (g.index, g.uuid))
            if not gpus:
                out.append(R.Reason(R.NO_GPUS, "node publishes no MIG GPUs", node))
                continue
            for g in gpus:
                reason = gpu_reason(pod, g, lead[2])
                if reason is not None:
                    out.append(reason)
            if node in tried:
                out.append(R.Reason(
                    R.DEVICES_DO_NOT_FIT_TOGETHER,
                    f"the pod's {len(devices)} MIG devices do not all fit on this node together "
                    f"(each needs {_requests_text(devices)})", node))
        return R.Refusal(tuple(out))


def _requests_text(devices: list[Device]) -> str:
    return ", ".join("a whole GPU" if m is None else f"{m} MiB" for _, _, m in devices)


def gpu_reason(pod: PodRequest, g: _Gpu, mem: int | None) -> R.Reason | None:
    """Why this GPU cannot take a device of `mem` MiB right now, or None if it can."""
    if not g.healthy:
        return R.Reason(R.UNHEALTHY, "GPU is unhealthy", g.node, g.uuid)
    if g.pset is None or not g.pset.profiles:
        return R.Reason(R.NO_PROFILES, f"GPU ({g.type}) publishes no MIG profiles (is its model in the "
                        "allowlist?)", g.node, g.uuid)
    why = pod.type_exclusion(g.type) or pod.uuid_exclusion(g.uuid)
    if why:
        return R.Reason(R.EXCLUDED, f"excluded by annotation: {why}", g.node, g.uuid)
    pset = g.pset
    order = pset.order(mem, pod.preference)
    if not order:
        largest = pset.profiles[-1]
        return R.Reason(R.NOT_ENOUGH_MEMORY, f"no allowlisted profile has {mem} MiB; the largest is "
                        f"{largest.name} with {largest.memory_mb} MiB", g.node, g.uuid)
    if any(pset.best(g.mask, idx) for _, idx in order):
        return None
    smallest = pset.profiles[min(idx for _, idx in order)]
    free = free_slices(g.mask, pset.axis)
    usable = [s for s in free if any(s in range(p.start, p.end) for p in smallest.placements)]
    needs = R.placements_text(sorted(smallest.placements))
    if len(usable) >= smallest.size:
        return R.Reason(R.FRAGMENTED, f"fragmented: free slices {R.slices_text(free)} but {smallest.name} "
                        f"needs one of {needs}", g.node, g.uuid)
    return R.Reason(R.NOT_ENOUGH_SLICES, f"not enough free slices: free {R.slices_text(free)}, "
                    f"{smallest.name} needs {smallest.size} at one of {needs}", g.node, g.uuid)


def plan_pod(pod: PodRequest, gpus: Iterable[GpuState]) -> Plan | R.Refusal:
    """One-shot planning over a list of GPUs (builds a throwaway index)."""
    return PlacementIndex(gpus).plan(pod)
