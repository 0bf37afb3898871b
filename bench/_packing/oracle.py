"""The placement oracle: could the pods running at a refusal, plus the refused one, fit on the fleet if
every running instance could be moved?

It answers for one moment (a refusal of the policy being measured) with one of four verdicts:

- `INFEASIBLE`: proved, for any policy, even one that moves every instance. Either the node-free
  relaxation has no solution (each GPU of a model holds one *configuration*, a maximal multiset of
  profiles that fits on it at legal, disjoint placements, enumerated exactly; node boundaries are
  dropped, so multi-device pods may spread), or the exact program with nodes has none.
- `PACKED`: a packing of every running pod and the new one was found (`Judgement.packing`: per pod,
  per device, the GPU, placement and profile), legal on every GPU, each pod on one node: first by
  laying the relaxation's solution out on the nodes (no further solve; `_greedy`), else from a
  solution of the program with nodes.
- `UNKNOWN`: the node-free relaxation has a solution, its layout did not pack, and the program with
  nodes hit its time limit.
- `NOT_SEARCHED`: as `UNKNOWN`, but the run's time budget for the program with nodes was spent.

Both programs are integer programs solved by HiGHS (`scipy.optimize.milp`) with no objective (any
solution will do). A device may use any profile covering its memory on any model it fits; in a
configuration it needs a profile slot of its own. The covering sets are nested (a profile covering
a larger memory covers a smaller one), so "every device gets a distinct covering slot" is, by Hall's
theorem, one inequality per memory threshold: slots covering at least that memory >= devices asking
at least that much. The program with nodes is the same per node (a pod's devices may share a GPU, as
the bench's checks allow), with integer counts of single-device pods and of multi-device pods per node;
it is exact, so its solution becomes a packing: per node, configurations onto GPUs, devices onto
slots largest first (smallest covering slot), and placements by an exact search per GPU.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache

import numpy as np
from _baselines import BGpu, BNode
from scipy.optimize import Bounds, LinearConstraint, milp

from mig.placement import PublishedProfile
from mig.types import Placement

INFEASIBLE, PACKED, UNKNOWN = "proved infeasible", "packing found", "unknown"
# NOT_SEARCHED: the relaxation had a solution, its layout failed, the budget for the exact program was spent
NOT_SEARCHED = "not searched"
VERDICTS = (INFEASIBLE, PACKED, UNKNOWN, NOT_SEARCHED)

Mems = tuple[int | None, ...]
Pick = tuple[BGpu, Placement, PublishedProfile]
Profiles = tuple[PublishedProfile, ...]


@dataclass(frozen=True)
class Judgement:
    verdict: str
    how: str  # the step that decided: relaxation, its layout on nodes, node program, time limit, budget
    packing: dict[int, list[Pick]] | None = None  # with PACKED: pod key -> one pick per device


# ---- one GPU, exactly ---------------------------------------------------------------------------
@cache
def arrange(profiles: Profiles, items: tuple[int, ...]) -> tuple[Placement, ...] | None:
    """Legal, disjoint placements for instances of these profile indexes on one GPU (aligned with
    `items`), or None when there are none. Exact: a search over the published placements."""
    order = sorted(range(len(items)), key=lambda n: (-profiles[items[n]].size, items[n]))
    axis = max(p.end for pr in profiles for p in pr.placements)
    if sum(profiles[i].size for i in items) > axis:
        return None
    chosen: list[Placement | None] = [None] * len(items)

    def place(n: int, mask: int, floor: int) -> bool:
        if n == len(order):
            return True
        idx = items[order[n]]
        same = n > 0 and items[order[n - 1]] == idx
        for p in profiles[idx].placements:
            # Equal profiles are interchangeable: take their placements in ascending start only.
            if p.mask & mask or (same and p.start < floor):
                continue
            chosen[order[n]] = p
            if place(n + 1, mask | p.mask, p.start):
                return True
        return False

    if not place(0, 0, -1):
        return None
    return tuple(p for p in chosen if p is not None)


def fits(profiles: Profiles, items: tuple[int, ...]) -> bool:
    """Exact: do instances of these profile indexes all fit on one GPU at legal, disjoint placements?"""
    return arrange(profiles, tuple(sorted(items))) is not None


@cache
def configurations(profiles: Profiles) -> tuple[tuple[int, ...], ...]:
    """Every maximal multiset of profile indexes (sorted) that fits on one GPU: adding any profile
    to it makes it not fit. Any multiset that fits is inside one of them."""
    found: list[tuple[int, ...]] = []

    def grow(items: tuple[int, ...]) -> None:
        start = items[-1] if items else 0
        for i in range(start, len(profiles)):
            bigger = (*items, i)
            if fits(profiles, bigger):
                grow(bigger)
        if not any(fits(profiles, tuple(sorted((*items, i)))) for i in range(len(profiles))):
            found.append(items)

    grow(())
    return tuple(found)


def _need(profiles: Profiles, mem: int | None) -> int:
    """The memory a device asks for on this model (None: the model's largest profile)."""
    return max(p.memory_mb for p in profiles) if mem is None else mem


def _class_key(mem: int | None) -> tuple[int, int]:
    return (1, 0) if mem is None else (0, mem)


# ---- the fleet ----------------------------------------------------------------------------------
@dataclass
class _Group:
    """The fleet's GPUs of one model, with the counts the programs need."""

    profiles: Profiles
    configs: tuple[tuple[int, ...], ...]
    gpus: int = 0
    nodes: list[BNode] = field(default_factory=list)

    def slots(self, config: tuple[int, ...], mem: int | None) -> int:
        """Slots of this configuration whose profile covers `mem`."""
        need = _need(self.profiles, mem)
        return sum(1 for i in config if self.profiles[i].memory_mb >= need)


class Oracle:
    """Judges refusals on a fleet (the bench's `BNode` model; only its shape is read: nodes, their
    GPUs and models). `budget` caps the seconds spent in the program with nodes over the oracle's life;
    `time_limit` caps one solve; `lay_out` first tries the relaxation's solution laid out on the nodes
    (`_greedy`, no solve), which packs most refusals at a fraction of the program's time."""

    def __init__(
        self,
        nodes: Sequence[BNode],
        budget: float = float("inf"),
        time_limit: float = 2.0,
        lay_out: bool = True,
    ):
        self.nodes = list(nodes)
        self.groups: dict[str, _Group] = {}
        for node in self.nodes:
            if len({g.type for g in node.gpus}) != 1:
                raise ValueError(f"node {node.name} mixes GPU models; the oracle expects one per node")
            g0 = node.gpus[0]
            group = self.groups.setdefault(g0.type, _Group(g0.profiles, configurations(g0.profiles)))
            group.gpus += len(node.gpus)
            group.nodes.append(node)
        self.budget, self.time_limit, self.lay_out = budget, time_limit, lay_out
        self.spent = 0.0  # seconds in the program with nodes
        self.spent_total = 0.0  # seconds in judge, the relaxation included
        self.counts: Counter[str] = Counter()  # Judgement.how, over the oracle's life

    def judge(self, running: Mapping[int, Mems], new: Mems, new_key: int = -1) -> Judgement:
        """The verdict for admitting `new` (as pod `new_key`) beside `running` (pod key -> device
        memories), with every running pod free to move."""
        t0 = time.perf_counter()
        out = self._judge({**running, new_key: new})
        self.counts[out.how] += 1
        self.spent_total += time.perf_counter() - t0
        return out

    def _judge(self, pods: dict[int, Mems]) -> Judgement:
        devices = Counter(m for mems in pods.values() for m in mems)
        relaxed = self._relaxation(devices)
        if relaxed is None:
            return Judgement(INFEASIBLE, "relaxation")
        if relaxed and self.lay_out:
            packing = self._greedy(pods, relaxed)
            if packing is not None:
                return Judgement(PACKED, "layout of the relaxation", packing)
        if self.spent >= self.budget:
            return Judgement(NOT_SEARCHED, "budget")
        t0 = time.perf_counter()
        try:
            return self._node_program(pods)
        finally:
            self.spent += time.perf_counter() - t0

    # ---- the node-free relaxation ---------------------------------------------------------------
    def _relaxation(self, devices: Counter[int | None]) -> dict[str, list[tuple[int, ...]]] | None:
        """How many GPUs of each model use each configuration, so that for every memory threshold the
        covering slots are at least the devices asking that much or more. None: proved that none
        exists; else per model the configurations of a solution (empty when the solve hit its limit)."""
        classes = sorted(devices, key=_class_key)
        columns = [(g, c) for g in self.groups.values() for c in g.configs]
        rows, lower, upper = [], [], []
        for group in self.groups.values():  # at most the model's GPUs
            rows.append([1.0 if g is group else 0.0 for g, _ in columns])
            lower.append(0.0)
            upper.append(float(group.gpus))
        for n, mem in enumerate(classes):
            rows.append([float(g.slots(c, mem)) for g, c in columns])
            lower.append(float(sum(devices[m] for m in classes[n:])))
            upper.append(np.inf)
        res = milp(
            np.zeros(len(columns)),
            integrality=np.ones(len(columns)),
            bounds=Bounds(0, np.inf),
            constraints=LinearConstraint(np.array(rows), lower, upper),
            options={"time_limit": self.time_limit},
        )
        # Status 2 is HiGHS proving the program infeasible; anything else (a solution, or a limit) is
        # not a proof.
        if res.status == 2:
            return None
        out: dict[str, list[tuple[int, ...]]] = {}
        if res.x is not None:
            for (group, config), n in zip(columns, res.x, strict=True):
                out.setdefault(group.nodes[0].gpus[0].type, []).extend([config] * round(n))
        return out

    def _greedy(
        self, pods: dict[int, Mems], relaxed: dict[str, list[tuple[int, ...]]]
    ) -> dict[int, list[Pick]] | None:
        """The relaxation's configurations laid onto GPUs (dealt across each model's nodes in turn,
        spare GPUs given the configuration with most slots), multi-device pods first onto the first
        node with covering slots for all their devices, then single devices largest first, each
        onto a free slot covering the fewest memory thresholds. None when a device finds no slot
        (the exact program may still find a packing)."""
        classes = sorted({m for mems in pods.values() for m in mems}, key=_class_key)
        # buckets[node][rank]: free (GPU position, profile index) slots covering exactly the `rank`
        # smallest classes (covering sets are nested, so a slot covers a prefix of `classes`).
        buckets: dict[str, list[list[tuple[int, int]]]] = {}
        for typ, group in self.groups.items():
            configs = sorted(relaxed.get(typ, []), key=lambda c: (-len(c), c))
            spare = max(group.configs, key=len)
            configs += [spare] * (group.gpus - len(configs))
            ranks = [
                sum(1 for m in classes if p.memory_mb >= _need(group.profiles, m)) for p in group.profiles
            ]
            for node in group.nodes:
                buckets[node.name] = [[] for _ in range(len(classes) + 1)]
            dealt = [
                (node, g)
                for g in range(max(len(n.gpus) for n in group.nodes))
                for node in group.nodes
                if g < len(node.gpus)
            ]
            for (node, g), config in zip(dealt, configs, strict=True):
                for i in config:
                    buckets[node.name][ranks[i]].append((g, i))
        rank_of = {m: n + 1 for n, m in enumerate(classes)}  # the least rank that covers m
        used: dict[tuple[str, int], list[tuple[int, int, int]]] = {}  # (node, GPU) -> (profile, pod, device)
        multis = sorted(
            ((k, m) for k, m in pods.items() if len(m) > 1),
            key=lambda km: sorted((_class_key(x) for x in km[1]), reverse=True),
            reverse=True,
        )

        def plan(node: str, needs: list[int]) -> tuple[int, list[int]] | None:
            """The ranks a pod's devices would take on this node (each the least covering one free),
            with the thresholds they waste, or None when the node lacks a slot."""
            free = [len(b) for b in buckets[node]]
            ranks = []
            for need in needs:
                rank = next((r for r in range(need, len(free)) if free[r]), None)
                if rank is None:
                    return None
                free[rank] -= 1
                ranks.append(rank)
            return sum(r - n for r, n in zip(ranks, needs, strict=True)), ranks

        for key, mems in multis:
            order = sorted(range(len(mems)), key=lambda d: _class_key(mems[d]), reverse=True)
            needs = [rank_of[mems[d]] for d in order]
            plans = [(p, n.name) for n in self.nodes if (p := plan(n.name, needs)) is not None]
            if not plans:
                return None
            (_, ranks), name = min(plans, key=lambda pn: pn[0][0])  # the least waste, first node on ties
            for d, rank in zip(order, ranks, strict=True):
                g, i = buckets[name][rank].pop()
                used.setdefault((name, g), []).append((i, key, d))
        singles = sorted(
            ((k, m[0]) for k, m in pods.items() if len(m) == 1), key=lambda km: _class_key(km[1])
        )
        for key, mem in reversed(singles):
            need = rank_of[mem]
            found = None
            for rank in range(need, len(classes) + 1):
                node = next((n for n in self.nodes if buckets[n.name][rank]), None)
                if node is not None:
                    found = (node, buckets[node.name][rank].pop())
                    break
            if found is None:
                return None
            node, (g, i) = found
            used.setdefault((node.name, g), []).append((i, key, 0))
        return self._lay_out(pods, used)

    def _lay_out(
        self, pods: dict[int, Mems], used: dict[tuple[str, int], list[tuple[int, int, int]]]
    ) -> dict[int, list[Pick]]:
        """Placements per GPU by the exact search, as picks per pod in the order of its devices."""
        by_name = {n.name: n for n in self.nodes}
        out: dict[int, list[Pick | None]] = {key: [None] * len(mems) for key, mems in pods.items()}
        for (name, g), items in used.items():
            gpu = by_name[name].gpus[g]
            items.sort()
            places = arrange(gpu.profiles, tuple(i for i, _, _ in items))
            assert places is not None, "a configuration's subset always fits"
            for (i, key, d), place in zip(items, places, strict=True):
                out[key][d] = (gpu, place, gpu.profiles[i])
        return {key: [p for p in picks if p is not None] for key, picks in out.items()}

    # ---- the program with nodes -----------------------------------------------------------------
    def _node_program(self, pods: dict[int, Mems]) -> Judgement:
        singles = Counter(m[0] for m in pods.values() if len(m) == 1)
        multis = Counter(m for m in pods.values() if len(m) > 1)
        classes = sorted({m for mems in pods.values() for m in mems}, key=_class_key)
        cols: list[tuple] = []  # ("y", node, group, config) | ("s", node, mem) | ("z", node, mems)
        for group in self.groups.values():
            for node in group.nodes:
                cols += [("y", node, group, c) for c in group.configs]
                cols += [("s", node, group, m) for m in singles]
                cols += [("z", node, group, t) for t in multis]
        index = {id(c): n for n, c in enumerate(cols)}
        rows: list[dict[int, float]] = []
        lower: list[float] = []
        upper: list[float] = []

        def add(row: dict[int, float], lo: float, hi: float) -> None:
            rows.append(row)
            lower.append(lo)
            upper.append(hi)

        by_node: dict[str, list[tuple]] = {}
        for col in cols:
            by_node.setdefault(col[1].name, []).append(col)
        for node_cols in by_node.values():
            node, group = node_cols[0][1], node_cols[0][2]
            add({index[id(c)]: 1.0 for c in node_cols if c[0] == "y"}, 0.0, float(len(node.gpus)))
            for n, mem in enumerate(classes):
                above = set(classes[n:])
                row: dict[int, float] = {}
                for c in node_cols:
                    if c[0] == "y":
                        row[index[id(c)]] = float(group.slots(c[3], mem))
                    elif c[0] == "s" and c[3] in above:
                        row[index[id(c)]] = -1.0
                    elif c[0] == "z":
                        row[index[id(c)]] = -float(sum(1 for m in c[3] if m in above))
                add(row, 0.0, np.inf)
        for kind, demand in (("s", singles), ("z", multis)):
            for key, count in demand.items():
                add({index[id(c)]: 1.0 for c in cols if c[0] == kind and c[3] == key}, count, count)
        matrix = np.zeros((len(rows), len(cols)))
        for r, row in enumerate(rows):
            for c, v in row.items():
                matrix[r, c] = v
        res = milp(
            np.zeros(len(cols)),
            integrality=np.ones(len(cols)),
            bounds=Bounds(0, np.inf),
            constraints=LinearConstraint(matrix, lower, upper),
            options={"time_limit": self.time_limit},
        )
        if res.status == 2:
            return Judgement(INFEASIBLE, "node program")
        if res.x is None:
            return Judgement(UNKNOWN, "time limit")
        counts = {id(c): round(v) for c, v in zip(cols, res.x, strict=True)}
        return Judgement(PACKED, "node program", self._packing(pods, cols, counts))

    def _packing(
        self, pods: dict[int, Mems], cols: list[tuple], counts: dict[int, int]
    ) -> dict[int, list[Pick]]:
        """The program's solution as picks: per node, configurations onto its GPUs, its pods' devices
        onto slots largest first (smallest covering slot), placements by the exact search per GPU."""
        waiting: dict[Mems, list[int]] = {}
        for key, mems in pods.items():
            waiting.setdefault(mems, []).append(key)
        out: dict[int, list[Pick | None]] = {key: [None] * len(mems) for key, mems in pods.items()}
        for node in self.nodes:
            mine = [c for c in cols if c[1] is node and counts[id(c)]]
            configs = [c[3] for c in mine if c[0] == "y" for _ in range(counts[id(c)])]
            devices: list[tuple[int, int, int | None]] = []  # (pod key, device, memory)
            for c in mine:
                if c[0] == "y":
                    continue
                mems = (c[3],) if c[0] == "s" else c[3]
                for _ in range(counts[id(c)]):
                    key = waiting[mems].pop()
                    devices += [(key, d, m) for d, m in enumerate(mems)]
            self._fill(node, configs, devices, out)
        return {key: [p for p in picks if p is not None] for key, picks in out.items()}

    def _fill(
        self,
        node: BNode,
        configs: list[tuple[int, ...]],
        devices: list[tuple[int, int, int | None]],
        out: dict[int, list[Pick | None]],
    ) -> None:
        profiles = node.gpus[0].profiles
        slots = [(g, i) for g, config in enumerate(configs) for i in config]
        slots.sort(key=lambda s: profiles[s[1]].memory_mb)
        used: dict[int, list[tuple[int, int, int]]] = {}  # GPU position -> (profile index, pod key, device)
        for key, d, mem in sorted(devices, key=lambda d: _class_key(d[2]), reverse=True):
            need = _need(profiles, mem)
            n = next(n for n, (_, i) in enumerate(slots) if profiles[i].memory_mb >= need)
            g, i = slots.pop(n)
            used.setdefault(g, []).append((i, key, d))
        for g, items in used.items():
            items.sort()
            places = arrange(profiles, tuple(i for i, _, _ in items))
            assert places is not None, "a configuration's subset always fits"
            gpu = node.gpus[g]
            for (i, key, d), place in zip(items, places, strict=True):
                out[key][d] = (gpu, place, profiles[i])


def legal_packing(
    nodes: Sequence[BNode], pods: Mapping[int, Mems], packing: Mapping[int, list[Pick]]
) -> list[str]:
    """What is wrong with a packing of these pods on this fleet (empty: nothing). Checked as the bench
    checks a policy's picks: every device placed once (picks in the order of the pod's devices), each
    pod on one node, every profile one its GPU publishes and large enough, every placement legal for
    its profile and disjoint on its GPU."""
    fleet = {id(g) for n in nodes for g in n.gpus}
    wrong: list[str] = []
    if set(packing) != set(pods):
        wrong.append(f"pods packed {sorted(packing)} are not the pods {sorted(pods)}")
    masks: dict[int, int] = {}
    for key, picks in packing.items():
        mems = pods.get(key, ())
        if len(picks) != len(mems):
            wrong.append(f"pod {key}: {len(picks)} picks for {len(mems)} devices")
        if len({gpu.node for gpu, _, _ in picks}) > 1:
            wrong.append(f"pod {key} is split across nodes")
        for (gpu, place, prof), mem in zip(picks, mems, strict=False):
            if id(gpu) not in fleet:
                wrong.append(f"pod {key}: a GPU not in the fleet")
            if prof not in gpu.profiles or place not in prof.placements:
                wrong.append(f"pod {key}: {prof.name} at {place} is not published on {gpu.uuid}")
            if prof.memory_mb < _need(gpu.profiles, mem):
                wrong.append(f"pod {key}: {prof.name} is too small for {mem}")
            if masks.get(id(gpu), 0) & place.mask:
                wrong.append(f"pod {key}: {place} overlaps on {gpu.uuid}")
            masks[id(gpu)] = masks.get(id(gpu), 0) | place.mask
    return wrong
