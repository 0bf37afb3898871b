"""An online estimate of the demand mix, and the weights that price what a placement puts at risk.

The extender sees every pod the filter is asked about. `DemandEstimate` keeps, per pool (any name the
caller chooses: a node pool, or "" for the whole fleet), the last `window` arrivals (when, and the
memory each device asked for: MiB, or None for a whole GPU) and the last `window` lifetimes seen per
request, so it follows a change of mix within one window and its memory stays bounded. `mix(pool)`
is the offered work per request: arrival rate over the window times its mean lifetime (Little's law:
the instances of that size running on average). Until a lifetime of a request is seen, its lifetime
is the estimate over those seen for any request, or 1.

A request's lifetime is estimated from its window of ended lifetimes by one of `LIFETIMES`
(`DemandEstimate(lifetime=...)`): "mean" (the arithmetic mean), "trimmed" (the mean without the
longest and shortest `TRIM` of them), "median", or "decayed" (each lifetime weighted by
`DECAY` to the power of how many ended after it). Real traces have heavy-tailed lifetimes (one public
trace: median 9 minutes, mean 7.5 hours), where one pod that lived for weeks moves a window's mean
by hours when it ends; which estimate the engine uses is measured in docs/packing.md ("Real traces").

Feeding it from the extender (webhooks/fleet.py): `arrived(pool, asks, now)` once per pod the filter
decides (placed or refused: a refused whole-GPU job is exactly the demand that must be weighed), with
the pod's device asks as `PodRequest.devices()` gives them; `ended(pool, asks, lifetime)` when a pod
holding a reservation goes (lifetime: seconds from its reservation to its release); then
`PlacementIndex.set_demand(estimate.mix(pool))` before the next decision when `estimate.version`
changed.

Pods asking for N ≥ 2 whole GPUs need them on one node: `node_mix(pool)` is their offered work per
N, and `node_prices` turns it into the price of one node slot for N (a node with e empty GPUs holds
e // N of them), so taking an empty GPU of a node whose empty GPUs are a multiple of N costs that
price (`node_risk`; the engine adds it to the price of the slots a placement destroys), and small
requests keep nodes whole while such pods arrive.

`risk_weights` turns a mix into the per-profile price the engine charges for destroying one free slot
of a profile on a GPU model (`mig.placement.plan` ranks by it first): the work offered to that profile
on that model over the slots of it still free fleet-wide. A slot of a profile nobody asks for is free
to destroy; the last empty GPU is dear when whole-GPU jobs arrive. With no estimate every published
profile is priced as if it were offered one unit of work (`PRIOR`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence

from mig.placement.request import Memory, Percent

Ask = int | None  # a device's memory ask (MiB), None for a whole GPU
Mix = tuple[tuple[Ask, float], ...]  # (ask, offered work: instances running on average)
# (N whole GPUs on one node, offered work: N × such pods running on average)
NodeMix = tuple[tuple[int, float], ...]
WINDOW = 2000
SCALE = 1 << 20  # weights are integers: the price of one slot, in 1/SCALE of a unit of work
PRIOR: Mix = ()  # no estimate: every published profile is offered one unit
TRIM = 0.1  # "trimmed": the share of lifetimes left out at each end
DECAY = 0.99  # "decayed": the weight of a lifetime falls by this per later one


def _mean(lives: Sequence[float]) -> float:
    return sum(lives) / len(lives)


def _trimmed(lives: Sequence[float]) -> float:
    ordered = sorted(lives)
    cut = int(len(ordered) * TRIM)
    return _mean(ordered[cut : len(ordered) - cut])


def _median(lives: Sequence[float]) -> float:
    ordered = sorted(lives)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _decayed(lives: Sequence[float]) -> float:
    total = weight = 0.0
    w = 1.0
    for life in reversed(lives):  # the last ended first, at weight 1
        total += w * life
        weight += w
        w *= DECAY
    return total / weight


LIFETIMES: dict[str, Callable[[Sequence[float]], float]] = {
    "mean": _mean,
    "trimmed": _trimmed,
    "median": _median,
    "decayed": _decayed,
}


class DemandEstimate:
    """Arrival rates and lifetimes per request over a sliding window, per pool (see the module)."""

    def __init__(self, window: int = WINDOW, lifetime: str = "mean"):
        if lifetime not in LIFETIMES:
            raise ValueError(f"lifetime: {lifetime[:40]!r} is not one of {', '.join(LIFETIMES)}")
        self.window = window
        self._life = LIFETIMES[lifetime]
        self._arrivals: dict[str, deque[tuple[float, Ask]]] = {}
        self._lives: dict[str, dict[Ask, deque[float]]] = {}
        # pods asking for N ≥ 2 whole GPUs (one node's): their arrivals and lifetimes per N
        self._node_arrivals: dict[str, deque[tuple[float, int]]] = {}
        self._node_lives: dict[str, dict[int, deque[float]]] = {}
        self.version = 0

    @staticmethod
    def _asks(asks: Iterable[Memory]) -> list[Ask]:
        # a share of GPU memory is sized per GPU; counted as a whole-GPU-independent ask it would
        # need a model, so it is left out of the mix
        return [a for a in asks if not isinstance(a, Percent)]

    @staticmethod
    def _whole_gpus(asks: list[Ask]) -> int:
        """N when the pod asks for N ≥ 2 whole GPUs and nothing else (they must share one node), else 0."""
        return len(asks) if len(asks) >= 2 and all(a is None for a in asks) else 0

    def arrived(self, pool: str, asks: Iterable[Memory], at: float) -> None:
        q = self._arrivals.setdefault(pool, deque(maxlen=self.window))
        mine = self._asks(asks)
        for ask in mine:
            q.append((at, ask))
        n = self._whole_gpus(mine)
        if n:
            self._node_arrivals.setdefault(pool, deque(maxlen=self.window)).append((at, n))
        self.version += 1

    def ended(self, pool: str, asks: Iterable[Memory], lifetime: float) -> None:
        lives = self._lives.setdefault(pool, {})
        mine = self._asks(asks)
        for ask in mine:
            lives.setdefault(ask, deque(maxlen=self.window)).append(max(0.0, lifetime))
        n = self._whole_gpus(mine)
        if n:
            per = self._node_lives.setdefault(pool, {})
            per.setdefault(n, deque(maxlen=self.window)).append(max(0.0, lifetime))
        self.version += 1

    def node_mix(self, pool: str = "") -> NodeMix:
        """(N, offered work) per N of the pods asking for N ≥ 2 whole GPUs that arrived within the
        window of `mix` (N × their arrival rate × their lifetime; before one of them has ended, the
        lifetime of whole-GPU asks), largest work first (ties: larger N)."""
        q = self._arrivals.get(pool)
        nodes = self._node_arrivals.get(pool)
        if not q or not nodes or len(q) < 2 or q[-1][0] <= q[0][0]:
            return ()
        start, span = q[0][0], q[-1][0] - q[0][0]
        counts: dict[int, int] = {}
        for at, n in nodes:
            if at >= start:
                counts[n] = counts.get(n, 0) + 1
        lives = self._node_lives.get(pool, {})
        whole = self._lives.get(pool, {}).get(None)
        fallback = self._life(whole) if whole else 1.0
        out = []
        for n, k in counts.items():
            d = lives.get(n)
            out.append((n, n * k / span * (self._life(d) if d else fallback)))
        return tuple(sorted(out, key=lambda e: (-e[1], -e[0])))

    def mix(self, pool: str = "") -> Mix:
        """(ask, offered work) per ask seen in the window, largest work first (ties: by ask)."""
        q = self._arrivals.get(pool)
        if not q or len(q) < 2 or q[-1][0] <= q[0][0]:
            return PRIOR
        span = q[-1][0] - q[0][0]
        counts: dict[Ask, int] = {}
        for _, ask in q:
            counts[ask] = counts.get(ask, 0) + 1
        lives = self._lives.get(pool, {})
        seen = [t for d in lives.values() for t in d]
        default = self._life(seen) if seen else 1.0
        out = []
        for ask, n in counts.items():
            d = lives.get(ask)
            life = self._life(d) if d else default
            out.append((ask, n / span * life))
        return tuple(sorted(out, key=lambda e: (-e[1], -1 if e[0] is None else e[0])))


def _quantize(x: float) -> int:
    """A positive price rounded to a power of 2^(1/4) (so equal mixes give equal, memoizable weights)."""
    if x <= 0:
        return 0
    return max(1, round(2 ** (round(4 * math.log2(x)) / 4)))


def node_prices(mix: NodeMix, empties: Mapping[int, int]) -> dict[int, int]:
    """Per N of `mix`: the price of destroying one node slot for N whole GPUs, its offered work over
    the slots fleet-wide (`empties`: number of nodes per count of empty GPUs; a node of e empty GPUs
    holds e // N such slots), scaled by SCALE and quantized as `risk_weights`."""
    out = {}
    for n, work in mix:
        slots = sum(count * (e // n) for e, count in empties.items())
        price = _quantize(SCALE * work / max(1, slots))
        if price:
            out[n] = price
    return out


def node_risk(prices: Mapping[int, int], empty: int) -> int:
    """What taking one empty GPU of a node with `empty` empty GPUs costs in node slots: for each N
    priced, one slot for N GPUs is lost when `empty` is a multiple of N (e // N drops by one)."""
    return sum(p for n, p in prices.items() if empty >= n and empty % n == 0)


def risk_weights(
    names: Sequence[str],
    offered: Sequence[float],
    slots: Mapping[str, int],
) -> tuple[int, ...]:
    """Per profile (in `names` order): the price of destroying one free slot of it, `offered[k]`
    (its work, in its slices' share of the GPU times instances running) over the free slots of it on
    its model fleet-wide (`slots`, at least 1), scaled by SCALE and quantized."""
    return tuple(_quantize(SCALE * w / max(1, slots.get(n, 0))) for n, w in zip(names, offered, strict=True))
