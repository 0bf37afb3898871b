"""The lab's simulated GPU nodes: parsed from `--nodes`, described for the simulated NVML.

A node runs dynmig in extender mode (the device plugin) unless its spec ends in `@dra`: then it is
labelled as the chart's DRA node pool and runs `dynmig dra-plugin` instead (docs/dra.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from mig import catalog

DEFAULT_NODES = "gpu-a100=2xA100-SXM4-40GB;gpu-rtx=8xRTX-PRO-6000"
_NODE = re.compile(r"^(?P<name>[a-z0-9]([-a-z0-9]*[a-z0-9])?)=(?P<gpus>.+)$")
_GPUS = re.compile(r"^(?:(?P<count>\d+)\s*[xX×]\s*)?(?P<model>.+)$")


EXTENDER, DRA = "extender", "dra"
MODES = (EXTENDER, DRA)


class NodeSpecError(ValueError):
    pass


@dataclass(frozen=True)
class GpuGroup:
    model: catalog.GpuModel
    count: int


@dataclass(frozen=True)
class LabNode:
    name: str
    gpus: tuple[GpuGroup, ...]
    mode: str = EXTENDER  # which of dynmig's node plugins the node's pool runs

    @property
    def dra(self) -> bool:
        return self.mode == DRA

    def nvml_spec(self) -> dict[str, Any]:
        """The node description the simulated NVML takes."""
        return {"node": self.name, "gpus": [{"model": g.model.key, "count": g.count} for g in self.gpus]}

    @property
    def gpu_count(self) -> int:
        return sum(g.count for g in self.gpus)

    def describe(self) -> str:
        gpus = ", ".join(f"{g.count} × {g.model.nvml_name}" for g in self.gpus)
        return f"{gpus} (DRA)" if self.dra else gpus


def _group(text: str, where: str) -> GpuGroup:
    match = _GPUS.match(text.strip())
    if not match:
        raise NodeSpecError(f"--nodes: {where}: expected COUNTxMODEL, got {text!r}")
    count = int(match.group("count") or 1)
    if not 1 <= count <= 16:
        raise NodeSpecError(f"--nodes: {where}: a node holds 1 to 16 GPUs, got {count}")
    try:
        model = catalog.find_model(match.group("model").strip())
    except catalog.UnknownModel as error:
        raise NodeSpecError(f"--nodes: {where}: {error}") from None
    return GpuGroup(model, count)


def _mode(text: str, where: str) -> tuple[str, str]:
    """Split `2xA100-SXM4-40GB@dra` into its GPUs and its mode (extender when no `@` is given)."""
    gpus, at, mode = text.partition("@")
    if at and mode.strip() not in MODES:
        raise NodeSpecError(
            f"--nodes: {where}: the mode after '@' must be one of {', '.join(MODES)}, got {mode!r}"
        )
    return gpus, mode.strip() if at else EXTENDER


def parse_nodes(text: str) -> tuple[LabNode, ...]:
    """Parse `name=2xA100-SXM4-40GB+1xA30;other=8xRTX-PRO-6000@dra` into lab nodes."""
    nodes: list[LabNode] = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        match = _NODE.match(part)
        if not match:
            raise NodeSpecError(
                f"--nodes: {part!r}: expected NAME=COUNTxMODEL[+COUNTxMODEL][@dra], "
                f"e.g. {DEFAULT_NODES.split(';')[0]} (NAME is a lower-case DNS label)"
            )
        name = match.group("name")
        gpus, mode = _mode(match.group("gpus"), name)
        groups = tuple(_group(g, name) for g in gpus.split("+"))
        nodes.append(LabNode(name, groups, mode))
    if not nodes:
        raise NodeSpecError(f"--nodes: no nodes given; e.g. --nodes '{DEFAULT_NODES}'")
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        raise NodeSpecError(f"--nodes: node names must be unique, got {names}")
    return tuple(nodes)
