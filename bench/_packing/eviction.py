"""dynmig with its defrag eviction mode on: what evicting buys an operator on the placement bench's traces.

The replay: the bench's fleet and trace, dynmig's engine placing each arrival (the bench's adapter,
its picks checked by the bench's `apply` like any policy's). When the engine refuses an arrival, the
defrag controller's step runs at that moment, with the real code: the advisor (`mig.defrag.advise`)
over the fleet as the engine sees it, every running pod a `Holder` (its placements, its priority,
when it started), candidates chosen by the controller's own rule (`webhooks.defrag._may_evict`: opted
in by annotation, strictly lower priority than the pending pod, at most one budget), and the
controller's token bucket (`webhooks.defrag.TokenBucket`, 6 a minute, a set larger than the bucket
never evicted) on the trace's clock. Every pod is a controller's (its `Holder` carries its request,
so the advisor knows its replacement's), and with the controller's move-only rule
(`--defrag-move-only`) the advisor names only sets whose every pod it places again. The set is
evicted (released), the pending pod is placed by the engine, and each evicted pod is recreated by
its controller at once and placed by the engine (most important first, as the advisor predicts), or
is refused (dropped, as the bench drops refused arrivals). A recreated pod keeps its departure time (its
demand ends when the trace says) and does not itself evict: no cascades. The pending pod is placed
before the recreated ones, as kube-scheduler's queue pops the higher priority first. Refused work:
each refused pod's share of a GPU (its smallest covering placements on its cheapest model, as the
bench's offered load counts it) times the minutes it missed (an arrival: its lifetime; an evicted
pod: the rest of it). The set may be a chain (pods on other nodes moved out of the way of a pod that
moves); the recreated pods are placed in the advice's order (`mig.defrag.eviction_order`), which is
the order the controller evicts them in.

Assumptions, stated where they are printed: no PodDisruptionBudgets (the traces carry none); the
controller's pass interval, the eviction's grace period and the recreation are instantaneous; trace
time is read as minutes (mean lifetimes of 20-200 minutes), which is what the rate limit is applied
on. A rate-limited or set-less pending pod is refused (the bench does not retry pods).

Rankings (who may evict whom):
- `NONE`: no pod opted in: plain dynmig, replayed by this code (its refusals equal the bench's dynmig
  row; it gives the refused work the others are compared with).
- `EVERYONE`: every running pod opted in and every pending pod outranks every running one: the most the
  controller may ever evict (it refuses equal priorities, so a fleet of one priority class gets
  nothing). Not a bound on what it recovers: the cheapest set is then often one young pod as large as
  the pending one, which cannot be placed again.
- `JOBS`: jobs outrank services: a pod with a device of 3g size or more (18,000 MiB or a whole GPU:
  the traces' jobs) has priority 1 and does not opt in; the rest (1g/2g services and the mixed
  workload's 2g notebooks) have priority 0 and opt in. Only a refused job evicts, and only services.
- `EVERYONE_MOVES`, `JOBS_MOVES`: the same rankings with move-only on (the controller's default):
  only sets whose every evicted pod the engine places again.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from _baselines import BGpu, BNode, Pick

from mig.annotations import EVICTABLE
from mig.defrag import Advice, Holder, advise, eviction_order
from mig.placement import ContainerRequest, GpuState, PodRequest
from mig.types import Placement
from webhooks.defrag import TokenBucket, _may_evict

Mems = tuple[int | None, ...]
Arrival = tuple[float, Mems, float]  # (arrival time, device memories, lifetime), as the bench's `trace`
SECONDS_PER_UNIT = 60.0  # trace time is read as minutes
PER_MINUTE = 6  # the controller's default (--defrag-evictions-per-minute)


class Engine(Protocol):
    """The bench's dynmig adapter: decides a pod's picks; told what was reserved and released."""

    def decide(self, mems: list[int | None]) -> list[Pick] | None: ...


@dataclass(frozen=True)
class Harness:
    """The placement bench's own pieces, so this replay places, checks and releases as every other."""

    engine: Callable[[list[BNode]], Engine]
    apply: Callable[[Any, list[Pick], int, Mems], None]
    release: Callable[[Any, list[Pick], int], None]
    gpu_states: Callable[[list[BNode]], list[GpuState]]
    kind: Callable[[Mems], str]


@dataclass(frozen=True)
class Ranking:
    """Each pod's priority and whether it opted in; `pending_outranks`: a pending pod outranks all."""

    name: str
    priority: Callable[[Mems], int]
    evictable: Callable[[Mems], bool]
    pending_outranks: bool = False
    move_only: bool = False  # the controller's --defrag-move-only


def is_job(mems: Mems) -> bool:
    """A device of 3g size or more (18,000 MiB, or a whole GPU): the traces' jobs."""
    return any(m is None or m >= 18000 for m in mems)


NONE = Ranking("evict: none opted in", lambda m: 0, lambda m: False)  # plain dynmig, replayed here
EVERYONE = Ranking("evict: all opted in", lambda m: 0, lambda m: True, pending_outranks=True)
JOBS = Ranking("evict: jobs > services", lambda m: int(is_job(m)), lambda m: not is_job(m))
EVERYONE_MOVES = replace(EVERYONE, name="evict: all opted in, move only", move_only=True)
JOBS_MOVES = replace(JOBS, name="evict: jobs > services, move only", move_only=True)
RANKINGS = (NONE, EVERYONE, JOBS, EVERYONE_MOVES, JOBS_MOVES)
MEANS = (
    "dynmig + defrag eviction: dynmig's engine places each pod; at each refusal the real advisor "
    "(mig/defrag.py) names\nthe cheapest set among the pods the controller may evict (its rule and its "
    "6-a-minute token bucket,\ntrace time read as minutes), preferring sets whose pods it can place "
    "again; the set is evicted, the pod\nplaced, and each evicted pod recreated at once and placed by "
    "the engine or refused (it keeps its departure\ntime and evicts nothing itself). No PDBs; pass "
    f"interval and grace period taken as instant. '{NONE.name}':\nplain dynmig replayed. "
    f"'{EVERYONE.name}': every running pod opted in and the pending pod outranks it (the\nmost the "
    f"controller may evict). '{JOBS.name}': pods with a 3g-or-larger device (jobs) have priority 1\n"
    "and stay; the others (1g/2g services, mixed's 2g notebooks) have 0 and opted in. '..., move "
    "only': the\ncontroller's default (--defrag-move-only), only sets whose every pod the engine places "
    "again. refused =\narrivals never placed + evicted pods not re-placed; refused work: their GPU "
    "share (cheapest model) times\nthe minutes they missed."
)


@dataclass
class EvictionSet:
    """One eviction: for which arrival, which pods, and what became of everyone."""

    at: float
    pending: int
    victims: tuple[int, ...]
    placed: bool  # the pending pod was placed once the set was gone
    replaced: tuple[int, ...]  # victims the engine placed again
    exact: bool  # the advisor proved the set cheapest (multi-device searches may be capped)


@dataclass
class Outcome:
    """One replay's counts (see the module docstring)."""

    arrivals_refused: int = 0
    evicted_lost: int = 0  # evicted pods the engine could not place again
    evictions: int = 0
    recovered: int = 0  # arrivals placed thanks to an eviction
    no_set: int = 0  # refused: the advisor found no set among the candidates
    rate_limited: int = 0  # refused: the token bucket held the set back
    too_large: int = 0  # of rate_limited: the set is larger than the bucket, never evicted
    advice_missed: int = 0  # a set was evicted and the engine still refused the pod
    not_exact: int = 0  # sets from a capped search (not proven cheapest)
    advised_lost: int = 0  # evicted pods the advisor said would find no other home
    misjudged: int = 0  # evicted pods placed again, or not, unlike the advice said
    lost_minutes: float = 0.0  # the evicted pods' run time so far, summed (work lost if they restart)
    refused_work: float = 0.0  # GPU-minutes refused: each refused pod's GPU share times the time it missed
    # The same, counted only from `window` on (churn_evicting's `window`; the packing grid's warm-up):
    window_refused_work: float = 0.0  # arrivals at or after it: share x lifetime; evicted pods lost then
    window_refused: int = 0
    window_evictions: int = 0
    peak_per_minute: int = 0  # most evictions within any one minute of trace time
    by_kind: Counter[str] = field(default_factory=Counter)  # refused arrivals per request kind
    sets: list[EvictionSet] = field(default_factory=list)

    @property
    def refused(self) -> int:
        return self.arrivals_refused + self.evicted_lost

    def summary(self) -> dict[str, Any]:
        out = {k: v for k, v in vars(self).items() if k not in ("sets", "by_kind")}
        return out | {"refused": self.refused, "by_kind": dict(self.by_kind)}


def request(mems: Mems) -> PodRequest:
    """The pod as dynmig's engine reads it (one device per container), as the bench's adapter builds it."""
    return PodRequest(containers=tuple(ContainerRequest(1, m) for m in mems))


def _pod(name: str, opted_in: bool) -> dict[str, Any]:
    """The Kubernetes object the controller's candidate rule reads: its evictable annotation."""
    annotations = {EVICTABLE: "true"} if opted_in else {}
    return {"metadata": {"name": name, "namespace": "bench", "annotations": annotations}}


def name_of(key: int) -> str:
    return f"bench/pod-{key:05d}"


class _Replay:
    def __init__(
        self,
        arrivals: Sequence[Arrival],
        nodes: list[BNode],
        harness: Harness,
        ranking: Ranking,
        window: float = 0.0,
        feed: bool = False,
    ):
        self.arrivals, self.nodes, self.h, self.rank = arrivals, nodes, harness, ranking
        self.window, self.feed = window, feed
        self.engine = harness.engine(nodes)
        self.live: dict[int, list[Pick]] = {}
        self.started: dict[int, float] = {}
        self.now = 0.0
        self.bucket = TokenBucket(PER_MINUTE, clock=lambda: self.now * SECONDS_PER_UNIT)
        self.out = Outcome()
        self.evicted_at: list[float] = []
        self.shares: dict[Mems, float] = {}

    def _missed(self, key: int) -> None:
        """Count a refused pod's work: its GPU share times what was left of its lifetime."""
        t, mems, life = self.arrivals[key]
        if mems not in self.shares:
            self.shares[mems] = gpu_share(self.nodes, mems)
        self.out.refused_work += self.shares[mems] * (t + life - self.now) * SECONDS_PER_UNIT / 60.0
        if self.now >= self.window:
            self.out.window_refused += 1
            self.out.window_refused_work += (
                self.shares[mems] * (t + life - self.now) * SECONDS_PER_UNIT / 60.0
            )

    def run(self, check: bool) -> Outcome:
        departures: list[tuple[float, int]] = []
        for key, (t, mems, life) in enumerate(self.arrivals):
            self.now = t
            while departures and departures[0][0] <= t:
                _, k = heapq.heappop(departures)
                if k in self.live:  # an evicted pod that was not placed again has gone already
                    self.h.release(self.engine, self.live.pop(k), k)
                    if self.feed and hasattr(self.engine, "departed"):  # its lifetime, once ended
                        self.engine.departed(self.arrivals[k][1], self.arrivals[k][2])
            if self.feed and hasattr(self.engine, "arrived"):  # the filter sees each arrival once
                self.engine.arrived(t, mems)
            if self._place(key) or self._defrag(key, mems):
                heapq.heappush(departures, (t + life, key))
            else:
                self.out.arrivals_refused += 1
                self.out.by_kind[self.h.kind(mems)] += 1
                self._missed(key)
            if check:
                wrong = fleet_problems(self.nodes, self.live, self.arrivals, self.engine)
                assert not wrong, f"after arrival {key}: {wrong[:3]}"
        self.out.peak_per_minute = _peak(self.evicted_at, 60.0 / SECONDS_PER_UNIT)
        return self.out

    def _place(self, key: int) -> bool:
        """The engine places the pod now (its picks applied, checked by the bench), or refuses it."""
        picks = self.engine.decide(list(self.arrivals[key][1]))
        if picks is None:
            return False
        self.h.apply(self.engine, picks, key, self.arrivals[key][1])
        self.live[key] = picks
        self.started[key] = self.now
        return True

    # ---- the controller's step, for one pending pod ------------------------------------------
    def _defrag(self, key: int, mems: Mems) -> bool:
        advice = self._advise(mems)
        if not advice.found:
            self.out.no_set += 1
            return False
        victims = tuple(int(h.name.rsplit("-", 1)[1]) for h in advice.victims)
        if not self.bucket.take(len(victims)):
            self.out.rate_limited += 1
            self.out.too_large += len(victims) > PER_MINUTE
            return False
        for k in victims:
            self.out.lost_minutes += (self.now - self.started.pop(k)) * SECONDS_PER_UNIT / 60.0
            self.h.release(self.engine, self.live.pop(k), k)
            self.evicted_at.append(self.now)
        self.out.evictions += len(victims)
        self.out.window_evictions += len(victims) if self.now >= self.window else 0
        self.out.not_exact += not advice.exact
        placed = self._place(key)  # the pending pod first: the scheduler retries it once the set is gone
        self.out.recovered += placed
        self.out.advice_missed += not placed
        order = [int(h.name.rsplit("-", 1)[1]) for h in eviction_order(advice)]
        replaced = tuple(k for k in order if self._place(k))  # then the recreated pods, at once
        self.out.evicted_lost += len(victims) - len(replaced)
        lost = {int(h.name.rsplit("-", 1)[1]) for h in advice.lost}
        self.out.advised_lost += len(lost)
        self.out.misjudged += len(lost.symmetric_difference(set(victims) - set(replaced)))
        for k in set(victims) - set(replaced):
            self._missed(k)
        self.out.sets.append(EvictionSet(self.now, key, victims, placed, replaced, advice.exact))
        return placed

    def _advise(self, mems: Mems) -> Advice:
        """As the controller asks: every running MIG pod a holder, candidates by its eviction rule."""
        pending = self.rank.priority(mems) + (1 if self.rank.pending_outranks else 0)
        holders = []
        for k, picks in self.live.items():
            kmems = self.arrivals[k][1]
            holder = Holder(
                name_of(k),
                picks[0][0].node,
                tuple((gpu.uuid, place) for gpu, place, _ in picks),
                self.rank.priority(kmems),
                self.started[k] * SECONDS_PER_UNIT,
                request=request(kmems),
            )
            pod = _pod(name_of(k), self.rank.evictable(kmems))
            holders.append(replace(holder, candidate=_may_evict(holder, pod, pending)))
        gpus = self.h.gpu_states(self.nodes)
        return advise(
            request(mems),
            gpus,
            holders,
            {},
            self.now * SECONDS_PER_UNIT,
            known_unplaceable=True,
            require_homes=self.rank.move_only,
        )


def gpu_share(nodes: Sequence[BNode], mems: Mems) -> float:
    """The pod's share of a GPU on the model where it costs least: per device the smallest placement of
    a profile covering its memory (a whole GPU: the largest profile), over the GPU's slices."""
    shares = []
    for g in {n.gpus[0].type: n.gpus[0] for n in nodes}.values():
        top = max(p.memory_mb for p in g.profiles)
        sizes = [
            min(
                (p.placements[0].size for p in g.profiles if p.memory_mb >= (top if m is None else m)),
                default=0,
            )
            for m in mems
        ]
        if all(sizes):
            shares.append(sum(sizes) / g.axis)
    return min(shares, default=0.0)


def _peak(times: Sequence[float], window: float) -> int:
    """The most of `times` (sorted) within any half-open window of that length."""
    best, lo = 0, 0
    for hi, t in enumerate(times):
        while t - times[lo] >= window:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def churn_evicting(
    arrivals: Sequence[Arrival],
    nodes: list[BNode],
    harness: Harness,
    ranking: Ranking,
    check: bool = False,
    window: float = 0.0,
    feed: bool = False,
) -> Outcome:
    """Replay the trace with defrag eviction (see the module docstring); `check`: the fleet's
    consistency is asserted after every arrival (`fleet_problems`). `window`: the `window_*` figures
    count only from that trace time on (the packing grid's warm-up); `feed`: the engine is told each
    arrival (`arrived`, before its decision) and each ended lifetime (`departed`), as the packing
    grid's replay tells it (the demand estimate); off, the engine is told neither, as before."""
    return _Replay(arrivals, nodes, harness, ranking, window, feed).run(check)


def fleet_problems(
    nodes: list[BNode], live: Mapping[int, list[Pick]], arrivals: Sequence[Arrival], engine: Any
) -> list[str]:
    """What is inconsistent: a placement held for no running pod, a running pod not held exactly where
    its picks say (one placement per device, nowhere else), or the engine's view differing from the fleet."""
    wrong = []
    held: dict[int, list[tuple[BGpu, Placement]]] = {}
    for n in nodes:
        for g in n.gpus:
            mask = 0
            for (k, _), (place, _) in g.allocs.items():
                held.setdefault(k, []).append((g, place))
                mask |= place.mask
            if mask != g.mask:
                wrong.append(f"{g.uuid}: mask {g.mask:b} but allocations cover {mask:b}")
            index = getattr(engine, "index", None)
            if index is not None and index.occupied_mask(g.uuid) != g.mask:
                wrong.append(
                    f"{g.uuid}: the engine holds {index.occupied_mask(g.uuid):b}, the fleet {g.mask:b}"
                )
    for k in held.keys() - live.keys():
        wrong.append(f"pod {k} holds {len(held[k])} placement(s) but is not running")
    for k, picks in live.items():
        want = sorted((g.uuid, p.start, p.size) for g, p, _ in picks)
        got = sorted((g.uuid, p.start, p.size) for g, p in held.get(k, []))
        if want != got or len(picks) != len(arrivals[k][1]):
            wrong.append(f"pod {k} should hold {want}, holds {got}")
        if len({g.node for g, _, _ in picks}) != 1:
            wrong.append(f"pod {k} spans nodes")
    return wrong


def _met(refused: int, oracle: int) -> bool:
    """Within 1.25× the oracle's refusals (both 0 counts as met)."""
    return refused <= 1.25 * oracle


# ---- the bench's lines ----------------------------------------------------------------------------
def _cells(values: Sequence[object], fmt: str = "{}") -> str:
    return "[" + ", ".join(fmt.format(v) for v in values) + "]"


BOTH_ZERO = "1.00 (both 0)"


def _ratio(a: float, b: float) -> str:
    """a/b; 'inf' when only b is 0; when both are, 1.00 and says so (neither refuses: as good as the
    reference, which meets a ≤ 1.25× target)."""
    if not a and not b:
        return BOTH_ZERO
    return "inf" if not b else f"{a / b:.2f}"


def report(
    outcomes: Mapping[str, Sequence[Outcome]],
    dynmig: Sequence[int],
    proved: Sequence[int],
    most: Sequence[int],
) -> dict[str, Any]:
    """Print one line per ranking, figures per trace (seed); `dynmig`: plain dynmig's refusals and
    `proved`/`most`: the oracle's at dynmig's refusals, per trace. Returns the figures for the JSON."""
    out: dict[str, Any] = {}
    base = [o.refused_work for o in outcomes.get(NONE.name, ())]
    for name, runs in outcomes.items():
        refused = [o.refused for o in runs]
        print(
            f"dynmig + {name}: refused per seed {_cells(refused)} (arrivals never placed "
            f"{_cells([o.arrivals_refused for o in runs])} + evicted and not re-placed "
            f"{_cells([o.evicted_lost for o in runs])}); evictions {_cells([o.evictions for o in runs])} "
            f"in {_cells([len(o.sets) for o in runs])} sets, which placed {_cells([o.recovered for o in runs])} "
            "arrivals"
        )
        print(
            f"    /dynmig {_cells([_ratio(r, d) for r, d in zip(refused, dynmig, strict=True)])}×; "
            f"/oracle at least {_cells([_ratio(r, m) for r, m in zip(refused, most, strict=True)])}×, "
            f"at most {_cells([_ratio(r, p) for r, p in zip(refused, proved, strict=True)])}×; refused for no "
            f"set {_cells([o.no_set for o in runs])}, rate-limited {_cells([o.rate_limited for o in runs])} "
            f"(set > bucket {_cells([o.too_large for o in runs])}); peak evictions in a minute "
            f"{_cells([o.peak_per_minute for o in runs])}; evicted pods the advisor expected lost "
            f"{_cells([o.advised_lost for o in runs])} (misjudged {_cells([o.misjudged for o in runs])})"
        )
        work = [o.refused_work for o in runs]
        print(
            f"    refused work {_cells(work, '{:.0f}')} GPU-min"
            + (
                f" ({_cells([_ratio(w, b) for w, b in zip(work, base, strict=True)])}× '{NONE.name}')"
                if base and name != NONE.name
                else ""
            )
            + f"; evicted pods' run time so far {_cells([o.lost_minutes for o in runs], '{:.0f}')} min"
        )
        out[name] = [o.summary() for o in runs]
    moving = outcomes.get(EVERYONE_MOVES.name)
    if moving:
        refused = [o.refused for o in moving]
        lo = [_ratio(r, m) for r, m in zip(refused, most, strict=True)]
        hi = [_ratio(r, p) for r, p in zip(refused, proved, strict=True)]
        print(
            "dynmig + defrag eviction / oracle (opt-in eviction with every pod opted in and the pending pod "
            f"outranking it, move only; the oracle judged at plain dynmig's refusals): refused per seed "
            f"{_cells(refused)} against the oracle's {_cells(list(proved))} (proved) to {_cells(list(most))} "
            f"(at most); ratio per seed at least {_cells(lo)}×, at most {_cells(hi)}× (target ≤ 1.25× near "
            f"capacity; inf: the oracle refuses none; {BOTH_ZERO}: neither refuses, met); within 1.25× the oracle (at "
            f"most) on {sum(_met(r, m) for r, m in zip(refused, most, strict=True))} of {len(refused)} seeds"
        )
        out["vs_oracle"] = {"ranking": EVERYONE_MOVES.name, "refused": refused, "at_least": lo, "at_most": hi}
    return out
