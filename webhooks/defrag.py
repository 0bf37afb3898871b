"""The defrag loop of `dynmig serve`: advice for pending MIG pods, and opt-in eviction of the cheapest set.

Every `interval` seconds, while this replica leads, for each waiting MIG pod of ours that kube-scheduler
could not place (this server's filter refused it, or its PodScheduled condition says Unschedulable, so
a restarted server sees it too) and that does not fit now (at most `max_pods` per pass, highest
priority and oldest first); a pod the scheduler has not tried yet is not looked at (in a burst of
hundreds of new pods, planning each on every pass cost CPU the filter needs):
- the advice (mig/defrag/, docs/defrag.md) over the fleet as the scheduler sees it, among running MIG pods of no
  higher priority, within the PodDisruptionBudgets the API server reports, goes into the pod's
  `dynmig.io/defrag-advice` annotation (cleared once the pod is placed) and into the filter's
  refusal (`advice_for`: a line of the FilteringFailed event, and after the headline in every
  refused node's FailedScheduling reason);
- with `evict` on (off by default), the cheapest set among pods that opted in
  (`dynmig.io/evictable: "true"`) and have a strictly lower priority is evicted through the Eviction
  API (policy/v1, so the API server enforces the budgets: a 429 stops that set, and the next pass
  plans again with the budget's new status), at most `per_minute` pods a minute (a token bucket; a set
  larger than the bucket is never evicted), with an event on the evicted pod and on the pending pod
  for every eviction, and an event on the pending pod when no set exists. A pod's victims are not
  chosen again while they are still terminating.

The search is bounded (docs/defrag.md, "Bounds"); a pass handles at most `max_pods` pending pods and
stops taking new ones after about one interval (one-device advice grows linearly with the fleet), so
with many pending pods the most important go first. Counting the pods a set would lose builds one
fleet-wide engine index per pass, shared by every pod's advice; each advice then prices its sets on
it, and costs the most when the fleet is packed with no free slice anywhere (every set must be
priced). With `move_only` (the default), only sets that lose no pod are evicted: a pod moves, or
stays. A set may be a chain (a pod moves where another pod moves out of its way, on another node);
its pods are evicted in `eviction_order` (the order the advisor placed their replacements in: among
equal priorities kube-scheduler takes the replacement queued first), and the first refused eviction
ends the set. Chains cost more to find, so a pass then advises fewer pods. What an advice costs, and
the command that measures it: docs/defrag.md, "What an advice costs".
Advice places the pending pod only on nodes it may run on, as kube-scheduler's NodeUnschedulable,
TaintToleration and NodeAffinity filters decide it from the Node objects (mig/eligibility.py: its
nodeSelector, required node affinity and tolerations); the pods a set removes may move to any node.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from operator import attrgetter
from typing import Any

from kube.errors import KubeError, NotFound
from mig.allowlist import ResourceNames
from mig.annotations import DEFRAG_ADVICE
from mig.defrag import (
    Advice,
    Budgets,
    Holder,
    Homes,
    Move,
    advice_text,
    advise,
    bounded,
    eviction_order,
    opted_in,
    pod_priority,
)
from mig.defrag.advisor import holder_of
from mig.eligibility import constraints_of, eligibility, node_facts
from mig.placement import GpuState, PodRequest
from mig.placement.request import MAX_DEVICES
from mig.pods import is_waiting, metadata_of, not_scheduled
from webhooks.extender import BadArgs
from webhooks.filter import pod_request
from webhooks.fleet import Fleet
from webhooks.kube import EventRecorder, Kube

log = logging.getLogger(__name__)
VICTIM_TIMEOUT = 300.0  # seconds a pod's evicted set may take to go before it may be chosen again


@dataclass(frozen=True)
class World:
    """The fleet as the scheduler sees it now: GPUs with what they hold, and who holds it."""

    gpus: tuple[GpuState, ...]
    holders: tuple[tuple[Holder, Mapping[str, Any]], ...]  # each with its pod


def snapshot(
    fleet: Fleet,
    pod_of: Callable[[str, str], Mapping[str, Any] | None],
    budgets: Budgets,
    names: ResourceNames | None = None,
) -> World:
    """GPUs and the running MIG pods holding them (bound, not terminating, no reservation), node by node."""
    gpus: list[GpuState] = []
    held: dict[str, tuple[Any, list[Any]]] = {}
    view = fleet.view()
    for occ in sorted(view.occupancies, key=attrgetter("node")):
        gpus.extend(occ.gpus)
        for uuid, owners in occ.holders.items():
            for usage, allocation in owners:
                if usage.uid not in view.reserved:
                    held.setdefault(usage.uid, (usage, []))[1].append((uuid, allocation.placement_value))
    out = []
    for usage, placements in held.values():
        pod = pod_of(usage.namespace, usage.name)
        holder = holder_of(usage, placements, pod, budgets, names)
        if holder is not None and pod is not None:
            out.append((holder, pod))
    return World(tuple(gpus), tuple(out))


class TokenBucket:
    """At most `per_minute` tokens a minute, spent all at once or not at all."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic):
        self.capacity = float(per_minute)
        self.tokens = float(per_minute)
        self.clock = clock
        self._at = clock()

    def take(self, n: int) -> bool:
        now = self.clock()
        self.tokens = min(self.capacity, self.tokens + (now - self._at) * self.capacity / 60.0)
        self._at = now
        if n > self.tokens:
            return False
        self.tokens -= n
        return True


@dataclass
class Defragmenter:
    fleet: Fleet
    kube: Kube
    events: EventRecorder
    resources: Callable[[], Any]
    pods: Callable[[], Iterable[Mapping[str, Any]]]  # every pod the cache has
    pod_of: Callable[[str, str], Mapping[str, Any] | None]
    scheduler_name: str
    node_of: Callable[[str], Mapping[str, Any] | None] = lambda name: None  # the Node object, if known
    is_leader: Callable[[], bool] = lambda: True
    evict: bool = False
    move_only: bool = True  # evict only sets whose every pod the engine places again elsewhere
    interval: float = 10.0
    per_minute: int = 6
    max_pods: int = 20
    clock: Callable[[], float] = time.time
    _advice: dict[str, tuple[str, str]] = field(default_factory=dict)  # pending uid -> (node, text)
    _annotated: dict[tuple[str, str], str] = field(default_factory=dict)  # pod -> advice written
    _evicting: dict[str, tuple[frozenset[str], float]] = field(default_factory=dict)  # victims, deadline
    _told: dict[str, str] = field(default_factory=dict)  # pending uid -> last "no set" text told
    _stop: threading.Event = field(default_factory=threading.Event)
    _passing: threading.Lock = field(default_factory=threading.Lock)  # one pass at a time
    _thread: threading.Thread | None = None
    bucket: TokenBucket | None = None

    def __post_init__(self) -> None:
        self.bucket = self.bucket or TokenBucket(self.per_minute)

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self) -> Defragmenter:
        self._thread = threading.Thread(target=self._run, name="dynmig-defrag", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.pass_once()
            except Exception:  # a bug in one pass must not end the loop
                log.exception("defrag pass failed")

    # ---- what the filter asks ---------------------------------------------------------------
    def advice_for(self, uid: str) -> tuple[str, str] | None:
        """(node, one line) of the latest advice for this pending pod, or None."""
        return self._advice.get(uid)

    # ---- one pass ----------------------------------------------------------------------------
    def pass_once(self) -> list[str]:
        """Advise (and evict, when on) for the waiting pods; returns what it did, one line each."""
        if not self.is_leader():
            return []
        with self._passing:
            return self._pass()

    def _pass(self) -> list[str]:
        done: list[str] = []
        waiting = self._waiting()
        self._clear_placed({(_ns(p), _name(p)) for p, _ in waiting})
        allowed = self._allowed_nodes([p for p, _ in waiting])
        unplaced = [(p, r) for p, r in waiting if not self._fits(r, allowed[_uid(p)])]
        live = {_uid(p) for p, _ in unplaced}
        for uid in [u for u in self._advice if u not in live]:
            self._advice.pop(uid, None)
        if not unplaced:
            return done
        budgets = self._budgets()
        world = snapshot(self.fleet, self.pod_of, budgets, self._names())
        now, started = self.clock(), time.monotonic()
        homes = Homes(world.gpus)  # one fleet-wide index per pass, shared by every pod's advice
        for pod, request in unplaced[: self.max_pods]:
            if time.monotonic() - started > self.interval:
                break  # a pass takes at most about one interval; the rest wait (most important first)
            done += self._handle(pod, request, world, budgets, now, homes, allowed[_uid(pod)])
        return done

    def _waiting(self) -> list[tuple[Mapping[str, Any], PodRequest]]:
        out = []
        for pod in list(self.pods()):
            if not is_waiting(pod) or (pod.get("spec") or {}).get("schedulerName") != self.scheduler_name:
                continue
            if not self._refused(pod):
                continue
            try:
                request = pod_request(dict(pod), self.resources())
            except BadArgs:
                continue
            if request is not None and 0 < request.device_count <= MAX_DEVICES:
                out.append((pod, request))
        out.sort(
            key=lambda pr: (-pod_priority(pr[0]), str(metadata_of(pr[0]).get("creationTimestamp") or ""))
        )
        return out

    def _refused(self, pod: Mapping[str, Any]) -> bool:
        """kube-scheduler could not place the pod: the filter refused it, or its condition says so."""
        if self.fleet.refused(_uid(pod)):
            return True
        cond = not_scheduled(pod)
        return cond is not None and cond.get("reason") == "Unschedulable"

    def _names(self) -> ResourceNames | None:
        names = self.resources()
        return names if isinstance(names, ResourceNames) else None

    def _allowed_nodes(self, pods: Sequence[Mapping[str, Any]]) -> dict[str, frozenset[str] | None]:
        """Per pending pod (by uid), the nodes with MIG GPUs it may run on (None: all of them)."""
        if not pods:
            return {}
        names = self.fleet.nodes()
        facts = [(n, node_facts(obj) if isinstance(obj := self.node_of(n), Mapping) else None) for n in names]
        found: dict[Any, frozenset[str] | None] = {}
        out: dict[str, frozenset[str] | None] = {}
        for pod in pods:
            constraints = constraints_of(pod)
            if constraints not in found:
                found[constraints] = eligibility(constraints, facts).restriction
            out[_uid(pod)] = found[constraints]
        return out

    def _fits(self, request: PodRequest, nodes: frozenset[str] | None = None) -> bool:
        return self.fleet.fits(request, nodes)

    def _budgets(self) -> Budgets:
        try:
            items = self.kube.list_disruption_budgets()
        except Exception as error:  # noqa: BLE001 - advice without budgets beats no advice
            log.warning(
                "defrag: cannot list PodDisruptionBudgets (advice ignores them): %s", str(error)[:200]
            )
            items = []
        return Budgets.from_objects(i for i in items if isinstance(i, dict))

    def _handle(
        self,
        pod: Mapping[str, Any],
        request: PodRequest,
        world: World,
        budgets: Budgets,
        now: float,
        homes: Homes | None = None,
        nodes: frozenset[str] | None = None,
    ) -> list[str]:
        uid, priority = _uid(pod), pod_priority(pod)
        going = self._still_going(uid)
        advice = self._advise(
            request, world, budgets, now, lambda h, p: h.priority <= priority, homes=homes, nodes=nodes
        )
        text = advice_text(advice)
        done = []
        if self.evict and not going:
            chosen = self._advise(
                request,
                world,
                budgets,
                now,
                lambda h, p: _may_evict(h, p, priority),
                self.move_only,
                homes,
                nodes,
            )
            if chosen.found:
                advice, text = chosen, advice_text(chosen).replace("defrag: removing", "defrag: evicting", 1)
                done += self._evict(pod, chosen, world)
            else:
                done += self._tell_none(pod, chosen)
        if advice.found:
            self._advice[uid] = (advice.node, bounded(text))
        else:
            self._advice.pop(uid, None)
        self._annotate(pod, bounded(text))
        return done

    def _advise(
        self,
        request: PodRequest,
        world: World,
        budgets: Budgets,
        now: float,
        candidate: Callable[[Holder, Mapping[str, Any]], bool],
        require_homes: bool = False,
        homes: Homes | None = None,
        nodes: frozenset[str] | None = None,
    ) -> Advice:
        holders = [replace(h, candidate=candidate(h, p)) for h, p in world.holders]
        return advise(
            request,
            world.gpus,
            holders,
            budgets.allowed,
            now,
            nodes=nodes,
            known_unplaceable=True,
            require_homes=require_homes,
            homes=homes,
        )

    # ---- eviction ----------------------------------------------------------------------------
    def _still_going(self, uid: str) -> bool:
        """The pod's previous victims are still there (terminating) and not overdue."""
        entry = self._evicting.get(uid)
        if entry is None:
            return False
        victims, deadline = entry
        if self._present(victims) and time.monotonic() < deadline:
            return True
        self._evicting.pop(uid, None)
        return False

    def _present(self, names: Iterable[str]) -> bool:
        return any(self.pod_of(*name.partition("/")[::2]) is not None for name in names)

    def _evict(self, pending: Mapping[str, Any], advice: Advice, world: World) -> list[str]:
        assert self.bucket is not None
        who = f"{_ns(pending)}/{_name(pending)}"
        if not self.bucket.take(len(advice.victims)):
            return [f"{who}: rate limited ({len(advice.victims)} evictions wait for the next pass)"]
        pods = {h.name: p for h, p in world.holders}
        going = {m.victim.name: m for m in advice.moves}
        done = []
        for victim in eviction_order(advice):  # the order their replacements are expected to be placed in
            outcome = self._evict_one(victim, pods[victim.name], pending, who, _fate(going.get(victim.name)))
            done.append(f"{who}: {outcome}")
            if not outcome.startswith("evicted"):
                break  # a refused member leaves the set useless: plan again next pass
        self._evicting[_uid(pending)] = (
            frozenset(h.name for h in advice.victims),
            time.monotonic() + VICTIM_TIMEOUT,
        )
        return done

    def _evict_one(
        self, victim: Holder, pod: Mapping[str, Any], pending: Mapping[str, Any], who: str, fate: str
    ) -> str:
        ns, _, name = victim.name.partition("/")
        try:
            self.kube.evict(ns, name, _uid(pod))
        except NotFound:
            return f"{victim.name} is already gone"
        except KubeError as error:
            why = bounded(str(error), 300)
            self.events.record(
                dict(pending),
                "Warning",
                "DefragEvictionRefused",
                f"evicting {victim.name} was refused: {why}",
            )
            return f"eviction of {victim.name} refused ({error.status}): {why}"
        pending_priority = pod_priority(pending)
        message = (
            f"evicted by dynmig defrag to place {who} (priority {pending_priority} > {victim.priority}); "
            f"frees {', '.join(f'{u} {p}' for u, p in victim.placements)} on {victim.node}; {fate}"
        )
        self.events.record(dict(pod), "Warning", "DefragEvicted", bounded(message, 500))
        self.events.record(
            dict(pending),
            "Normal",
            "DefragEviction",
            bounded(f"evicted {victim.name} on {victim.node} to place this pod; {fate}", 500),
        )
        log.info("defrag: %s", message)
        return f"evicted {victim.name}"

    def _tell_none(self, pending: Mapping[str, Any], advice: Advice) -> list[str]:
        uid = _uid(pending)
        text = f"no evictable set: {advice.why_none}"
        if self._told.get(uid) == text:
            return []
        self._told[uid] = text
        self.events.record(dict(pending), "Normal", "DefragNoSet", bounded(text))
        return [f"{_ns(pending)}/{_name(pending)}: {text}"]

    # ---- the annotation ---------------------------------------------------------------------
    def _annotate(self, pod: Mapping[str, Any], text: str) -> None:
        key = (_ns(pod), _name(pod))
        current = ((metadata_of(pod).get("annotations") or {}).get(DEFRAG_ADVICE)) or ""
        if current == text or not text:
            if text:
                self._annotated[key] = text
            return
        if self._write(key, text):
            self._annotated[key] = text

    def _clear_placed(self, waiting: set[tuple[str, str]]) -> None:
        for key in [k for k in self._annotated if k not in waiting]:
            self._annotated.pop(key, None)
            if self.pod_of(*key) is not None:
                self._write(key, None)

    def _write(self, key: tuple[str, str], text: str | None) -> bool:
        try:
            self.kube.patch_pod(key[0], key[1], {"metadata": {"annotations": {DEFRAG_ADVICE: text}}})
        except Exception as error:  # noqa: BLE001 - advice is best effort; the next pass retries
            log.warning("defrag: cannot annotate %s/%s: %s", key[0], key[1], str(error)[:200])
            return False
        return True


def _fate(move: Move | None) -> str:
    """What the advisor expects of an evicted pod's replacement, for its events."""
    if move is None:
        return "where its replacement goes is not known"
    if move.plan is None:
        return "its replacement has no other home" if move.victim.request else "nothing recreates it"
    d = move.plan.devices
    return f"its replacement is expected on {move.plan.node} ({', '.join(f'{x.profile} on {x.gpu_uuid}' for x in d)})"


def _may_evict(h: Holder, pod: Mapping[str, Any], priority: int) -> bool:
    """Opted in, strictly less important, and at most one budget (the Eviction API refuses two)."""
    return opted_in(pod) and h.priority < priority and len(h.groups) <= 1


def _ns(pod: Mapping[str, Any]) -> str:
    return str(metadata_of(pod).get("namespace") or "")


def _name(pod: Mapping[str, Any]) -> str:
    return str(metadata_of(pod).get("name") or "")


def _uid(pod: Mapping[str, Any]) -> str:
    return str(metadata_of(pod).get("uid") or "")
