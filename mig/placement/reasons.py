"""Why a pod does not fit: a short code per GPU or node (for metrics) plus text a person can act on."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from operator import itemgetter

from mig.placement.occupancy import ProfileSet, free_slices
from mig.placement.request import Memory, Percent, PodRequest, memory_on

UNHEALTHY = "unhealthy"
CORDONED = "cordoned"
NO_PROFILES = "no-mig-profiles"
EXCLUDED = "excluded-by-annotation"
NOT_ENOUGH_MEMORY = "no-profile-large-enough"
NOT_ENOUGH_SLICES = "not-enough-free-slices"
FRAGMENTED = "fragmented"
DEVICES_DO_NOT_FIT_TOGETHER = "devices-do-not-fit-together"
NO_GPUS = "no-mig-gpus"

MAX_NODE_TEXT = 1024  # one node's line in an extender's FailedNodes
MAX_HEADLINE = 300  # the summary a person reads first (kube-scheduler's condition, `dynmig status`)
HEADLINE_PARTS = 140  # the reason counts' share of it (the rest: kube-scheduler's words, "fits on")
DETAIL_MARK = " Per GPU: "  # separates the summary from the per-GPU detail in every refusal text

# (index, uuid, type, profile set, occupancy mask, healthy, total MiB, cordoned) of one GPU, for refusals
GpuSnapshot = tuple[int, str, str, ProfileSet | None, int, bool, int, str]
_FIRST = itemgetter(0)

# When a node has several GPU reasons, its headline is the one closest to fitting.
_CLOSEST_FIRST = (
    DEVICES_DO_NOT_FIT_TOGETHER,
    FRAGMENTED,
    NOT_ENOUGH_SLICES,
    NOT_ENOUGH_MEMORY,
    EXCLUDED,
    NO_PROFILES,
    CORDONED,
    UNHEALTHY,
    NO_GPUS,
)
_RANK = {code: i for i, code in enumerate(_CLOSEST_FIRST)}


@dataclass(frozen=True)
class Reason:
    """One refusal: `code` is stable and short (a metric label), `message` says what to change."""

    code: str
    message: str
    node: str
    gpu: str | None = None  # GPU UUID, or None for a node-level reason
    profile: str = ""  # the smallest profile the GPU was asked for, when one was sized
    free: tuple[int, ...] | None = None  # the GPU's free memory slices, when they were looked at

    def __str__(self) -> str:
        where = f"{self.node}/{self.gpu}" if self.gpu else self.node
        return f"{where}: {self.message}"


class Refusal:
    """No node can take the whole pod: every reason, per node and per GPU.

    The reasons may be given as a function: the engine hands over a snapshot of the fleet and the
    texts are only built when someone reads them, so refusing stays as cheap as placing.
    """

    fits = False

    def __init__(self, reasons: Iterable[Reason] | Callable[[], Iterable[Reason]], gpus: int = 0):
        self._source = reasons
        self.gpus = gpus  # how many GPUs the candidate nodes publish (for "fits on k of N GPUs")

    @cached_property
    def reasons(self) -> tuple[Reason, ...]:
        src = self._source
        return tuple(src() if callable(src) else src)

    def __repr__(self) -> str:
        return f"Refusal({self.summary()!r})"

    @cached_property
    def _by_node(self) -> dict[str, list[Reason]]:
        out: dict[str, list[Reason]] = {}
        for r in self.reasons:
            out.setdefault(r.node, []).append(r)
        return out

    def by_node(self) -> dict[str, list[Reason]]:
        """Reasons grouped by node, built once (every lookup below is linear in one node's reasons)."""
        return self._by_node

    def node_code(self, node: str) -> str:
        codes = {r.code for r in self._by_node.get(node, ())}
        return next((c for c in _CLOSEST_FIRST if c in codes), NO_GPUS)

    def node_message(self, node: str, limit: int = MAX_NODE_TEXT) -> str:
        """One line per node for an extender's FailedNodes map, at most `limit` characters."""
        parts = [(f"GPU {r.gpu}: {r.message}" if r.gpu else r.message) for r in self._by_node.get(node, ())]
        return bounded_join(parts, limit, "GPUs")

    def counts(self) -> Counter[str]:
        """Nodes per headline code (like kube-scheduler's "3 Insufficient ..." counts)."""
        return Counter(self.node_code(n) for n in self.by_node())

    def summary(self) -> str:
        """`0/N nodes: <headline>` (N: the candidate nodes)."""
        return f"0/{len(self.by_node())} nodes: {self.headline()}"

    def headline(self) -> str:
        """What a person reads first, well under MAX_HEADLINE characters: counts per reason over every
        candidate GPU and node, then how many GPUs could take the pod's device on its own, e.g.
        `8 GPUs fragmented (largest free run 2 slices), 2 GPUs full; 1g.24gb fits on 0 of 10 GPUs`."""
        gpu_codes = Counter(r.code for r in self.reasons if r.gpu)
        node_codes = Counter(r.code for r in self.reasons if not r.gpu)
        parts: list[str] = []
        for code in _CLOSEST_FIRST:
            parts.extend(self._phrases(code, gpu_codes[code], node_codes[code]))
        # room for kube-scheduler's "0/N nodes are available: N " and the extender's prefix around it
        text = bounded_join(parts, HEADLINE_PARTS, "reasons", sep=", ")
        refused = {r.gpu for r in self.reasons if r.gpu}
        if self.gpus:
            names = sorted({r.profile for r in self.reasons if r.profile})
            what = "/".join(names[:3]) + ("/…" if len(names) > 3 else "") if names else "the pod's device"
            fits = f"{what} fits on {max(self.gpus - len(refused), 0)} of {self.gpus} GPUs"
            text = f"{text}; {fits}" if text else fits
        return text

    def _phrases(self, code: str, gpus: int, nodes: int) -> list[str]:
        out = []
        if gpus and code == FRAGMENTED:
            runs = [longest_run(r.free) for r in self.reasons if r.code == code and r.free is not None]
            run = f" (largest free run {_n(max(runs), 'slice')})" if runs else ""
            out.append(f"{_n(gpus, 'GPU')} fragmented{run}")
        elif gpus and code == NOT_ENOUGH_SLICES:
            full = sum(1 for r in self.reasons if r.code == code and r.free == ())
            if full:
                out.append(f"{_n(full, 'GPU')} full")
            if gpus - full:
                out.append(f"{_n(gpus - full, 'GPU')} with too few free slices")
        elif gpus:
            out.append(f"{_n(gpus, 'GPU')} {_GPU_PHRASE.get(code, code)}")
        if nodes:
            out.append(f"{_n(nodes, 'node')} {_NODE_PHRASE.get(code, code)}")
        return out

    def detail(self, limit: int = MAX_NODE_TEXT, extra: Iterable[str] = ()) -> str:
        """Every reason as `node/GPU: message`, those closest to fitting first (a GPU excluded by the
        pod's own annotations says the least); GPUs of one node with the same message share a line
        (`node/GPU-… and 7 more GPUs: message`); cut before `limit` with "and N more"."""
        ranked = sorted(self.reasons, key=lambda r: _RANK.get(r.code, len(_RANK)))
        groups: dict[tuple[str, str, bool], list[Reason]] = {}
        for r in ranked:
            groups.setdefault((r.node, r.message, r.gpu is None), []).append(r)
        lines = [_group_line(group) for group in groups.values()]
        return bounded_join([*lines, *extra], limit, "reasons")

    def text(self, limit: int = MAX_NODE_TEXT, extra: Iterable[str] = (), head: str = "") -> str:
        """`head` (default: the summary), DETAIL_MARK, the per-GPU detail: at most `limit` characters."""
        head = head or self.summary()
        room = max(limit - len(head) - len(DETAIL_MARK) - 1, 40)
        return f"{head}.{DETAIL_MARK}{self.detail(room, extra)}"


_GPU_PHRASE = {
    NOT_ENOUGH_MEMORY: "without a profile large enough",
    EXCLUDED: "excluded by the pod's annotations",
    NO_PROFILES: "without allowlisted MIG profiles",
    CORDONED: "cordoned",
    UNHEALTHY: "unhealthy",
}
_NODE_PHRASE = {
    DEVICES_DO_NOT_FIT_TOGETHER: "cannot hold all the pod's devices at once",
    NO_GPUS: "without MIG GPUs",
}


def _group_line(group: list[Reason]) -> str:
    first = group[0]
    if len(group) == 1 or first.gpu is None:
        return str(first)
    return f"{first.node}/{first.gpu} and {_n(len(group) - 1, 'more GPU')}: {first.message}"


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def longest_run(slices: Iterable[int]) -> int:
    """The longest run of consecutive slice indices (0 for none)."""
    best = run = 0
    last: int | None = None
    for s in sorted(slices):
        run = run + 1 if last is not None and s == last + 1 else 1
        best, last = max(best, run), s
    return best


def bounded_join(parts: list[str], limit: int, what: str, sep: str = "; ") -> str:
    """`parts` joined by `sep`, cut before `limit` characters with "and N more <what>" (linear)."""
    out: list[str] = []
    size = 0
    for i, part in enumerate(parts):
        if size + len(part) + len(sep) > limit and out:
            out.append(f"and {len(parts) - i} more {what}")
            break
        out.append(part if len(part) <= limit else part[:limit] + "…")
        size += len(part) + len(sep)
    return sep.join(out)


def slices_text(slices: list[int]) -> str:
    return ",".join(str(s) for s in slices) if slices else "none"


def placements_text(placements: Iterable[object]) -> str:
    return ",".join(str(p) for p in placements)


# ---------------------------------------------------------------- the engine's refusals


def refusal(
    pod: PodRequest,
    nodes: dict[str, tuple[GpuSnapshot, ...]],
    gpus: int,
    asks: list[Memory],
    lead: Memory,
    tried: set[str],
) -> Refusal:
    """Why no node of `nodes` (each with its GPUs, a snapshot never mutated) takes the pod whose
    devices ask `asks` (its pickiest one `lead`); `tried`: the nodes where the lead fit but the pod's
    devices did not all fit together. The texts are built on first read (sorting by node waits for
    them too: a scheduler often needs only the count)."""

    def build() -> list[Reason]:
        out: list[Reason] = []
        for node, snapshots in sorted(nodes.items(), key=_FIRST):
            if not snapshots:
                out.append(Reason(NO_GPUS, "node publishes no MIG GPUs", node))
                continue
            for _, uuid, gtype, pset, mask, healthy, total, cordoned in snapshots:
                reason = gpu_reason(pod, node, uuid, gtype, pset, mask, healthy, lead, total, cordoned)
                if reason is not None:
                    out.append(reason)
            if node in tried:
                out.append(_not_together(node, snapshots, asks))
        return out

    return Refusal(build, gpus=gpus)


def _not_together(node: str, snapshots: tuple[GpuSnapshot, ...], asks: list[Memory]) -> Reason:
    free = "; ".join(
        f"{uuid} {slices_text(free_slices(mask, pset.axis))}"
        for _, uuid, _, pset, mask, healthy, _, cordoned in snapshots
        if healthy and not cordoned and pset
    )
    return Reason(
        DEVICES_DO_NOT_FIT_TOGETHER,
        f"the pod's {len(asks)} MIG devices ({_requests_text(asks)}) do not all fit "
        f"on this node together; free slices: {free}",
        node,
    )


def _requests_text(asks: list[Memory]) -> str:
    return ", ".join(
        "a whole GPU" if m is None else (str(m) if isinstance(m, Percent) else f"{m} MiB") for m in asks
    )


def gpu_reason(
    pod: PodRequest,
    node: str,
    uuid: str,
    gpu_type: str,
    pset: ProfileSet | None,
    mask: int,
    healthy: bool,
    ask: Memory,
    total_mb: int = 0,
    cordoned: str = "",
) -> Reason | None:
    """Why this GPU (of `total_mb` published memory) cannot take a device asking `ask` now, or None if it can."""
    if not healthy:
        return Reason(UNHEALTHY, "GPU is unhealthy", node, uuid)
    if cordoned:
        return Reason(CORDONED, cordoned, node, uuid)
    if pset is None or not pset.profiles:
        return Reason(
            NO_PROFILES,
            f"GPU ({gpu_type}) publishes no MIG profiles (is its model in the allowlist?)",
            node,
            uuid,
        )
    why = pod.type_exclusion(gpu_type) or pod.uuid_exclusion(uuid)
    if why:
        return Reason(EXCLUDED, f"excluded by annotation: {why}", node, uuid)
    if isinstance(ask, Percent) and total_mb <= 0:
        return Reason(
            NOT_ENOUGH_MEMORY,
            f"GPU publishes no total memory (devmem), so {ask} cannot be sized on it",
            node,
            uuid,
        )
    mem = memory_on(ask, total_mb)
    order = pset.order(mem, pod.preference)
    if not order:
        largest = pset.profiles[-1]
        asked = f"{mem} MiB ({ask} of {total_mb} MiB)" if isinstance(ask, Percent) else f"{mem} MiB"
        return Reason(
            NOT_ENOUGH_MEMORY,
            f"no allowlisted profile has {asked}; the largest is {largest.name} with {largest.memory_mb} MiB",
            node,
            uuid,
        )
    if any(pset.best(mask, idx) for _, idx in order):
        return None
    smallest = pset.profiles[min(idx for _, idx in order)]
    free = free_slices(mask, pset.axis)
    usable = [s for s in free if any(p.start <= s < p.end for p in smallest.placements)]
    needs = placements_text(sorted(smallest.placements))
    if len(usable) >= smallest.size:
        return Reason(
            FRAGMENTED,
            f"fragmented: free slices {slices_text(free)} but {smallest.name} needs one of {needs}",
            node,
            uuid,
            smallest.name,
            tuple(free),
        )
    return Reason(
        NOT_ENOUGH_SLICES,
        f"not enough free slices: free {slices_text(free)}, "
        f"{smallest.name} needs {smallest.size} at one of {needs}",
        node,
        uuid,
        smallest.name,
        tuple(free),
    )
