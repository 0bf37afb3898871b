"""Identifiers the driver hands out: GPU and MIG UUIDs, GI IDs, and driver-chosen slots.

Everything here is deterministic so that tests and lab runs repeat exactly.
"""

from __future__ import annotations

import hashlib
import random
import uuid

from mig.catalog import GpuModel
from mig.types import Placement

_MIG_NAMESPACE = uuid.UUID("6d1f3c2e-5a7b-4c8d-9e0f-1a2b3c4d5e6f")


def gpu_uuid(seed: str, index: int) -> str:
    """`GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, stable for a (node name or seed, index)."""
    digest = hashlib.sha256(f"{seed}/gpu/{index}".encode()).hexdigest()
    return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def mig_uuid(parent_uuid: str, placement: Placement, profile_id: int, ci_start: int, ci_profile_id: int) -> str:
    """R470+ MIG UUID (v5-like: version nibble 5, RFC-4122 variant).

    Derived from the parent GPU, the GI placement and profile and the CI slot, so the same GPU
    re-creating the same placement gets the same UUID back.
    """
    name = f"{parent_uuid}/{placement.start}:{placement.size}/{profile_id}/{ci_start}/{ci_profile_id}"
    return f"MIG-{uuid.uuid5(_MIG_NAMESPACE, name)}"


def axis_levels(model: GpuModel) -> tuple[int, ...]:
    """Placement sizes of the model's slice tree, largest first (e.g. 8, 4, 2, 1)."""
    return tuple(sorted({p.placement_size for p in model.profiles}, reverse=True))


def heap_gi_id(model: GpuModel, placement: Placement) -> int:
    """GI ID by the driver's heap numbering of the slice tree (mig-facts §8.2).

    Full GPU = 0; then the halves; then the next level, left to right. The same rule gives the
    observed A100 and RTX PRO 6000 IDs and the inferred A30 ones.
    """
    offset = 0
    for size in axis_levels(model):
        if size == placement.size:
            return offset + placement.start // size
        offset += model.axis_length // size
    raise ValueError(f"placement {placement} is not on the slice tree of {model.key}")


def gi_id_space(model: GpuModel) -> int:
    """How many GI IDs the heap numbering can produce on this model."""
    return sum(model.axis_length // size for size in axis_levels(model))


def shuffled_ids(model: GpuModel, seed: int, gpu_key: str) -> list[int]:
    """A permutation of the model's GI ID space: opaque IDs that say nothing about placement."""
    ids = list(range(gi_id_space(model)))
    random.Random(f"{seed}/{gpu_key}").shuffle(ids)
    return ids


def driver_slot_order(model: GpuModel, size: int, starts: list[int]) -> list[int]:
    """Start slots the driver tries, in order, when a GI is created without a placement.

    mig-facts §4.11: on 8-slice GPUs 1g goes to 6, 4, 5, 0, 1, 2, 3 and the first 3g (size 4) to
    slot 4 - the right end first; on RTX PRO 6000 (and, inferred, A30) slots fill from the left.
    """
    if model.axis_length != 8:
        return sorted(starts)
    if size == 1:
        preferred = [6, 4, 5, 0, 1, 2, 3]
        return [s for s in preferred if s in starts] + [s for s in starts if s not in preferred]
    return sorted(starts, reverse=True)
