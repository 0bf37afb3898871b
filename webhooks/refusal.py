"""The filter's refusal as kube-scheduler and the pod's events read it: each candidate node's
FailedNodes text and the FilteringFailed event's text (pure: `Fleet.decide` gathers the facts).

Every node the engine refused gets the same text: kube-scheduler counts identical reasons, so its
FailedScheduling reads "0/N nodes are available: N node(s) cannot place ...: <headline>." A node
left out (its device plugin not serving, locked by a bind, chosen for another pod) says why instead.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass

from mig.placement import Refusal
from mig.placement.reasons import MAX_NODE_TEXT
from mig.reconstruct import NodeOccupancy

# What every refused node's FailedNodes text starts with (kube-scheduler puts the count before it).
NODES_PREFIX = "node(s) cannot place the pod's MIG devices: "
# ... for a node left out because its device plugin is not serving (one text: kube-scheduler groups)
DOWN_TEXT = (
    "node(s) whose dynmig device plugin is not serving (kubelet counts none of its GPUs); "
    "taken back once it serves again"
)
MAX_EVENT_TEXT = 1024  # an Event's message (the API server's limit)
NODE_LOCKED = "node-locked"  # the reason of a pod only other pods' binds in progress keep out


@dataclass(frozen=True)
class Refused:
    """The pod fits on no candidate node now. `reason`: its headline code (what the pod waits for);
    `failed`: each candidate node's FailedNodes text; `event`: the FilteringFailed event's text, or
    None when only other pods' binds in progress keep it out (no failure: kube-scheduler retries it
    when they finish)."""

    refusal: Refusal
    reason: str
    failed: dict[str, str]
    event: str | None


def reason_of(refusal: Refusal, busy: bool) -> str:
    """The refused pod's reason code (what it waits for; dynmig_pods_pending's label): `busy`, the
    pod would fit on a node only other pods' binds in progress keep it off, is `NODE_LOCKED`."""
    counts = refusal.counts()
    return NODE_LOCKED if busy else counts.most_common(1)[0][0] if counts else "no-mig-gpus"


def refused(
    refusal: Refusal,
    reason: str,
    candidates: Collection[str],
    left_out: tuple[Mapping[str, str], Mapping[str, str], Mapping[str, str]],
    occupancies: Iterable[NodeOccupancy | None],
    advice: str,
) -> Refused:
    """The refusal as kube-scheduler and the pod's events read it. `left_out`: the candidate nodes
    left out, each with its reason: (chosen for another pod, locked by a bind, device plugin not
    serving); `occupancies`: the candidates' (their GPUs failed closed are said). A pod only other
    pods' binds keep out (`reason` `NODE_LOCKED`) gets no event and no advice."""
    chosen, locked, down = left_out
    excluded: Mapping[str, str] = Excluded(chosen, locked) if chosen else locked
    busy = reason == NODE_LOCKED
    closed = closed_texts(occupancies)
    said = "" if busy else advice
    failed = node_texts(refusal, candidates, excluded, down, closed, said)
    event = None if busy else event_text(refusal, closed, excluded, down, said)
    return Refused(refusal, reason, failed, event)


class Excluded(Mapping[str, str]):
    """Nodes a filter leaves out, with the reason: chosen for another pod whose bind is in progress
    (first), or locked by a bind (worded only when read)."""

    def __init__(self, chosen: Mapping[str, str], locked: Mapping[str, str]):
        self._chosen, self._locked = chosen, locked

    def __getitem__(self, node: str) -> str:
        return self._chosen[node] if node in self._chosen else self._locked[node]

    def __iter__(self) -> Iterator[str]:
        yield from self._chosen
        yield from (n for n in self._locked if n not in self._chosen)

    def __len__(self) -> int:
        return len(self._chosen) + sum(1 for n in self._locked if n not in self._chosen)


def refusal_text(refusal: Refusal, extra: list[str], advice: str = "") -> str:
    """One refused node's FailedNodes text: the prefix and headline (together under 300 characters),
    the defrag advice if any, then ` Per GPU: ` and the per-GPU detail, capped with "and N more GPUs".

    The advice goes on every refused node, not only the one it names: kube-scheduler groups nodes by
    identical text, so one text keeps its FailedScheduling to one group (the advice names its node),
    and before the detail it survives the event's 1 KiB cut."""
    head = f"{NODES_PREFIX}{refusal.headline()}" + (f"; {advice}" if advice else "")
    return refusal.text(MAX_NODE_TEXT, extra, head=head)


def node_texts(
    refusal: Refusal,
    candidates: Iterable[str],
    excluded: Mapping[str, str],
    down: Mapping[str, str],
    closed: list[str],
    advice: str,
) -> dict[str, str]:
    """Each candidate node's FailedNodes text: not serving, else left out (its reason), else the
    engine's refusal with the advice."""
    per_node = refusal_text(refusal, closed, advice) if refusal.reasons else f"{NODES_PREFIX}no MIG GPU"
    return {node: (down.get(node) and DOWN_TEXT) or excluded.get(node) or per_node for node in candidates}


def event_text(
    refusal: Refusal, closed: list[str], excluded: Mapping[str, str], down: Mapping[str, str], advice: str
) -> str:
    """The FilteringFailed event's text: the nodes left out, the refusal, and the defrag advice."""
    text = refusal.text(MAX_EVENT_TEXT, closed) if refusal.reasons else ""
    locked = (
        (f"{len(excluded)} candidate nodes are locked by binds in progress (retried when they finish)")
        if excluded
        else ""
    )
    text = "; ".join(t for t in (locked, text) if t)
    if advice:  # its own line here; in every refused node's text, after the headline
        text += "\n" + advice
    if down:
        named = ", ".join(f"{n} ({why})" for n, why in sorted(down.items())[:8])
        text = f"{len(down)} candidate node(s) left out: {named}" + (f"; {text}" if text else "")
    return text[:MAX_EVENT_TEXT]


def closed_texts(occupancies: Iterable[NodeOccupancy | None]) -> list[str]:
    """Each GPU failed closed on these nodes, with why (the refusal's detail adds them)."""
    out: list[str] = []
    for occ in occupancies:
        if occ is not None and occ.closed:
            out.extend(
                f"{occ.node}/{uuid}: not schedulable: {why}" for uuid, why in sorted(occ.closed.items())
            )
    return out
