"""Saying the defrag advice: one line for people, for an annotation, an event and a refusal."""

from __future__ import annotations

from mig.defrag.advice import Advice
from mig.placement import Plan

MAX_ADVICE_TEXT = 1024  # what goes into an annotation or an event line


def no_set(blocked: set[str], checks: int, capped: bool = False, homeless: int = 0) -> Advice:
    """The advice when no set was found, saying why: budgets (`blocked`), the search limit (`capped`),
    or sets that strand a pod when homes are required (`homeless` of them)."""
    strands = "evicts a pod with no other home (move-only)"
    if blocked:
        why = (
            "every set that would place it is blocked by a PodDisruptionBudget ("
            + ", ".join(sorted(blocked))
            + ")"
            + (f" or {strands}" if homeless else "")
        )
    elif capped:
        why = f"no set found within the search limit ({checks} placement checks)"
    elif homeless:
        why = f"every set that would place it {strands}"
    else:
        why = "no set of running MIG pods that may be removed would place it"
    return Advice(exact=not capped, checks=checks, why_none=why, blocked_by_budget=tuple(sorted(blocked)))


def _where(plan: Plan) -> str:
    return ", ".join(f"{d.profile} on {d.gpu_uuid} at {d.placement}" for d in plan.devices)


def advice_text(advice: Advice) -> str:
    """One line for people: which pods to remove, on which node, what the pod then gets, and per
    removed pod whether it is lost (first: what an operator most needs to see) or moves, and where,
    in the order to evict them (a chain's pods on other nodes are named with their nodes)."""
    if not advice.found:
        return f"defrag: {advice.why_none}" if advice.why_none else ""
    nodes = sorted({h.node for h in advice.victims}, key=lambda n: (n != advice.node, n))
    if nodes == [advice.node]:
        names = f"on {advice.node} (" + ", ".join(h.name for h in advice.victims) + ")"
        landing = ""
    else:  # a chain: pods on other nodes move out of the way of a pod that moves
        by_node = [", ".join(h.name for h in advice.victims if h.node == n) + f" on {n}" for n in nodes]
        names, landing = "(" + "; ".join(by_node) + ")", f" on {advice.node}"
    where = f"{landing} and get {_where(advice.plan)}" if advice.plan is not None else landing
    proof = "" if advice.exact else " (search capped: not proven cheapest)"
    count = len(advice.victims)
    fates = []
    lost = [m.victim for m in advice.moves if m.plan is None]
    if lost:
        fates.append(
            "evicts "
            + ", ".join(f"{h.name} ({'no other home' if h.request else 'not recreated'})" for h in lost)
        )
    moved = [m for m in advice.moves if m.plan is not None]
    if moved:
        fates.append(
            "moves "
            + ", ".join(f"{m.victim.name} to {m.plan.node} ({_where(m.plan)})" for m in moved if m.plan)
        )
    tail = "; " + "; ".join(fates) if fates else ""
    return f"defrag: removing {count} pod(s) {names} would let it be placed{where}{proof}{tail}"


def bounded(text: str, limit: int = MAX_ADVICE_TEXT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
