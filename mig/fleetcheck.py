"""A policy against the fleet, not the catalog: which nodes would publish no MIG profile under it, and
which profiles running pods hold that it no longer allows.

The GPUs are the ones nodes publish in `hami.io/node-nvidia-register` (their NVML names); a profile is
allowed on a GPU when the policy publishes it there (`mig.allowlist.published`, HAMi's resolution;
for a GPU the catalog does not know, when the GPU's entry lists the name). A pod holding a profile
the policy no longer allows keeps running (nothing is destroyed for a policy change): only new pods
cannot get that profile. Nothing here refuses a policy; `dynmig policy check --cluster` and serve
say what it would do. Hostile annotations never raise: a node or pod that cannot be read is skipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from mig import catalog
from mig.allowlist import Allowlist, published
from mig.annotations import AnnotationError, decode_node_register
from mig.pods import PodReservation, active_for_scheduler, annotations_of, qualified_name
from mig.reconstruct import node_register

MAX_LISTED = 20  # nodes or pods named in one finding; the rest are counted


@dataclass(frozen=True)
class BareNode:
    """A node whose every published GPU would publish no MIG profile."""

    node: str
    gpus: tuple[str, ...]  # NVML names


@dataclass(frozen=True)
class HeldProfile:
    """A running pod's reservation of a profile the policy no longer allows on that GPU."""

    pod: str
    node: str
    gpu: str  # NVML name
    profile: str


@dataclass(frozen=True)
class FleetCheck:
    bare: tuple[BareNode, ...] = ()
    held: tuple[HeldProfile, ...] = ()
    nodes: int = 0  # nodes that publish a registration (MIG nodes)

    def __bool__(self) -> bool:
        return bool(self.bare or self.held)

    def lines(self) -> list[str]:
        """One line per finding, for a person (the CLI and serve's log and Event)."""
        out = [_bare_line(b) for b in self.bare[:MAX_LISTED]]
        out += _more(len(self.bare), "node")
        out += [
            f"pod {h.pod} holds a {h.profile} on {h.node} ({h.gpu}) that the policy no longer allows: it "
            "keeps running; new pods cannot get one"
            for h in self.held[:MAX_LISTED]
        ]
        out += _more(len(self.held), "pod reservation")
        return out


def _bare_line(b: BareNode) -> str:
    if not b.gpus:
        return (
            f"node {b.node} publishes no MIG profile: its device plugin found no GPU that its policy "
            "offers a profile on, so no MIG pod can land there"
        )
    return (
        f"node {b.node} ({_gpus(b.gpus)}) would publish no MIG profile: no entry offers a profile of its "
        "GPUs, so no MIG pod can land there"
    )


def _gpus(names: tuple[str, ...]) -> str:
    counts = {n: names.count(n) for n in dict.fromkeys(names)}
    return ", ".join(f"{c} × {n}" for n, c in counts.items())


def _more(total: int, what: str) -> list[str]:
    return [f"… and {total - MAX_LISTED} more {what}(s)"] if total > MAX_LISTED else []


def allowed_on(allowlist: Allowlist, gpu_type: str) -> tuple[str, ...]:
    """The profile names a GPU of this NVML name publishes under `allowlist`."""
    try:
        model = catalog.find_model(gpu_type.removeprefix("NVIDIA-"))
    except catalog.UnknownModel:
        return allowlist.profiles_for(gpu_type)
    return tuple(r.label for r in published(allowlist, model))


def _published_gpus(node: Mapping[str, Any]) -> dict[str, str] | None:
    """uuid -> NVML name of the GPUs a node publishes; None when it publishes no registration."""
    text = node_register(node)
    if not isinstance(text, str):
        return None
    try:
        return {d.id: d.type for d in decode_node_register(text)}
    except (AnnotationError, ValueError):
        return None


def check_fleet(
    allowlist: Allowlist, nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
) -> FleetCheck:
    """What `allowlist` would do to these nodes (JSON objects) and the pods running on them."""
    gpus: dict[str, tuple[str, str]] = {}  # uuid -> (node, NVML name)
    bare = []
    seen = 0
    for node in nodes:
        name = qualified_name(node).lstrip("/")
        found = _published_gpus(node)
        if found is None:
            continue
        seen += 1
        gpus.update({uuid: (name, kind) for uuid, kind in found.items()})
        if not any(allowed_on(allowlist, kind) for kind in found.values()):
            bare.append(BareNode(name, tuple(found.values())))
    held = []
    for pod in pods:
        if not active_for_scheduler(pod):
            continue
        try:
            allocations = PodReservation(annotations_of(pod)).allocations
        except (AnnotationError, ValueError):
            continue
        for a in allocations:
            where = gpus.get(a.gpuUUID)
            if where is not None and a.profile not in allowed_on(allowlist, where[1]):
                held.append(HeldProfile(qualified_name(pod), where[0], where[1], a.profile))
    return FleetCheck(tuple(bare), tuple(held), seen)
