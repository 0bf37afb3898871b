"""The advisor over a cluster's running pods: which of them the advice may remove (`holder_of`), and
the read-only advisor `dynmig status` asks for its pending pods (`status_advisor`), by the same rule
as the scheduler's defrag loop. Pure: the pods, budgets and fleet are handed in."""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from mig.allowlist import ResourceNames
from mig.defrag.advise import advise
from mig.defrag.budgets import Budgets
from mig.defrag.holders import Holder, pod_priority, pod_started, replacement_request
from mig.defrag.homes import Homes
from mig.defrag.text import advice_text, bounded
from mig.fleetview import Advisor
from mig.placement import GpuState, PodRequest
from mig.reconstruct import PodUsage, pod_usage
from mig.types import Placement


def holder_of(
    usage: PodUsage,
    placements: Iterable[tuple[str, Placement]],
    pod: Mapping[str, Any] | None,
    budgets: Budgets,
    names: ResourceNames | None = None,
) -> Holder | None:
    """The advisor's view of a pod holding MIG slices, or None when it is not a running pod to remove.

    Its replacement's request (`replacement_request`) tells the advisor whether evicting it moves it
    (its controller recreates it and the engine places it elsewhere) or loses it."""
    meta = (pod or {}).get("metadata") or {}
    if pod is None or meta.get("uid") != usage.uid or meta.get("deletionTimestamp"):
        return None  # unknown or already going: its slices count as held, nobody to remove
    if not (pod.get("spec") or {}).get("nodeName"):
        return None  # reserved but not yet bound: not running
    return Holder(
        f"{usage.namespace}/{usage.name}",
        usage.node,
        tuple(placements),
        pod_priority(pod),
        pod_started(pod),
        budgets.groups(pod),
        request=replacement_request(pod, names or ResourceNames()),
    )


def status_advisor(
    pods: Iterable[Mapping[str, Any]],
    pdbs: Iterable[Mapping[str, Any]] = (),
    now: float | None = None,
    names: ResourceNames | None = None,
) -> Advisor:
    """For `dynmig status`: advice(pending pod, its request, the fleet's GPUs) -> one line, "" for none.

    Read-only and the same rule as the scheduler's advice: running MIG pods of no higher priority than
    the pending one, within the budgets `pdbs` report (none given: budgets are not known). Ask it only
    for pods that do not fit now on the nodes it may run on (`nodes`, None: any; status does): it
    does not check again.
    """
    budgets = Budgets.from_objects(pdbs)
    when = time.time() if now is None else now
    holders: list[Holder] = []
    for pod in pods:
        usage = pod_usage(pod)
        if usage is not None and not usage.problem:
            placements = [(a.gpuUUID, a.placement_value) for a in usage.allocations]
            holder = holder_of(usage, placements, pod, budgets, names)
            if holder is not None:
                holders.append(holder)

    shared: list[tuple[Sequence[GpuState], Homes]] = []  # the fleet last asked about, and its homes

    def advice(
        pod: Mapping[str, Any],
        request: PodRequest,
        gpus: Sequence[GpuState],
        nodes: Collection[str] | None = None,
    ) -> str:
        priority = pod_priority(pod)
        candidates = [replace(h, candidate=h.priority <= priority) for h in holders]
        if not shared or shared[0][0] is not gpus:  # status asks for every pending pod over one fleet
            shared[:] = [(gpus, Homes(gpus))]
        found = advise(
            request,
            gpus,
            candidates,
            budgets.allowed,
            when,
            nodes=nodes,
            known_unplaceable=True,
            homes=shared[0][1],
        )
        return bounded(advice_text(found)) if found.found or "fits without" not in found.why_none else ""

    return advice
