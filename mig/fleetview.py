"""From Kubernetes objects (nodes and pods as JSON dicts) to the slice map, through the scheduler's own
reconstruction (`mig.reconstruct`), so `dynmig status` shows what the scheduler sees.

Hostile input never raises here: an unreadable node registration becomes the node's `unreadable`
text, an unreadable pod annotation is listed among `unreadable_pods` (and, as in the scheduler, closes
the GPUs it touches), an unreadable pod spec leaves that pending pod's request as "unreadable".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from mig.allowlist import ResourceNames
from mig.leftovers import Leftover, LeftoverError, decode_leftovers
from mig.placement import GpuState, PlacementIndex, PodRequest, RequestError
from mig.pods import gpu_request, is_terminating, is_waiting, metadata_of, not_scheduled, qualified_name
from mig.reconstruct import (
    NodeOccupancy,
    PodUsage,
    node_cordon,
    node_gpus,
    node_leftovers,
    node_register,
    pod_usage,
    reconstruct,
)
from mig.slicemap import (
    FleetMap,
    GpuMap,
    Holding,
    NodeMap,
    PendingPod,
    asks_text,
    diagnose,
    fleet_map,
    gpu_map,
    node_map,
)

UNREADABLE = "unreadable: "
MAX_REASON = 300  # one line of a pending pod's reason


def node_view(
    node: Mapping[str, Any], usages: Sequence[PodUsage], terminating: set[str]
) -> tuple[NodeMap, tuple[GpuState, ...]]:
    """One node's map, and its GPUs as the scheduler reconstructs them, from the node object and the
    usages of the pods on it; `terminating` holds "namespace/name" of pods being deleted."""
    name = str(metadata_of(node).get("name") or "")
    published = node_gpus(name, node_register(node), node_leftovers(node), node_cordon(node))
    if published.error:
        return node_map(name, (), UNREADABLE + published.error), ()
    try:
        leftovers = decode_leftovers(node_leftovers(node))
    except LeftoverError:
        leftovers = ()  # reconstruct already failed every GPU closed with the reason
    occupancy = reconstruct(published, usages)
    gpus = [_gpu(occupancy, g, leftovers, terminating) for g in occupancy.gpus]
    return node_map(name, gpus), occupancy.gpus


def _gpu(occ: NodeOccupancy, state: GpuState, leftovers: Sequence[Leftover], terminating: set[str]) -> GpuMap:
    holdings = [
        Holding(u.namespace, u.name, a, f"{u.namespace}/{u.name}" in terminating)
        for u, a in occ.holders.get(state.uuid, ())
    ]
    closed = occ.closed.get(state.uuid, "")
    return gpu_map(state, holdings, leftovers, UNREADABLE + closed if closed else "")


def _reason(pod: Mapping[str, Any]) -> str:
    """The scheduler's last word on the pod: its PodScheduled=False condition, on one line."""
    cond = not_scheduled(pod)
    if cond is None:
        return "not tried by the scheduler yet"
    text = " ".join(str(cond.get("message") or cond.get("reason") or "").split())
    return text[:MAX_REASON] + ("…" if len(text) > MAX_REASON else "")


class Diagnoses:
    """`diagnose` for many pending pods against one fleet: one placement index (planning does not
    change it), and one answer per distinct request (pods of one workload ask alike)."""

    def __init__(self, fleet: Sequence[GpuState] | PlacementIndex):
        # an index already built (the scheduler's own, in `dynmig serve`) is only read
        self.index = fleet if isinstance(fleet, PlacementIndex) else PlacementIndex(fleet)
        self._memo: dict[PodRequest, tuple[str, str]] = {}

    def __call__(self, request: PodRequest) -> tuple[str, str]:
        found = self._memo.get(request)
        if found is None:
            found = self._memo[request] = diagnose(request, self.index)
        return found


# The defrag hook: given a waiting pod, its request and the fleet's GPUs as the scheduler sees them,
# the text of the advice ("" for none) shown under the pod's fix (`PendingPod.advice`).
Advisor = Callable[[Mapping[str, Any], PodRequest, Sequence[GpuState]], str]


def pending_view(
    pod: Mapping[str, Any],
    states: Sequence[GpuState],
    names: ResourceNames,
    advisor: Advisor | None = None,
    diagnosis: Callable[[PodRequest], tuple[str, str]] | None = None,
) -> PendingPod | None:
    """A waiting pod that asks for MIG GPUs, with the scheduler's reason, the engine's fix now and,
    when an advisor is given and the pod does not fit, its advice. `diagnosis`: `diagnose` against
    `states`, shared by a caller that asks about many pods (see `Diagnoses`)."""
    meta = metadata_of(pod)
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    try:
        request: PodRequest | None = gpu_request(pod, names)
    except RequestError as error:
        return PendingPod(namespace, name, UNREADABLE + str(error)[:MAX_REASON], _reason(pod))
    if request is None:
        return None
    code, fix = diagnosis(request) if diagnosis is not None else diagnose(request, states)
    if not code:
        fix = "fits now: the scheduler places it at its next try"
    advice = advisor(pod, request, states) if advisor is not None and code else ""
    return PendingPod(namespace, name, asks_text(request), _reason(pod), fix=fix, advice=advice, code=code)


def fleet_view(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    names: ResourceNames | None = None,
    only_nodes: Sequence[str] = (),
    advisor: Advisor | None = None,
) -> FleetMap:
    """The whole map: every node (or only `only_nodes`), its GPUs, and the pending MIG pods (with
    `advisor`'s advice for those that do not fit)."""
    names = names or ResourceNames()
    pods = [p for p in pods if isinstance(p, Mapping)]
    usages: dict[str, list[PodUsage]] = {}
    unreadable: list[tuple[str, str]] = []
    terminating = {qualified_name(p) for p in pods if is_terminating(p)}
    holding: set[str] = set()  # pods with a reservation: shown as segments, not as pending
    for pod in pods:
        usage = pod_usage(pod)
        if usage is None:
            continue
        holding.add(qualified_name(pod))
        if usage.problem:
            unreadable.append((qualified_name(pod), usage.problem))
        usages.setdefault(usage.node, []).append(usage)
    maps = []
    states: list[GpuState] = []
    for node in nodes:
        view, gpus = node_view(node, usages.get(str(metadata_of(node).get("name") or ""), []), terminating)
        states += gpus
        if not only_nodes or view.name in only_nodes:
            maps.append(view)
    waiting = [p for p in pods if is_waiting(p) and qualified_name(p) not in holding]
    diagnosis = Diagnoses(states)
    pending = [v for p in waiting if (v := pending_view(p, states, names, advisor, diagnosis)) is not None]
    return fleet_map(maps, pending, unreadable)
