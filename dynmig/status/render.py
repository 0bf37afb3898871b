"""Draw the slice map as text: one bar per GPU (a cell per memory slice), labelled segments, free
slices numbered, what still fits, and the pending MIG pods with their reason and fix.

Pure: a `FleetMap` in, a string out. Colour is ANSI SGR, used only when asked (`color=True`); every
text that comes from the cluster is stripped of control characters first, so an annotation cannot
move the cursor or recolour the terminal.
"""

from __future__ import annotations

import time
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mig.slicemap import (
    IDLE_MEANING,
    IDLE_PHASE,
    LEFTOVER,
    REALIZED,
    RECLAIMING_PHASE,
    RESERVED,
    FleetMap,
    GpuMap,
    NodeMap,
    Segment,
)

FILL = {REALIZED: "#", RESERVED: "=", RECLAIMING_PHASE: "~", LEFTOVER: "!", IDLE_PHASE: "-"}
COLOUR = {
    REALIZED: "42;30",
    RESERVED: "43;30",
    RECLAIMING_PHASE: "45;30",
    LEFTOVER: "41;97",
    IDLE_PHASE: "46;30",
}
MEANING = {IDLE_PHASE: f"({IDLE_MEANING})"}  # said in the legend after the phase's name
FREE_COLOUR, WARN_COLOUR, BOLD, DIM = "2", "31", "1", "2"
MAX_TEXT = 253  # longest name Kubernetes allows; longer cluster text is cut
MIN_CELL, MAX_CELL = 3, 12


@dataclass(frozen=True)
class Style:
    color: bool = False
    wide: bool = False
    width: int = 100

    def paint(self, text: str, sgr: str) -> str:
        return f"\x1b[{sgr}m{text}\x1b[0m" if self.color and text else text


def clean(text: object, limit: int = MAX_TEXT) -> str:
    """Cluster text made safe to print: control and format characters become '?', long text is cut."""
    out = "".join("?" if unicodedata.category(ch)[0] == "C" else ch for ch in str(text)[: limit + 1])
    return out if len(out) <= limit else out[: limit - 1] + "…"


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else (text[: width - 1] + "…" if width > 1 else text[:width])


def legend(style: Style) -> str:
    marks = [
        (style.paint(f"{FILL[p]} {p}", COLOUR[p]) if style.color else f"{FILL[p]} {p}")
        + (f" {MEANING[p]}" if p in MEANING else "")
        for p in FILL
    ]
    return "slices: " + "  ".join([*marks, "..N.. free slice N"])


def since_text(seconds: int | None) -> str:
    """Unix seconds as an ISO time in UTC ("?" when absent)."""
    if seconds is None:
        return "?"
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
    except (OverflowError, OSError, ValueError):
        return "?"


def _who(s: Segment) -> str:
    if s.phase == IDLE_PHASE:
        return f"(no pod: {IDLE_MEANING}; idle since {since_text(s.idle_since)})"
    return clean(s.pod) or "(no pod)"


# ---------------------------------------------------------------- one GPU


def _cell_width(g: GpuMap, style: Style) -> int:
    room = max(style.width - 6, 1)
    return max(MIN_CELL, min(MAX_CELL, room // max(g.slices, 1)))


def _segment_text(s: Segment, width: int, style: Style) -> str:
    inner = max(width - 2, 0)
    label = clean(s.profile) + (f" {clean(s.pod)}" if s.pod else " idle" if s.phase == IDLE_PHASE else "")
    mark = "" if style.color else FILL[s.phase]  # without colour the phase shows as its mark
    body = _fit(mark + label, inner).ljust(inner, mark or " ")
    text = "[" + body + "]" if width >= 2 else FILL[s.phase] * width
    return style.paint(text, COLOUR[s.phase])


def bar(g: GpuMap, style: Style) -> str:
    """The GPU's slices left to right: segments as labelled blocks, free slices as ..N.."""
    cw = _cell_width(g, style)
    parts: list[str] = []
    by_start = {s.placement.start: s for s in g.segments if 0 <= s.placement.start < g.slices}
    i = 0
    while i < g.slices:
        seg = by_start.get(i)
        if seg is not None:
            size = max(1, min(seg.placement.size, g.slices - i))
            parts.append(_segment_text(seg, size * cw, style))
            i += size
            continue
        cell = str(i).center(cw, ".") if i in g.free else "?".center(cw, ".")
        parts.append(style.paint(cell, FREE_COLOUR) if i in g.free else cell)
        i += 1
    return "".join(parts)


def _fits_text(fits: Mapping[str, int], profiles: Iterable[str]) -> str:
    known = list(dict.fromkeys(profiles))
    order = [p for p in known if p in fits] + sorted(p for p in fits if p not in known)
    return "  ".join(f"{clean(p)} {fits[p]}" for p in order) or "nothing"


def _slices_text(slices: Iterable[int]) -> str:
    return ",".join(str(s) for s in slices) or "none"


def gpu_lines(g: GpuMap, style: Style) -> list[str]:
    head = f"  GPU {g.index}  {clean(g.uuid)}  {clean(g.type)}  {g.memory_mb} MiB  {g.slices} slices"
    lines = [style.paint(head, BOLD)]
    if g.slices:
        lines.append("    " + bar(g, style))
    for s in g.segments:
        where = f"{s.placement.start}:{s.placement.size}"
        row = f"    {where:<6}{clean(g.shown(s.profile)):<11} {s.phase:<11}{_who(s)}"
        if style.wide and s.mig_uuid:
            row += f"  {clean(s.mig_uuid)}"
        lines.append(row)
    overlap = _overlaps(g.segments)
    if overlap:
        lines.append(style.paint(f"    overlapping segments: {overlap}", WARN_COLOUR))
    if g.closed:
        lines.append(style.paint(f"    closed: {clean(g.closed, 1024)}", WARN_COLOUR))
    else:
        lines.append(f"    free slices {_slices_text(g.free)}   still fits: {_fits_text(g.fits, g.profiles)}")
    return lines


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def _overlaps(segments: Iterable[Segment]) -> str:
    seen, out = 0, []
    for s in segments:
        if s.placement.mask & seen:
            out.append(f"{s.placement.start}:{s.placement.size}")
        seen |= s.placement.mask
    return ",".join(out)


# ---------------------------------------------------------------- nodes and the fleet


def _profiles(node: NodeMap) -> list[str]:
    return list(dict.fromkeys(p for g in node.gpus for p in g.profiles))


def node_lines(node: NodeMap, style: Style) -> list[str]:
    name = style.paint(f"NODE {clean(node.name)}", BOLD)
    if node.unreadable:
        return [f"{name}  " + style.paint(clean(node.unreadable, 1024), WARN_COLOUR)]
    idle = sum(1 for g in node.gpus for s in g.segments if s.phase == IDLE_PHASE)
    kept = f"  {_count(idle, 'idle instance')}" if idle else ""
    dra = f"  DRA ({clean(node.allocator[4:])})" if node.allocator.startswith("dra:") else ""
    head = (
        f"{name}  {_count(len(node.gpus), 'MIG GPU')}{dra}{kept}  "
        f"still fits: {_fits_text(node.fits, _profiles(node))}"
    )
    lines = [head]
    if node.refused:
        lines.append(
            style.paint(f"  device plugin leaves these GPUs alone: {clean(node.refused, 1024)}", WARN_COLOUR)
        )
    if node.idle_unreadable:
        lines.append(style.paint(f"  idle instances {clean(node.idle_unreadable, 1024)}", WARN_COLOUR))
    return [*lines, *(line for g in node.gpus for line in gpu_lines(g, style))]


def pending_lines(fleet: FleetMap, style: Style) -> list[str]:
    if not fleet.pending:
        return ["Pending MIG pods: none"]
    lines = [style.paint(f"Pending MIG pods: {len(fleet.pending)}", BOLD)]
    for p in fleet.pending:
        row = f"  {clean(p.namespace)}/{clean(p.name)}  asks {clean(p.asks)}  {clean(p.reason, 2048)}"
        lines.append(row if style.wide else _fit(row, style.width))
        for label, text in (("fix", p.fix), ("advice", p.advice)):
            if text:
                lines.append(f"      {label}: {clean(text, 2048)}")
    return lines


def render(fleet: FleetMap, style: Style) -> str:
    """The whole status as text (no trailing newline)."""
    shown = [n for n in fleet.nodes if n.gpus or n.unreadable or style.wide]
    lines = [legend(style), ""]
    for node in shown:
        lines += [*node_lines(node, style), ""]
    if not shown:
        lines += ["no node publishes MIG GPUs (is the dynmig device plugin running?)", ""]
    gpus = sum(len(n.gpus) for n in fleet.nodes)
    lines.append(
        f"FLEET  {_count(len(fleet.nodes), 'node')}, {_count(gpus, 'MIG GPU')}  still fits: "
        f"{_fits_text(fleet.fits, [p for n in fleet.nodes for p in _profiles(n)])}"
    )
    lines += pending_lines(fleet, style)
    if fleet.unreadable_pods:
        lines.append(
            style.paint(f"Pods with unreadable annotations: {len(fleet.unreadable_pods)}", WARN_COLOUR)
        )
        lines += [f"  {clean(pod)}  unreadable: {clean(why, 1024)}" for pod, why in fleet.unreadable_pods]
    return "\n".join(lines)
