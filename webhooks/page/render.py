"""The page as HTML: the shell, and the live fragment drawn from the slice map (`mig.slicemap`).

Every string that comes from the cluster (node, pod, namespace, profile, GPU UUID and type, reasons)
is hostile input: it goes through `_text` (escaped for text and for quoted attributes alike, and
cut to a bounded length) and nowhere else. Each GPU is one inline SVG: its memory slices left to
right, each instance a labelled segment (profile, pod, phase) and each free slice drawn as free.
Instances that overlap (a record the scheduler distrusts) go on separate lanes, so none hides another.
An idle instance (kept by the device plugin for a matching pod) is drawn as its own segment over the
slices it keeps, which stay free for any pod: its tooltip says so, and the legend in the page's
header names every phase.
"""

from __future__ import annotations

import html
import time
from collections.abc import Iterable, Mapping, Sequence

from mig.slicemap import IDLE_MEANING, IDLE_PHASE, PHASES, FleetMap, GpuMap, NodeMap, PendingPod, Segment

TITLE = "dynmig: MIG slices"
MAX_TEXT = 300  # characters of any one cluster string shown (a Kubernetes name is at most 253)
MAX_PENDING = 100  # pending pods listed; the rest are counted
SLICE_W = 64  # SVG units per memory slice
LANE_H = 48  # SVG units per lane of segments
AXIS_H = 14  # the slice numbers under the lanes
CHAR_W = 6.1  # about one character of the label font (page.css), to cut labels to their segment
MEANINGS = {  # the legend: each phase in a few words
    "reserved": "reserved, no instance yet",
    "realized": "instance created",
    "reclaiming": "being destroyed",
    "leftover": "no pod owns it",
    IDLE_PHASE: IDLE_MEANING,
}


def _text(value: object, limit: int = MAX_TEXT) -> str:
    """Escaped for HTML text and quoted attributes, at most `limit` characters of the original."""
    s = str(value)
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    return html.escape(s, quote=True)


def _fits(label: str, fits: Mapping[str, int], profiles: Sequence[str] = ()) -> str:
    """'fits now: 1g.10gb ×3 · 2g.20gb ×1' in the profiles' order (smallest first where known)."""
    names = [p for p in profiles if p in fits] + sorted(p for p in fits if p not in profiles)
    if not names:
        return f'<p class="fits">{_text(label)}: nothing</p>'
    items = "".join(
        f'<span class="fit" data-profile="{_text(n)}" data-count="{int(fits[n])}">'
        f"{_text(n)} ×{int(fits[n])}</span>"
        for n in names
    )
    return f'<p class="fits">{_text(label)}: {items}</p>'


# ---------------------------------------------------------------- one GPU as SVG


def _lanes(segments: Sequence[Segment]) -> list[tuple[int, Segment]]:
    """(lane, segment): each segment on the first lane where it overlaps nothing already there."""
    ends: list[list[tuple[int, int]]] = []
    placed = []
    for s in sorted(segments, key=lambda s: (s.placement.start, -s.placement.size)):
        start, end = s.placement.start, s.placement.start + s.placement.size
        lane = next(
            (i for i, spans in enumerate(ends) if all(end <= a or start >= b for a, b in spans)), len(ends)
        )
        if lane == len(ends):
            ends.append([])
        ends[lane].append((start, end))
        placed.append((lane, s))
    return placed


def _label(text: str, width: float) -> str:
    room = max(1, int((width - 10) / CHAR_W))
    return text if len(text) <= room else text[: max(1, room - 1)] + "…"


def _since(seconds: int | None) -> str:
    if seconds is None:
        return "?"
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))
    except (OverflowError, OSError, ValueError):
        return "?"


def _title(s: Segment, where: str) -> str:
    if s.phase == IDLE_PHASE:
        return f"idle {s.profile} at slices {where} since {_since(s.idle_since)}: {IDLE_MEANING}"
    who = s.pod or ("no pod (left over)" if s.phase == "leftover" else "no pod")
    return f"{who}: {s.profile} at slices {where}, {s.phase}" + (f", {s.mig_uuid}" if s.mig_uuid else "")


def _segment(lane: int, s: Segment) -> str:
    x, w = s.placement.start * SLICE_W + 1, max(s.placement.size * SLICE_W - 2, 1)
    y = lane * LANE_H + 1
    where = f"{s.placement.start}:{s.placement.size}"
    title = _title(s, where)
    pod = s.name or ("free" if s.phase == IDLE_PHASE else "—")
    return (
        f'<g class="segment phase-{_text(s.phase)}" data-pod="{_text(s.pod)}" '
        f'data-profile="{_text(s.profile)}" data-phase="{_text(s.phase)}" data-placement="{where}">'
        f"<title>{_text(title, 2 * MAX_TEXT)}</title>"
        f'<rect x="{x}" y="{y}" width="{w}" height="{LANE_H - 2}" rx="4"></rect>'
        f'<text class="profile" x="{x + 5}" y="{y + 13}">{_text(_label(s.profile, w))}</text>'
        f'<text class="pod" x="{x + 5}" y="{y + 27}">{_text(_label(pod, w))}</text>'
        f'<text class="phase" x="{x + 5}" y="{y + 41}">{_text(_label(s.phase, w))}</text>'
        "</g>"
    )


def _free(slice_: int, lanes: int) -> str:
    x = slice_ * SLICE_W + 1
    return (
        f'<g class="free" data-slice="{slice_}"><title>slice {slice_} is free</title>'
        f'<rect x="{x}" y="1" width="{SLICE_W - 2}" height="{lanes * LANE_H - 2}" rx="4"></rect>'
        f'<text x="{x + 5}" y="14">free</text></g>'
    )


def gpu_svg(g: GpuMap) -> str:
    """The GPU's slice axis as inline SVG (no script, no external reference)."""
    placed = _lanes(g.segments)
    lanes = max([lane + 1 for lane, _ in placed] or [1])
    width, height = max(g.slices, 1) * SLICE_W, lanes * LANE_H + AXIS_H
    kept = 0  # slices an idle instance keeps: free, but drawn as that instance
    for s in g.segments:
        if s.phase == IDLE_PHASE:
            kept |= s.placement.mask
    free = "".join(_free(i, lanes) for i in g.free if 0 <= i < g.slices and not kept >> i & 1)
    ticks = "".join(
        f'<text class="tick" x="{i * SLICE_W + SLICE_W / 2:g}" y="{height - 3}">{i}</text>'
        for i in range(g.slices)
    )
    idle = sum(1 for s in g.segments if s.phase == IDLE_PHASE)
    label = f"GPU {g.index}: {g.slices} slices, {len(g.segments)} instances, {len(g.free)} slices free" + (
        f" ({idle} idle instances on them)" if idle else ""
    )
    return (
        f'<svg class="slices" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-label="{_text(label)}" xmlns="http://www.w3.org/2000/svg">'
        f"{free}{''.join(_segment(lane, s) for lane, s in placed)}{ticks}</svg>"
    )


def _gpu(g: GpuMap) -> str:
    head = (
        f'<h3>GPU {int(g.index)} <span class="type">{_text(g.type)}</span> '
        f'<span class="uuid">{_text(g.uuid)}</span></h3>'
    )
    closed = f'<p class="closed">no new pods: {_text(g.closed)}</p>' if g.closed else ""
    fits = "" if g.closed else _fits("fits now", g.fits, g.profiles)
    return f'<div class="gpu" data-gpu="{_text(g.uuid)}">{head}{gpu_svg(g)}{closed}{fits}</div>'


def node_section(n: NodeMap) -> str:
    """One node: what still fits on it, then each GPU's slice map (or why the node is unreadable)."""
    profiles = next((g.profiles for g in n.gpus if g.profiles), ())
    idle = (
        f'<p class="closed idle-unreadable">idle instances {_text(n.idle_unreadable)}</p>'
        if n.idle_unreadable and not n.unreadable
        else ""
    )
    body = (
        f'<p class="closed">{_text(n.unreadable)}</p>'
        if n.unreadable
        else "".join(_gpu(g) for g in n.gpus) or '<p class="empty">no MIG GPU</p>'
    )
    fits = "" if n.unreadable else _fits("node fits now", n.fits, profiles)
    dra = (
        f' <span class="allocator">DRA ({_text(n.allocator[4:])})</span>'
        if n.allocator.startswith("dra:")
        else ""
    )
    return (
        f'<section class="node" data-node="{_text(n.name)}"><h2>{_text(n.name)}{dra}</h2>{fits}{idle}'
        f'<div class="gpus">{body}</div></section>'
    )


# ---------------------------------------------------------------- pending pods


def _pending_row(p: PendingPod) -> str:
    fix = p.fix + (f" ({p.advice})" if p.advice else "")
    return (
        f'<tr class="pending-pod" data-pod="{_text(p.namespace)}/{_text(p.name)}" data-code="{_text(p.code)}">'
        f'<td>{_text(p.namespace)}/{_text(p.name)}</td><td class="asks">{_text(p.asks)}</td>'
        f'<td class="reason">{_text(p.reason)}</td><td class="fix">{_text(fix)}</td></tr>'
    )


def _pending(pods: Sequence[PendingPod]) -> str:
    if not pods:
        return '<section class="pending"><h2>Pending MIG pods</h2><p class="empty">none</p></section>'
    rows = "".join(_pending_row(p) for p in pods[:MAX_PENDING])
    more = len(pods) - MAX_PENDING
    tail = f'<p class="more">and {more} more</p>' if more > 0 else ""
    return (
        f'<section class="pending"><h2>Pending MIG pods ({len(pods)})</h2><table><thead><tr>'
        "<th>pod</th><th>asks</th><th>reason</th><th>fix</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>{tail}</section>"
    )


def _unreadable(pods: Iterable[tuple[str, str]]) -> str:
    items = "".join(f"<li>{_text(pod)}: {_text(why)}</li>" for pod, why in list(pods)[:MAX_PENDING])
    return f'<section class="unreadable"><h2>Pods with unreadable reservations</h2><ul>{items}</ul></section>'


# ---------------------------------------------------------------- the page


def fragment(fleet: FleetMap, note: str = "") -> str:
    """The live part of the page: what fits in the fleet, the pending pods, then each node's GPUs."""
    return compose(fleet, [node_section(n) for n in fleet.nodes], note)


def compose(fleet: FleetMap, sections: Sequence[str], note: str = "") -> str:
    """`fragment` with the nodes' sections already drawn (`node_section` of each of `fleet.nodes`)."""
    profiles = next((g.profiles for n in fleet.nodes for g in n.gpus if g.profiles), ())
    parts = [f'<p class="note">{_text(note)}</p>' if note else ""]
    parts.append(f'<section class="summary">{_fits("fleet fits now", fleet.fits, profiles)}</section>')
    parts.append(_pending(fleet.pending))
    if fleet.unreadable_pods:
        parts.append(_unreadable(fleet.unreadable_pods))
    parts.extend(sections)
    if not fleet.nodes:
        parts.append('<p class="empty">no node publishes MIG GPUs yet</p>')
    return "".join(parts)


def _swatch(classes: str, phase: str, words: str) -> str:
    return (
        f'<span class="legend-item {classes}" data-phase="{phase}"><svg class="swatch" viewBox="0 0 14 14" '
        'width="14" height="14" aria-hidden="true"><rect x="1" y="1" width="12" height="12" rx="2"></rect>'
        f'</svg><span class="legend-name">{phase}</span> {_text(words)}</span>'
    )


def legend() -> str:
    """Every phase's swatch (the colours of page.css) and its meaning, then the free slice's."""
    items = "".join(_swatch(f"phase-{p}", p, MEANINGS.get(p, "")) for p in PHASES)
    return f'<p class="legend" aria-label="legend">{items}{_swatch("legend-free", "free", "no instance")}</p>'


def page(fragment_html: str) -> str:
    """The whole document around a fragment; `page.js` then replaces #fleet with each new one."""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<title>{TITLE}</title><link rel="stylesheet" href="page.css"></head><body>'
        f'<header><h1>{TITLE}</h1><p id="live" data-state="down">connecting…</p></header>'
        f"{legend()}"
        f'<main id="fleet">{fragment_html}</main>'
        "<footer>read-only view of dynmig serve's scheduler cache; phases: reserved (no instance yet), "
        "realized (instance created), reclaiming (being destroyed), leftover (no pod owns it), idle "
        f"(kept by the device plugin: {IDLE_MEANING})</footer>"
        '<script src="page.js" defer></script></body></html>'
    )
