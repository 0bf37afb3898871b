"""From Kubernetes objects (nodes and pods as JSON dicts) to the slice map, through the scheduler's own
reconstruction (`mig.reconstruct`), so `dynmig status` shows what the scheduler sees.

Hostile input never raises here: an unreadable node registration becomes the node's `unreadable`
text, an unreadable pod annotation is listed among `unreadable_pods` (and, as in the scheduler, closes
the GPUs it touches), an unreadable pod spec leaves that pending pod's request as "unreadable", an
unreadable idle list (`dynmig.io/node-idle-instances`) becomes the node's `idle_unreadable` text and
changes nothing else (as in the scheduler: the list never occupies anything).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from mig.allowlist import ResourceNames
from mig.annotations import PLUGIN_REFUSED
from mig.eligibility import Constraints, Eligibility, NodeFacts, constraints_of, eligibility, node_facts
from mig.idle import IdleError, IdleInstance, decode_idle
from mig.leftovers import Leftover, LeftoverError, decode_leftovers
from mig.placement import GpuState, PlacementIndex, PodRequest, RequestError
from mig.pods import (
    annotations_of,
    gpu_request,
    is_terminating,
    is_waiting,
    metadata_of,
    not_scheduled,
    qualified_name,
)
from mig.reconstruct import (
    NodeOccupancy,
    PodUsage,
    node_cordon,
    node_gpus,
    node_idle,
    node_leftovers,
    node_register,
    pod_usage,
    reconstruct,
)
from mig.slicemap import (
    NO_ELIGIBLE_NODE,
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
FITS_NOW = "fits now: the scheduler places it at its next try"
OTHER_SCHEDULER = "other-scheduler"  # the pending pod's code when another scheduler owns it


def owner_fix(pod: Mapping[str, Any], scheduler: str) -> str:
    """Who places the pod when its `schedulerName` is set and is not dynmig's (`scheduler`), with
    the fix; "" when it is dynmig's, or unset (a real API server always sets it)."""
    spec = pod.get("spec")
    owner = spec.get("schedulerName") if isinstance(spec, Mapping) else None
    if not scheduler or not isinstance(owner, str) or not owner or owner == scheduler:
        return ""
    owner = owner[:63]
    if owner == "default-scheduler":
        return (
            f"kube-scheduler's default-scheduler owns it, not dynmig ({scheduler}): dynmig's webhook did not "
            f"route it (labelled hami.io/webhook=ignore, a skipped namespace, or the webhook was down when it "
            f"was created), and no node offers its GPU resources to that scheduler; recreate it"
        )
    return (
        f"scheduler {owner!r} owns it, not dynmig ({scheduler}): dynmig does not place it, and the reason "
        f"above is {owner}'s; to move it to dynmig, recreate it with schedulerName: {scheduler}"
    )


def idle_view(text: object) -> tuple[tuple[IdleInstance, ...], str]:
    """A node's idle instances from its `dynmig.io/node-idle-instances` value, and "" or why it
    cannot be read (then no instance: an unreadable list changes nothing)."""
    if text is not None and not isinstance(text, str):
        return (), UNREADABLE + "dynmig.io/node-idle-instances: not a string"
    try:
        return decode_idle(text), ""
    except IdleError as error:
        return (), UNREADABLE + str(error)[:MAX_REASON]


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
    idle, idle_unreadable = idle_view(node_idle(node))
    occupancy = reconstruct(published, usages)
    gpus = [gpu_view(occupancy, g, leftovers, terminating, idle) for g in occupancy.gpus]
    refused = annotations_of(node).get(PLUGIN_REFUSED)
    why = refused[: 2 * MAX_REASON] if isinstance(refused, str) else ""
    return node_map(name, gpus, idle_unreadable=idle_unreadable, refused=why), occupancy.gpus


def gpu_view(
    occ: NodeOccupancy,
    state: GpuState,
    leftovers: Sequence[Leftover],
    terminating: set[str] | frozenset[str],
    idle: Sequence[IdleInstance] = (),
) -> GpuMap:
    """One GPU's map from its node's occupancy (`dynmig status` and the live page alike)."""
    holdings = [
        Holding(u.namespace, u.name, a, f"{u.namespace}/{u.name}" in terminating)
        for u, a in occ.holders.get(state.uuid, ())
    ]
    closed = occ.closed.get(state.uuid, "")
    return gpu_map(state, holdings, leftovers, UNREADABLE + closed if closed else "", idle)


def _reason(pod: Mapping[str, Any]) -> str:
    """The scheduler's last word on the pod: its PodScheduled=False condition, on one line."""
    cond = not_scheduled(pod)
    if cond is None:
        return "not tried by the scheduler yet"
    text = " ".join(str(cond.get("message") or cond.get("reason") or "").split())
    return text[:MAX_REASON] + ("…" if len(text) > MAX_REASON else "")


Restriction = frozenset[str] | None  # the nodes a pod may run on (None: every node)


class Diagnoses:
    """`diagnose` for many pending pods against one fleet: one placement index (planning does not
    change it), and one answer per distinct request and nodes (pods of one workload ask alike)."""

    def __init__(self, fleet: Sequence[GpuState] | PlacementIndex):
        # an index already built (the scheduler's own, in `dynmig serve`) is only read
        self.index = fleet if isinstance(fleet, PlacementIndex) else PlacementIndex(fleet)
        self._memo: dict[tuple[PodRequest, Restriction], tuple[str, str]] = {}

    def __call__(self, request: PodRequest, nodes: Restriction = None) -> tuple[str, str]:
        found = self._memo.get((request, nodes))
        if found is None:
            found = self._memo[(request, nodes)] = diagnose(request, self.index, nodes)
        return found


class Eligibilities:
    """`mig.eligibility` for many pending pods against one set of nodes: each node's facts read once,
    one answer per distinct set of constraints (pods of one workload have the same)."""

    def __init__(self, nodes: Iterable[tuple[str, Mapping[str, Any] | None]]):
        self.nodes: list[tuple[str, NodeFacts | None]] = [
            (name, node_facts(obj) if isinstance(obj, Mapping) else None) for name, obj in nodes
        ]
        self._memo: dict[Constraints, Eligibility] = {}

    def __call__(self, pod: Mapping[str, Any]) -> Eligibility:
        constraints = constraints_of(pod)
        found = self._memo.get(constraints)
        if found is None:
            found = self._memo[constraints] = eligibility(constraints, self.nodes)
        return found


# The defrag hook: given a waiting pod, its request, the fleet's GPUs as the scheduler sees them and
# the nodes the pod may run on (None: every node), the text of the advice ("" for none) shown under
# the pod's fix (`PendingPod.advice`).
Advisor = Callable[[Mapping[str, Any], PodRequest, Sequence[GpuState], Restriction], str]
Diagnosis = Callable[[PodRequest, Restriction], tuple[str, str]]


def constrained_fix(code: str, fix: str, eligible: Eligibility, fits_elsewhere: bool) -> str:
    """The fix of a pod that some nodes refuse (its nodeSelector, affinity, taints) and that does
    not fit on the others: says that only the nodes it may run on were looked at."""
    if code == NO_ELIGIBLE_NODE:
        return f"no node this pod may run on has MIG GPUs ({eligible.summary()}): {fix}"
    elsewhere = "; it would fit now on a node that refuses it" if fits_elsewhere else ""
    return f"no node this pod may run on has room for it ({eligible.summary()}{elsewhere}): {fix}"


def pending_view(
    pod: Mapping[str, Any],
    states: Sequence[GpuState],
    names: ResourceNames,
    advisor: Advisor | None = None,
    diagnosis: Diagnosis | None = None,
    eligible: Eligibility | None = None,
    scheduler: str = "",
) -> PendingPod | None:
    """A waiting pod that asks for MIG GPUs, with the scheduler's reason, the engine's fix now (over
    the nodes the pod may run on, `eligible`; None: every node) and, when an advisor is given and the
    pod does not fit, its advice. `diagnosis`: `diagnose` against `states`, shared by a caller that
    asks about many pods (see `Diagnoses`). A pod another scheduler owns (`scheduler`: dynmig's name;
    "" does not check) is said to be that scheduler's, not diagnosed."""
    meta = metadata_of(pod)
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    try:
        request: PodRequest | None = gpu_request(pod, names)
    except RequestError as error:
        return PendingPod(namespace, name, UNREADABLE + str(error)[:MAX_REASON], _reason(pod))
    if request is None:
        return None
    owner = owner_fix(pod, scheduler)
    if owner:
        return PendingPod(namespace, name, asks_text(request), _reason(pod), fix=owner, code=OTHER_SCHEDULER)
    diagnosis = diagnosis or Diagnoses(states)
    nodes = eligible.restriction if eligible is not None else None
    code, fix = diagnosis(request, nodes)
    if not code:
        fix = FITS_NOW
    elif eligible is not None and nodes is not None:
        fix = constrained_fix(code, fix, eligible, fits_elsewhere=not diagnosis(request, None)[0])
    wanted = advisor is not None and code and code != NO_ELIGIBLE_NODE
    advice = advisor(pod, request, states, nodes) if advisor is not None and wanted else ""
    return PendingPod(namespace, name, asks_text(request), _reason(pod), fix=fix, advice=advice, code=code)


def fleet_view(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    names: ResourceNames | None = None,
    only_nodes: Sequence[str] = (),
    advisor: Advisor | None = None,
    scheduler: str = "",
) -> FleetMap:
    """The whole map: every node (or only `only_nodes`), its GPUs, and the pending MIG pods (with
    `advisor`'s advice for those that do not fit), each diagnosed over the nodes it may run on, or
    said to be another scheduler's when its `schedulerName` is not `scheduler` (dynmig's)."""
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
    gpu_nodes: list[tuple[str, Mapping[str, Any]]] = []  # the nodes whose GPUs the engine plans over
    for node in nodes:
        view, gpus = node_view(node, usages.get(str(metadata_of(node).get("name") or ""), []), terminating)
        states += gpus
        if gpus:
            gpu_nodes.append((view.name, node))
        if not only_nodes or view.name in only_nodes:
            maps.append(view)
    waiting = [p for p in pods if is_waiting(p) and qualified_name(p) not in holding]
    diagnosis, eligible = Diagnoses(states), Eligibilities(gpu_nodes)
    pending = [
        v
        for p in waiting
        if (v := pending_view(p, states, names, advisor, diagnosis, eligible(p), scheduler)) is not None
    ]
    return fleet_map(maps, pending, unreadable)
