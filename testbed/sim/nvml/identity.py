"""Identifiers the driver hands out: GPU and MIG UUIDs, GI IDs, and driver-chosen slots.

Everything here is deterministic so that tests and lab runs repeat exactly.

GI IDs. Drivers number a GPU instance by where it sits in the slice tree (full GPU, halves,
quarters, ... each level left to right after the one above), but which half comes first differs
between GPUs, boards and drivers [observed]:
- "heap": the lower half first. MIG User Guide A100 walkthroughs (3g at 0:4 -> GI 1, at 4:4 ->
  GI 2; 1g at 0..6 -> GI 7..13), the RTX PRO 6000 walkthrough, HAMi's fixtures.
- "halves-swapped": the upper half first at every level. An A100-PCIE on 510.47.03 (1g at 0:1 ->
  GI 11, 2g at 2:2 -> 6, 3g at 4:4 -> 1), an H100 PCIe on 570.169 (seven 1g -> GIs 9, 7, 8, 11,
  12, 13, 14), an H20 with 1g GIs 13 and 14, the guide's "3g at 0:4 is GI 2"; NVIDIA/DCGM#138
  shows both numberings on two A100s of one node.
So an ID says nothing dependable about a placement; "shuffled" IDs (a seeded permutation) make
any such inference fail outright.
"""

from __future__ import annotations

import hashlib
import random
import uuid

from sim.nvml.hardware import HALVES_SWAPPED, GpuModel, Placement

_MIG_NAMESPACE = uuid.UUID("6d1f3c2e-5a7b-4c8d-9e0f-1a2b3c4d5e6f")


def gpu_uuid(seed: str, index: int) -> str:
    """`GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, stable for a (node name or seed, index)."""
    digest = hashlib.sha256(f"{seed}/gpu/{index}".encode()).hexdigest()
    return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def mig_uuid(
    parent_uuid: str,
    placement: Placement,
    profile_id: int,
    ci_start: int,
    ci_profile_id: int,
    generation: int = 0,
) -> str:
    """R470+ MIG UUID (v5-like: version nibble 5, RFC-4122 variant).

    Derived from the parent GPU, the GI placement and profile and the CI slot; `generation` 0
    gives the same UUID back when the same placement is re-created ("stable" mode), a creation
    serial gives every creation its own ("fresh" mode).
    """
    name = f"{parent_uuid}/{placement.start}:{placement.size}/{profile_id}/{ci_start}/{ci_profile_id}"
    if generation:
        name += f"/{generation}"
    return f"MIG-{uuid.uuid5(_MIG_NAMESPACE, name)}"


def axis_levels(model: GpuModel) -> tuple[int, ...]:
    """Placement sizes of the model's slice tree, largest first (e.g. 8, 4, 2, 1)."""
    return tuple(sorted({p.placement_size for p in model.profiles}, reverse=True))


def tree_gi_id(model: GpuModel, placement: Placement, numbering: str) -> int:
    """GI ID by the slice-tree numbering `numbering` (module docstring)."""
    offset = 0
    for size in axis_levels(model):
        count = model.axis_length // size
        if size == placement.size:
            index = placement.start // size
            if numbering == HALVES_SWAPPED and count > 1:
                index = (index + count // 2) % count
            return offset + index
        offset += count
    raise ValueError(f"placement {placement} is not on the slice tree of {model.key}")


def gi_id_space(model: GpuModel) -> int:
    """How many GI IDs the tree numbering can produce on this model."""
    return sum(model.axis_length // size for size in axis_levels(model))


def shuffled_ids(model: GpuModel, seed: int, gpu_key: str) -> list[int]:
    """A permutation of the model's GI ID space: opaque IDs that say nothing about placement."""
    ids = list(range(gi_id_space(model)))
    random.Random(f"{seed}/{gpu_key}").shuffle(ids)
    return ids


def driver_slot_order(model: GpuModel, size: int, starts: list[int]) -> list[int]:
    """Start slots the driver tries, in order, when a GI is created without a placement.

    On 8-slice GPUs 1g goes to 6, 4, 5, 0, 1, 2, 3 and the first 3g (size 4) to slot 4 - the
    right end first [observed: MIG User Guide, H100 PCIe on 570.169]; on RTX PRO 6000 (and, by
    inference, A30) slots fill from the left.
    """
    if model.axis_length != 8:
        return sorted(starts)
    if size == 1:
        preferred = [6, 4, 5, 0, 1, 2, 3]
        return [s for s in preferred if s in starts] + [s for s in starts if s not in preferred]
    return sorted(starts, reverse=True)
