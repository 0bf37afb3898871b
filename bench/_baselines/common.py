"""The bench's fleet model and the shared skeleton of a HAMi-style baseline."""

from __future__ import annotations

from dataclasses import dataclass, field

from base.policyfiles import default_allowlist
from mig.catalog import find_model
from mig.placement import PublishedProfile
from mig.placement.preference import default_sort_key
from mig.placement.published import from_catalog
from mig.types import Placement


@dataclass(eq=False)
class BGpu:
    node: str
    uuid: str
    index: int
    type: str
    profiles: tuple[PublishedProfile, ...]
    total_mem: int
    mask: int = 0
    allocs: dict[tuple[int, int], tuple[Placement, PublishedProfile]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.profiles = tuple(sorted(self.profiles, key=default_sort_key))
        self.axis = max(p.end for pr in self.profiles for p in pr.placements)
        self.count = max(len(p.placements) for p in self.profiles)  # HAMi's registered count

    @property
    def used_slices(self) -> int:
        return self.mask.bit_count()

    def usage_score(self) -> float:
        """HAMi's device score with default weights: slots + cores + memory, each as a fraction."""
        used = len(self.allocs)
        cores = sum(p.core for _, p in self.allocs.values())
        mem = sum(p.memory_mb for _, p in self.allocs.values())
        return used / self.count + cores / 100 + mem / self.total_mem


@dataclass(eq=False)
class BNode:
    name: str
    gpus: list[BGpu]

    def usage_score(self) -> float:
        used = sum(len(g.allocs) for g in self.gpus)
        count = sum(g.count for g in self.gpus)
        cores = sum(p.core for g in self.gpus for _, p in g.allocs.values())
        mem = sum(p.memory_mb for g in self.gpus for _, p in g.allocs.values())
        total_mem = sum(g.total_mem for g in self.gpus)
        return used / count + cores / (100 * len(self.gpus)) + mem / total_mem


Pick = tuple[BGpu, Placement, PublishedProfile]


def catalog_node(name: str, uuid_prefix: str, model_name: str, gpus: int) -> BNode:
    """A node of `gpus` GPUs of one catalog model with the default allowlist's profiles, as the bench
    and its tests build fleets (GPU UUIDs `GPU-<uuid_prefix>-<index>`)."""
    model = find_model(model_name)
    profiles = from_catalog(model, default_allowlist().profiles_for(model.nvml_name))
    return BNode(
        name,
        [
            BGpu(name, f"GPU-{uuid_prefix}-{i}", i, model.nvml_name, profiles, model.memory_mib)
            for i in range(gpus)
        ],
    )


class Baseline:
    """Nodes in the order `node_order` gives; per device slot, GPUs in `gpu_order`; per GPU the first
    covering profile with a free placement at the position `choose` picks. All devices on one node."""

    name = "baseline"

    def __init__(self, nodes: list[BNode]):
        self.nodes = nodes

    def node_order(self) -> list[BNode]:
        return self.nodes

    def gpu_order(self, node: BNode, masks: dict[int, int]) -> list[BGpu]:
        return node.gpus

    def choose(self, gpu: BGpu, mask: int, profile: PublishedProfile) -> Placement | None:
        raise NotImplementedError

    def decide(self, mems: list[int | None]) -> list[Pick] | None:
        for node in self.node_order():
            picks = self._on_node(node, mems)
            if picks is not None:
                return picks
        return None

    def _on_node(self, node: BNode, mems: list[int | None]) -> list[Pick] | None:
        masks = {id(g): g.mask for g in node.gpus}
        picks: list[Pick] = []
        for mem in mems:
            pick = self._slot(node, masks, mem)
            if pick is None:
                return None
            masks[id(pick[0])] |= pick[1].mask
            picks.append(pick)
        return picks

    def _slot(self, node: BNode, masks: dict[int, int], mem: int | None) -> Pick | None:
        for gpu in self.gpu_order(node, masks):
            top = max(p.memory_mb for p in gpu.profiles)
            need = top if mem is None else mem
            for prof in gpu.profiles:
                if prof.memory_mb < need:
                    continue
                place = self.choose(gpu, masks[id(gpu)], prof)
                if place is not None:
                    return gpu, place, prof
        return None


def free(placements, mask: int) -> list[Placement]:
    return [p for p in placements if not p.mask & mask]


class HamiOrder(Baseline):
    """HAMi v2.10 chart defaults: nodes binpack (fullest first), GPUs spread (emptiest first).

    `gpu_binpack = True` gives HAMi's binpack/binpack (`hami.io/gpu-scheduler-policy: binpack`):
    fullest GPU first, so the in-GPU rule is compared with dynmig under the same GPU choice.
    """

    gpu_binpack = False

    def node_order(self) -> list[BNode]:
        return sorted(self.nodes, key=lambda n: -n.usage_score())

    def gpu_order(self, node: BNode, masks: dict[int, int]) -> list[BGpu]:
        # A GPU revisited for a later slot of the same pod counts its tentative slices too.
        sign = -1 if self.gpu_binpack else 1
        return sorted(
            node.gpus, key=lambda g: sign * (g.usage_score() + (masks[id(g)] & ~g.mask).bit_count() / g.axis)
        )
