"""The slice map: per node and per GPU, which memory slices hold which instance, which are free, and
how many of each allowed profile still fit. Pure (no I/O); `dynmig status` and the live page draw it.

Inputs are what the scheduler itself reconstructs (`mig.reconstruct.reconstruct` turns node and pod
annotations into `GpuState`s with their occupied placements and fail-closed health), plus who holds
each placement and the node's published leftovers. So the map shows exactly the scheduler's view.

API (small on purpose):

- `gpu_map(state, holdings, leftovers, closed)` -> `GpuMap`: one GPU's segments, free slices, fits;
- `node_map(name, gpus, unreadable)` -> `NodeMap` and `fleet_map(nodes, pending)` -> `FleetMap`:
  the same counts summed per node and for the fleet;
- `still_fits(state)`: profile name -> how many more one-device pods asking for that profile (its
  memory, with that profile as their `nvidia.com/mig-profile-preference`) the placement engine places
  on this GPU as that profile, one after another, each where the scheduler would put it. GPUs are
  independent for one-device pods, so a node's (and the fleet's) count is the sum over its GPUs;
- `to_dict(fleet)`: the JSON-ready form (`SCHEMA_VERSION`), the one shape `-o json|yaml` and the page use.

Segment phases: `reserved` (the scheduler reserved it; no MIG instance yet), `realized` (the device
plugin created it: the reservation carries its MIG UUID), `reclaiming` (its pod is terminating, or the
plugin lists it as being destroyed), `leftover` (an instance on the GPU no reservation covers, which
the plugin may not destroy). Every phase above occupies its slices for the scheduler. One does not:
`idle` (an instance the device plugin keeps after its pod ended, `dynmig.io/node-idle-instances`,
mig/idle.py): its slices are free for any pod, and a pod asking for exactly its profile at its
placement gets it with no create; so its slices stay in `free` and in what still fits. An idle
entry that overlaps a reservation or a leftover is not drawn: the annotation lags the plugin (the
instance is being handed over or destroyed), and the reservation is what the scheduler counts;
nor is one past the GPU's last slice.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from mig import catalog
from mig.annotations import MigAllocation
from mig.idle import IdleInstance
from mig.leftovers import RECLAIMING, Leftover
from mig.placement import (
    ContainerRequest,
    GpuState,
    PlacementIndex,
    Plan,
    PodRequest,
    free_slices,
    profile_set,
)
from mig.placement import reasons as R
from mig.placement.reasons import _CLOSEST_FIRST as CLOSEST_FIRST  # the engine's own order of closeness
from mig.resolve import on_model
from mig.types import Placement

SCHEMA_VERSION = 3  # 2: the `idle` phase, `idleSince` per segment, `idleUnreadable` per node; 3: `allocator`
Phase = Literal["reserved", "realized", "reclaiming", "leftover", "idle"]
RESERVED: Phase = "reserved"
REALIZED: Phase = "realized"
RECLAIMING_PHASE: Phase = "reclaiming"
LEFTOVER: Phase = "leftover"
IDLE_PHASE: Phase = "idle"
PHASES: tuple[Phase, ...] = (RESERVED, REALIZED, RECLAIMING_PHASE, LEFTOVER, IDLE_PHASE)
IDLE_MEANING = "free for any pod; reused by a matching one"  # what an idle segment means, in words


@dataclass(frozen=True)
class Holding:
    """One reservation a pod holds on a GPU (input): the pod's name and its allocation entry."""

    namespace: str
    name: str
    allocation: MigAllocation
    terminating: bool = False  # the pod has a deletionTimestamp: its instance is about to be reclaimed


@dataclass(frozen=True)
class Segment:
    """One instance on a GPU's slice axis. `namespace`/`name` are "" for a leftover or an idle
    instance (no pod owns it); `idle_since` (Unix seconds) is set for an idle one only."""

    placement: Placement
    profile: str
    phase: Phase
    namespace: str = ""
    name: str = ""
    mig_uuid: str | None = None
    idle_since: int | None = None

    @property
    def pod(self) -> str:
        return f"{self.namespace}/{self.name}" if self.name else ""


@dataclass(frozen=True)
class GpuMap:
    """One GPU: its slices, the segments on them, the free slices, and what still fits.

    `closed` says why no new pod lands here ("" = open): unhealthy, cordoned, or an annotation the
    scheduler could not read (then it starts with "unreadable: "). `fits` is empty when closed.
    """

    node: str
    uuid: str
    index: int
    type: str
    memory_mb: int
    slices: int
    profiles: tuple[str, ...]  # allowed (published) profiles, smallest first
    segments: tuple[Segment, ...]
    free: tuple[int, ...]
    fits: Mapping[str, int]
    closed: str = ""
    # published name -> the name the GPU's driver reports, for names resolved by slice key (HAMi's
    # `7g.79gb` is an A100-80GB's 7g.80gb: mig/resolve.py); empty when every name is the driver's
    driver_names: Mapping[str, str] = field(default_factory=dict)

    def shown(self, profile: str) -> str:
        """A profile as a person reads it: the published name, and the driver's beside it if it differs."""
        real = self.driver_names.get(profile)
        return f"{profile} ({real})" if real else profile


def driver_names(gpu_type: str, profiles: Iterable[str]) -> dict[str, str]:
    """Published names that are not the GPU model's own, with the driver's name each resolves to (as
    the device plugin resolved it); nothing for a model the catalog does not know."""
    try:
        model = catalog.find_model(gpu_type.removeprefix("NVIDIA-"))
    except catalog.UnknownModel:
        return {}
    return {r.label: r.profile.name for r in on_model(model, profiles) if r.by_slice_key}


@dataclass(frozen=True)
class NodeMap:
    """One node's GPUs; `unreadable` says why its registration could not be read ("" = fine);
    `idle_unreadable` why its idle list could not be (its GPUs are shown all the same: the list
    never occupies anything)."""

    name: str
    gpus: tuple[GpuMap, ...]
    fits: Mapping[str, int]
    unreadable: str = ""
    idle_unreadable: str = ""
    # who picks placements here: "" = dynmig's extender; "dra:<driver>" = kube-scheduler's DRA
    # allocator from the driver's ResourceSlices (mig.dra.view)
    allocator: str = ""
    # why the node's device plugin leaves its GPUs alone ("" = it serves them): its
    # `dynmig.io/plugin-refused` annotation
    refused: str = ""


@dataclass(frozen=True)
class PendingPod:
    """A MIG pod waiting for a node: why (the scheduler's words) and what would fix it.

    `advice` is for defrag advice (which running pods, if removed, would let it fit); "" when none.
    """

    namespace: str
    name: str
    asks: str  # e.g. "1 × 20000 MiB" or "2 × whole GPU"
    reason: str  # one line
    fix: str = ""
    advice: str = ""
    code: str = ""  # the engine's headline reason code now (mig.placement.reasons), "" if it fits


@dataclass(frozen=True)
class FleetMap:
    nodes: tuple[NodeMap, ...]
    fits: Mapping[str, int]
    pending: tuple[PendingPod, ...] = ()
    unreadable_pods: tuple[tuple[str, str], ...] = ()  # (namespace/name, why) of pods we could not read


# ---------------------------------------------------------------- what still fits


_FITS_MEMO: dict[tuple[Any, int], dict[str, int]] = {}
_FITS_MEMO_LIMIT = 65536


def _probe(profile_name: str, memory_mb: int) -> PodRequest:
    return PodRequest(containers=(ContainerRequest(1, memory_mb),), preference=(profile_name,))


def _count(state: GpuState, profile_name: str, memory_mb: int) -> int:
    index = PlacementIndex([state])
    probe = _probe(profile_name, memory_mb)
    count = 0
    while True:
        plan = index.plan(probe)
        if not isinstance(plan, Plan) or plan.devices[0].profile != profile_name:
            return count
        index.apply(plan)
        count += 1


def still_fits(state: GpuState) -> dict[str, int]:
    """Profile name -> how many more of it the placement engine places on this GPU now (module doc)."""
    if not state.healthy or state.cordoned or not state.profiles:
        return {}
    pset = profile_set(state.profiles)
    key = (pset, state.occupied_mask)
    hit = _FITS_MEMO.get(key)
    if hit is None:
        hit = {p.name: _count(state, p.name, p.memory_mb) for p in pset.profiles}
        if len(_FITS_MEMO) >= _FITS_MEMO_LIMIT:
            _FITS_MEMO.clear()
        _FITS_MEMO[key] = hit
    return dict(hit)


def _summed(maps: Iterable[Mapping[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for m in maps:
        for name, n in m.items():
            out[name] = out.get(name, 0) + n
    return out


# ---------------------------------------------------------------- building


def _holding_segment(h: Holding) -> Segment:
    a = h.allocation
    phase = (
        RECLAIMING_PHASE if h.terminating and a.runtime_ready else REALIZED if a.runtime_ready else RESERVED
    )
    return Segment(a.placement_value, a.profile, phase, h.namespace, h.name, a.migUUID)


def _leftover_segment(x: Leftover) -> Segment:
    return Segment(x.placement_value, x.profile, RECLAIMING_PHASE if x.reason == RECLAIMING else LEFTOVER)


def _idle_segment(x: IdleInstance) -> Segment:
    return Segment(x.placement_value, x.profile, IDLE_PHASE, idle_since=x.idleSince)


def gpu_map(
    state: GpuState,
    holdings: Sequence[Holding] = (),
    leftovers: Sequence[Leftover] = (),
    closed: str = "",
    idle: Sequence[IdleInstance] = (),
) -> GpuMap:
    """One GPU's map. `state` is the scheduler's reconstruction (occupied placements, health);
    `closed` is why the scheduler failed it closed, if it did; leftovers and idle instances of other
    GPUs are ignored, and so is an idle one that overlaps a reservation or leftover (module doc)."""
    pset = profile_set(state.profiles) if state.profiles else None
    axis = pset.axis if pset else 0
    segments = [_holding_segment(h) for h in holdings if h.allocation.gpuUUID == state.uuid]
    segments += [_leftover_segment(x) for x in leftovers if x.gpuUUID == state.uuid]
    taken = 0
    for seg in segments:
        taken |= seg.placement.mask
    for x in sorted((x for x in idle if x.gpuUUID == state.uuid), key=IdleInstance.sort_key):
        seg = _idle_segment(x)
        if seg.placement.start + seg.placement.size <= axis and not seg.placement.mask & taken:
            segments.append(seg)
            taken |= seg.placement.mask
    segments.sort(key=lambda s: (s.placement.start, s.placement.size, s.pod))
    why = closed or state.cordoned or ("" if state.healthy else "GPU reports unhealthy")
    if not why and not state.profiles:
        why = "publishes no allowed MIG profiles"
    return GpuMap(
        node=state.node,
        uuid=state.uuid,
        index=state.index,
        type=state.type,
        memory_mb=state.memory_mb,
        slices=axis,
        profiles=tuple(p.name for p in pset.profiles) if pset else (),
        segments=tuple(segments),
        free=tuple(free_slices(state.occupied_mask, axis)),
        fits={} if why else still_fits(state),
        closed=why,
        driver_names=driver_names(state.type, (p.name for p in state.profiles)),
    )


def node_map(
    name: str,
    gpus: Sequence[GpuMap],
    unreadable: str = "",
    idle_unreadable: str = "",
    allocator: str = "",
    refused: str = "",
) -> NodeMap:
    ordered = tuple(sorted(gpus, key=lambda g: (g.index, g.uuid)))
    fits = _summed(g.fits for g in ordered)
    return NodeMap(name, ordered, fits, unreadable, idle_unreadable, allocator, refused)


def fleet_map(
    nodes: Sequence[NodeMap],
    pending: Sequence[PendingPod] = (),
    unreadable_pods: Sequence[tuple[str, str]] = (),
) -> FleetMap:
    ordered = tuple(sorted(nodes, key=lambda n: n.name))
    return FleetMap(
        ordered,
        _summed(n.fits for n in ordered),
        tuple(sorted(pending, key=lambda p: (p.namespace, p.name))),
        tuple(sorted(unreadable_pods)),
    )


# ---------------------------------------------------------------- pending pods: the fix

_FIXES = {
    R.NOT_ENOUGH_MEMORY: "ask for less GPU memory (nvidia.com/gpumem), or allow a larger profile",
    R.NOT_ENOUGH_SLICES: "wait for a MIG pod to end, or add GPUs; running pods keep their slices",
    R.FRAGMENTED: "free slices exist but not at a legal placement: wait for a neighbouring pod to end",
    R.DEVICES_DO_NOT_FIT_TOGETHER: "ask for fewer devices per pod, or for smaller ones",
    R.EXCLUDED: "check nvidia.com/use-gpuuuid, nouse-gpuuuid, use-gputype and nouse-gputype",
    R.CORDONED: "uncordon a GPU (remove its UUID from hami.io/device-cordon on the node)",
    R.UNHEALTHY: "the GPUs are unhealthy or unreadable: see the node's GPUs above",
    R.NO_PROFILES: "allow MIG profiles for these GPUs in the device config",
    R.NO_GPUS: "no node publishes MIG GPUs: is the dynmig device plugin running?",
}
NO_ELIGIBLE_NODE = "no-eligible-node"  # every node with MIG GPUs refuses the pod (nodeSelector, ...)
NO_ELIGIBLE_FIX = (
    "change its nodeSelector, node affinity or tolerations, or the nodes' labels, taints or cordon"
)


def _closeness(code: str) -> int:
    return CLOSEST_FIRST.index(code) if code in CLOSEST_FIRST else len(CLOSEST_FIRST)


def diagnose(
    request: PodRequest,
    fleet: Iterable[GpuState] | PlacementIndex,
    nodes: Collection[str] | None = None,
) -> tuple[str, str]:
    """(reason code, fix) for a pending pod against the current fleet, by the engine itself: the code
    of the node closest to fitting (the engine's order: devices apart, fragmented, too few slices, ...);
    ("", "") when the pod would fit now (the scheduler will place it at its next try). `nodes`: only
    the nodes the pod may run on (`mig.eligibility`; None: every node); when none of them has MIG
    GPUs the code is `NO_ELIGIBLE_NODE`. Pass one `PlacementIndex(states)` for many pods: planning
    never changes it."""
    index = fleet if isinstance(fleet, PlacementIndex) else PlacementIndex(fleet)
    result = index.plan(request, nodes=nodes)
    if isinstance(result, Plan):
        return "", ""
    codes = result.counts()
    if not codes and nodes is not None:
        return NO_ELIGIBLE_NODE, NO_ELIGIBLE_FIX
    code = min(codes, key=_closeness) if codes else R.NO_GPUS  # the node closest to fitting speaks
    return code, _FIXES.get(code, "")


def asks_text(request: PodRequest) -> str:
    """A pod's request in a few words: "1 × 20000 MiB", "2 × whole GPU", "1 × 50% of GPU memory"."""
    parts = []
    for c in request.containers:
        if not c.devices:
            continue
        mem = c.memory
        what = "whole GPU" if mem is None else f"{mem} MiB" if isinstance(mem, int) else str(mem)
        parts.append(f"{c.devices} × {what}")
    return " + ".join(parts) or "no GPU"


# ---------------------------------------------------------------- JSON form


def _segment_dict(s: Segment) -> dict[str, Any]:
    return {
        "start": s.placement.start,
        "size": s.placement.size,
        "profile": s.profile,
        "phase": s.phase,
        "pod": s.pod or None,
        "migUUID": s.mig_uuid,
        "idleSince": s.idle_since,
    }


def _gpu_dict(g: GpuMap) -> dict[str, Any]:
    return {
        "uuid": g.uuid,
        "index": g.index,
        "type": g.type,
        "memoryMB": g.memory_mb,
        "slices": g.slices,
        "profiles": list(g.profiles),
        "driverNames": dict(g.driver_names),
        "segments": [_segment_dict(s) for s in g.segments],
        "free": list(g.free),
        "fits": dict(g.fits),
        "closed": g.closed or None,
    }


def to_dict(fleet: FleetMap) -> dict[str, Any]:
    """The JSON-ready form of the map (stable keys; `schemaVersion` changes when they do)."""
    return {
        "schemaVersion": SCHEMA_VERSION,
        "fits": dict(fleet.fits),
        "nodes": [
            {
                "name": n.name,
                "unreadable": n.unreadable or None,
                "idleUnreadable": n.idle_unreadable or None,
                "allocator": n.allocator or "extender",
                "fits": dict(n.fits),
                "gpus": [_gpu_dict(g) for g in n.gpus],
            }
            for n in fleet.nodes
        ],
        "pending": [
            {
                "pod": f"{p.namespace}/{p.name}",
                "asks": p.asks,
                "reason": p.reason,
                "code": p.code or None,
                "fix": p.fix or None,
                "advice": p.advice or None,
            }
            for p in fleet.pending
        ],
        "unreadablePods": [{"pod": pod, "why": why} for pod, why in fleet.unreadable_pods],
    }


__all__ = [
    "IDLE_MEANING",
    "IDLE_PHASE",
    "NO_ELIGIBLE_NODE",
    "PHASES",
    "SCHEMA_VERSION",
    "FleetMap",
    "GpuMap",
    "Holding",
    "NodeMap",
    "PendingPod",
    "Phase",
    "Segment",
    "asks_text",
    "diagnose",
    "fleet_map",
    "gpu_map",
    "node_map",
    "still_fits",
    "to_dict",
]
