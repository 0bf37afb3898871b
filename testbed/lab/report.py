"""What a person would check, as text: allocation tables, pod phases, events, `nvidia-smi -L`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sim.nvml.views import SimGpu

from lab.kit import Kit

# a GPU's processes by (GPU UUID, GI, CI); a process outside MIG has neither GI nor CI
_Busy = dict[tuple[str, int | None, int | None], list[int]]

ALLOCATION_HEADER = ("POD", "PARENT_GPU", "PROFILE", "START", "SIZE", "MIG_UUID", "GI", "CI")


def table(header: Sequence[str], rows: Iterable[Sequence[object]], indent: str = "  ") -> str:
    cells = [[str(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(header)]
    lines = [indent + "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=False)).rstrip()]
    lines += [indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in cells]
    return "\n".join(lines)


def _opt(value: object) -> str:
    return "-" if value is None else str(value)


def allocations(kit: Kit, names: Iterable[str]) -> str:
    """`hami.io/vgpu-mig-allocations` of each pod, one row per reserved MIG device."""
    rows: list[tuple[object, ...]] = []
    for name in names:
        entries = kit.allocations(name)
        if not entries:
            rows.append((name, "(no allocation)", "", "", "", "", "", ""))
        for a in entries:
            rows.append(
                (
                    name,
                    a.gpuUUID,
                    a.profile,
                    a.placement.start,
                    a.placement.size,
                    _opt(a.migUUID),
                    _opt(a.gpuInstanceID),
                    _opt(a.computeInstanceID),
                )
            )
    return table(ALLOCATION_HEADER, rows)


def pods(kit: Kit, names: Iterable[str]) -> str:
    rows = []
    for name in names:
        pod = kit.pod(name)
        if pod is None:
            rows.append((name, "(deleted)", "", ""))
            continue
        status = pod.get("status") or {}
        reason = status.get("reason", "")
        if not reason:
            cond = next(
                (
                    c
                    for c in status.get("conditions") or []
                    if c.get("type") == "PodScheduled" and c.get("status") == "False"
                ),
                None,
            )
            reason = cond.get("reason", "") if cond else ""
        rows.append((name, status.get("phase", "Pending"), pod["spec"].get("nodeName") or "<none>", reason))
    return table(("NAME", "PHASE", "NODE", "REASON"), rows)


def shorten(text: str, width: int = 160) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def gpu_reason(message: str, gpu_uuid: str) -> str:
    """From a scheduling message listing every GPU, the part about one GPU."""
    for part in message.replace(", 1 GPU ", "; GPU ").split("; "):
        if gpu_uuid in part and ":" in part:
            return part.split(f"{gpu_uuid}:", 1)[-1].strip().rstrip(".")
    return message


def startup_summary(line: str) -> str:
    """The device plugin's `startup: busy=... cleaned=[...] adopted=N ...` log line, counted."""
    import re

    busy = re.search(r"busy=(\{.*?\}|\[.*?\])", line)
    cleaned = re.search(r"cleaned=(\[.*?\])", line)
    adopted = re.search(r"adopted=(\d+)", line)
    unproven = re.search(r"unproven=(\d+)", line)
    if not (busy and cleaned and adopted):
        return line
    return (
        f"startup: {busy.group(1).count('GPU-')} busy GPU(s) left alone, {cleaned.group(1).count('GPU-')} idle "
        f"GPU(s) cleaned, {adopted.group(1)} MIG instance(s) adopted"
        + (f", {unproven.group(1)} unproven" if unproven and unproven.group(1) != "0" else "")
    )


def events(kit: Kit, names: Iterable[str], limit: int = 200, width: int = 160) -> str:
    rows = []
    for name in names:
        for e in kit.events(name):
            count = (e.get("series") or {}).get("count") or e.get("count") or 1  # series: events.k8s.io/v1
            message = shorten(e.get("message", ""), width)
            rows.append(
                (
                    e.get("type", ""),
                    e.get("reason", ""),
                    f"pod/{name}",
                    (f"(x{count}) " if count > 1 else "") + message,
                )
            )
    return table(("TYPE", "REASON", "OBJECT", "MESSAGE"), rows[-limit:])


def nvidia_smi(kit: Kit, nodes: Iterable[str] | None = None, only_used: bool = False) -> str:
    """`nvidia-smi -L` per node, with the processes the simulated workloads run."""
    out = []
    for runtime in kit.lab.nodes.values():
        if nodes is not None and runtime.name not in nodes:
            continue
        out.append(f"  $ nvidia-smi -L    # on node {runtime.name}")
        busy: _Busy = {}
        for gpu in runtime.nvml.gpus():
            for p in gpu.processes:
                busy.setdefault((gpu.uuid, p.gi_id, p.ci_id), []).append(p.pid)
        text = runtime.nvml.nvidia_smi_L().splitlines()
        gpus = {g.index: g for g in runtime.nvml.gpus()}
        current = None
        for line in text:
            if line.startswith("GPU "):
                current = gpus[int(line.split(":")[0].split()[1])]
                if only_used and not current.gpu_instances:
                    current = None
                    continue
                out.append("  " + line)
            elif current is not None:
                pids = _pids_for(current, line, busy)
                out.append("  " + line + (f"   pid {', '.join(map(str, pids))}" if pids else ""))
        if only_used:
            idle = sum(1 for g in gpus.values() if not g.gpu_instances)
            if idle:
                out.append(f"  ({idle} more GPU(s) with no MIG instance)")
    return "\n".join(out)


def _pids_for(gpu: SimGpu, line: str, busy: _Busy) -> list[int]:
    for gi in gpu.gpu_instances:
        for ci in gi.compute_instances:
            if ci.mig_uuid in line:
                return busy.get((gpu.uuid, gi.gi_id, ci.ci_id), [])
    return []
