"""The placement oracle: could the pods running at a refusal, plus the refused one, fit on the fleet if
running instances could be moved?

It answers for one moment (a refusal of the policy being measured) with one of three verdicts:

- `INFEASIBLE`: proved. A cheap necessary condition fails, so no placement policy, even one that may
  move every running instance, could admit the pod: every GPU holds instances whose placement sizes
  sum to at most its axis and whose compute slices sum to at most its largest compute packing; a
  weighted sum of the two, charged to each pod at its cheapest model, must fit the fleet's GPUs
  (see `_proved_infeasible`). One GPU's own packing, node boundaries and multi-device pods are not
  in the bound, so it proves less than is true.
- `PACKED`: a packing was found, i.e. moving instances would have admitted the pod. Tried in order:
  (1) the pod's devices on one node with instances only re-arranged inside their GPUs; (2) as (1),
  after moving some single-device instances of the chosen GPUs elsewhere in the fleet (fewest slices
  first); (3) a full repack of every running pod and the new one, first-fit decreasing (see `_repack`).
- `UNKNOWN`: neither: the heuristic found no packing and no bound proves there is none.
- `NOT_SEARCHED`: the bound and step (1) did not decide and the caller asked for no search (steps
  (2) and (3) cost up to seconds on a full fleet, so the bench searches a bounded sample).

Every "does this multiset of profiles fit on one GPU" question is answered exactly, by a search over
the legal placements of the GPU's published profiles (memoized: at most 8 instances per GPU on
8-slice models, 4 on the 12-slice RTX PRO 6000). A pod's device gets, on each model, its smallest
covering profile (a larger one never packs better: its placements cover a smaller one's).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from itertools import combinations, product

from _baselines import BGpu, BNode

from mig.placement import PublishedProfile

INFEASIBLE, PACKED, UNKNOWN = "proved infeasible", "packing found", "unknown"
NOT_SEARCHED = "not searched"  # the bound and step (1) did not decide; steps (2)-(3) were skipped
VERDICTS = (INFEASIBLE, PACKED, UNKNOWN, NOT_SEARCHED)

Mems = tuple[int | None, ...]


@dataclass(frozen=True)
class Model:
    """What the oracle needs of one GPU model: its profiles with their legal placements."""

    profiles: tuple[PublishedProfile, ...]
    axis: int
    compute: int  # the largest sum of compute slices one GPU can hold

    def profile_for(self, mem: int | None) -> int | None:
        """Index of the smallest covering profile (profiles are in default order), or None."""
        top = max(p.memory_mb for p in self.profiles)
        need = top if mem is None else mem
        return next((i for i, p in enumerate(self.profiles) if p.memory_mb >= need), None)


@cache
def _model(profiles: tuple[PublishedProfile, ...]) -> Model:
    axis = max(p.end for pr in profiles for p in pr.placements)
    return Model(profiles, axis, _max_compute(profiles, 0))


@cache
def _max_compute(profiles: tuple[PublishedProfile, ...], mask: int) -> int:
    """The largest compute-slice sum of non-overlapping legal placements in the free part of `mask`."""
    axis = max(p.end for pr in profiles for p in pr.placements)
    free = ~mask & ((1 << axis) - 1)
    if not free:
        return 0
    low = free & -free
    best = _max_compute(profiles, mask | low)  # leave the lowest free slice empty
    for pr in profiles:
        for p in pr.placements:
            if p.mask & low and not p.mask & mask:
                best = max(best, pr.slice_count + _max_compute(profiles, mask | p.mask))
    return best


@cache
def fits(profiles: tuple[PublishedProfile, ...], items: tuple[int, ...]) -> bool:
    """Exact: do instances of these profile indexes all fit on one GPU at legal, disjoint placements?"""
    model = _model(profiles)
    order = sorted(items, key=lambda i: (-profiles[i].size, i))
    if sum(profiles[i].size for i in order) > model.axis:
        return False
    if sum(profiles[i].slice_count for i in order) > model.compute:
        return False

    def place(n: int, mask: int, floor: int) -> bool:
        if n == len(order):
            return True
        idx = order[n]
        for p in profiles[idx].placements:
            # Equal profiles are interchangeable: take their placements in ascending start only.
            if p.mask & mask or (n and order[n - 1] == idx and p.start < floor):
                continue
            if place(n + 1, mask | p.mask, p.start):
                return True
        return False

    return place(0, 0, -1)


@dataclass
class _Slot:
    """One GPU in the oracle's working copy: its profile set and the pods' devices it holds."""

    gpu: BGpu
    model: Model
    items: list[tuple[int, int]]  # (profile index, pod key)

    def fits_with(self, extra: list[int], drop: frozenset[int] = frozenset()) -> bool:
        if not drop:
            size = sum(self.model.profiles[i].size for i, _ in self.items)
            if size + sum(self.model.profiles[i].size for i in extra) > self.model.axis:
                return False  # the quick answer most full GPUs get
        kept = [i for i, k in self.items if k not in drop] if drop else [i for i, _ in self.items]
        return fits(self.model.profiles, tuple(sorted([*kept, *extra])))

    def share(self) -> float:
        return sum(self.model.profiles[i].size for i, _ in self.items) / self.model.axis


class Oracle:
    """Judges refusals on a fleet (the bench's `BNode` model, whose masks and allocations are live)."""

    def __init__(self, nodes: Sequence[BNode]):
        self.nodes = list(nodes)
        self.gpus = [g for n in self.nodes for g in n.gpus]
        self.models = {g.type: _model(g.profiles) for g in self.gpus}
        self.counts = {"full repacks": 0}
        self._shares: dict[Mems, dict[str, tuple[float, float]]] = {}

    # ---- shares and the bound ------------------------------------------------------------------
    def shares(self, mems: Mems) -> dict[str, tuple[float, float]]:
        """Per model: the pod's (size share, compute share) of one GPU; models it cannot use are absent."""
        hit = self._shares.get(mems)
        if hit is None:
            hit = {}
            for typ, m in self.models.items():
                idx = [m.profile_for(x) for x in mems]
                if None not in idx:
                    size = sum(m.profiles[i].size for i in idx if i is not None) / m.axis
                    comp = sum(m.profiles[i].slice_count for i in idx if i is not None) / m.compute
                    hit[typ] = (size, comp)
            self._shares[mems] = hit
        return hit

    def _proved_infeasible(self, pods: Counter[Mems]) -> bool:
        """A weighted capacity bound, for a small grid of weights (each one is a proof on its own).

        On every GPU of model M the size shares sum to at most 1 and the compute shares too, so for
        any a_M, b_M >= 0 the pods' a_M·size + b_M·compute sum to at most (a_M + b_M) per GPU. Each pod
        costs at least its cheapest such charge over the models it can use; if the charges exceed
        the sum of (a_M + b_M) over the fleet's GPUs, no assignment exists. (The LP relaxation of
        model assignment, dualized; the grid stands in for solving it.)
        """
        types = sorted(self.models)
        gpus = Counter(g.type for g in self.gpus)
        for weights in self._grid(len(types)):
            cap = sum((a + b) * gpus[t] for t, (a, b) in zip(types, weights, strict=True))
            need = 0.0
            for mems, n in pods.items():
                shares = self.shares(mems)
                cost = min(
                    (
                        a * shares[t][0] + b * shares[t][1]
                        for t, (a, b) in zip(types, weights, strict=True)
                        if t in shares
                    ),
                    default=float("inf"),
                )
                need += n * cost
            if need > cap + 1e-9:
                return True
        return False

    @staticmethod
    @cache
    def _grid(n: int) -> tuple[tuple[tuple[float, float], ...], ...]:
        steps = ((1.0, 0.0), (0.0, 1.0), (0.5, 0.5), (1.0, 0.5), (0.5, 1.0), (0.25, 0.0), (0.0, 0.25))
        return tuple(product(steps, repeat=n))

    # ---- the verdict --------------------------------------------------------------------------
    def judge(self, running: dict[int, Mems], new: Mems, search: bool = True) -> str:
        """The verdict for admitting `new` beside `running` (pod key -> device memories), whose devices
        are where the fleet's allocations (keyed by pod key) say they are."""
        if self._proved_infeasible(Counter([*running.values(), new])):
            return INFEASIBLE
        slots = self._slots(running)
        if self._in_place(slots, new):
            return PACKED
        if not search:
            return NOT_SEARCHED
        if self._with_moves(slots, new, running):
            return PACKED
        self.counts["full repacks"] += 1
        if self._repack(running, new):
            return PACKED
        return UNKNOWN

    def _slots(self, running: dict[int, Mems]) -> dict[str, list[_Slot]]:
        """The fleet as it is: per node, each GPU's devices at their smallest covering profile."""
        out = {n.name: [_Slot(g, self.models[g.type], []) for g in n.gpus] for n in self.nodes}
        for node in self.nodes:
            for slot in out[node.name]:
                per_key: dict[int, int] = {}
                for key, _ in slot.gpu.allocs:
                    per_key[key] = per_key.get(key, 0) + 1
                for key, n in per_key.items():
                    # Which of a multi-device pod's memories sits here does not matter in this bench:
                    # every multi-device pod asks the same memory for each device.
                    idx = slot.model.profile_for(running[key][0])
                    assert idx is not None
                    slot.items.extend([(idx, key)] * n)
        return out

    def _assign(self, slots: list[_Slot], new: Mems, drop: dict[int, frozenset[int]] | None = None):
        """Devices of `new` onto GPUs of one node (each GPU checked exactly), or None."""
        devices = sorted(new, key=lambda m: -(m or 1 << 30))
        extra: dict[int, list[int]] = {}

        def go(n: int) -> bool:
            if n == len(devices):
                return True
            for s in sorted(slots, key=lambda s: -s.share()):
                idx = s.model.profile_for(devices[n])
                if idx is None:
                    continue
                trial = [*extra.get(id(s), []), idx]
                if s.fits_with(trial, (drop or {}).get(id(s), frozenset())):
                    extra[id(s)] = trial
                    if go(n + 1):
                        return True
                    extra[id(s)] = trial[:-1]
            return False

        return extra if go(0) else None

    def _in_place(self, slots: dict[str, list[_Slot]], new: Mems) -> bool:
        return any(self._assign(row, new) is not None for row in slots.values())

    def _with_moves(self, slots: dict[str, list[_Slot]], new: Mems, running: dict[int, Mems]) -> bool:
        """Make room on one GPU by moving up to three of its single-device instances elsewhere, as
        they are (fewest slices first, at most two tries per count), for a single-device pod."""
        if len(new) != 1:
            return False
        everywhere = sorted((s for row in slots.values() for s in row), key=lambda s: -s.share())
        for s in everywhere:
            idx = s.model.profile_for(new[0])
            if idx is None:
                continue
            movable = [(i, k) for i, k in s.items if len(running[k]) == 1]
            for r in range(1, min(len(movable), 3) + 1):
                tried = 0
                for gone in sorted(
                    combinations(movable, r), key=lambda c: sum(s.model.profiles[i].size for i, _ in c)
                ):
                    if not s.fits_with([idx], frozenset(k for _, k in gone)):
                        continue
                    if self._rehome([running[k] for _, k in gone], everywhere, s):
                        return True
                    tried += 1
                    if tried >= 2:
                        break
        return False

    def _rehome(self, pods: list[Mems], slots: list[_Slot], avoid: _Slot) -> bool:
        """Place these single-device pods on other GPUs as they are (first with room in `slots`)."""
        added: dict[int, list[int]] = {}
        for mems in sorted(pods, key=lambda m: -(m[0] or 1 << 30)):
            for s in slots:
                if s is avoid:
                    continue
                idx = s.model.profile_for(mems[0])
                if idx is None:
                    continue
                trial = [*added.get(id(s), []), idx]
                if s.fits_with(trial):
                    added[id(s)] = trial
                    break
            else:
                return False
        return True

    def _repack(self, running: dict[int, Mems], new: Mems) -> bool:
        """First-fit decreasing of every pod into empty GPUs: largest first, each single device on the
        model where it takes the smallest share, first GPU there with room (exact check); multi-device
        pods on the first node that takes them all."""
        pods = sorted([*running.values(), new], key=lambda m: -min(s for s, _ in self.shares(m).values()))
        rows = [[_Slot(g, self.models[g.type], []) for g in node.gpus] for node in self.nodes]
        by_type: dict[str, list[_Slot]] = {}
        for row in rows:
            for s in row:
                by_type.setdefault(s.gpu.type, []).append(s)
        used = {id(s): 0 for row in rows for s in row}
        for mems in pods:
            if len(mems) > 1:
                for row in rows:
                    extra = self._assign(row, mems)
                    if extra is not None:
                        for s in row:
                            for i in extra.get(id(s), []):
                                s.items.append((i, -1))
                                used[id(s)] += s.model.profiles[i].size
                        break
                else:
                    return False
                continue
            if not self._first_fit(mems[0], by_type, used):
                return False
        return True

    def _first_fit(self, mem: int | None, by_type: dict[str, list[_Slot]], used: dict[int, int]) -> bool:
        order = sorted(by_type, key=lambda t: self.shares((mem,)).get(t, (9.0, 9.0)))
        for t in order:
            model = self.models[t]
            idx = model.profile_for(mem)
            if idx is None:
                continue
            size = model.profiles[idx].size
            for s in by_type[t]:
                if used[id(s)] + size <= model.axis and s.fits_with([idx]):
                    s.items.append((idx, -1))
                    used[id(s)] += size
                    return True
        return False
