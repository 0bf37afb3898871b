"""Node spec -> initial simulated state.

A spec is small JSON-able data::

    {"node": "gpu-node-1",                      # seed for GPU UUIDs (default "sim-node")
     "gpus": [{"model": "A100-SXM4-40GB", "count": 2},
              {"model": "RTX PRO 6000 Blackwell Server Edition", "uuid": "GPU-...",
               "mig": false}],                  # MIG mode at boot (default enabled)
     "shuffle_gi_ids": 7}                       # optional: opaque GI IDs from this seed

Models are resolved with `mig.catalog.find_model` (key, NVML name or a unique part of it).
"""

from __future__ import annotations

import re
from typing import Any

from mig.catalog import UnknownModel, find_model
from sim.nvml.identity import gpu_uuid, shuffled_ids
from sim.nvml.state import Gpu, State

_GPU_UUID = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_ENTRY_KEYS = {"model", "count", "uuid", "mig"}


class SpecError(ValueError):
    """The node spec is malformed; the message names the field and the fix."""


def build_state(spec: dict[str, Any]) -> State:
    if not isinstance(spec, dict) or not isinstance(spec.get("gpus"), list):
        raise SpecError('node spec: "gpus" must be a list, e.g. {"gpus": [{"model": "A100-SXM4-40GB"}]}')
    seed = str(spec.get("node", "sim-node"))
    state = State()
    for n, entry in enumerate(spec["gpus"]):
        for _ in range(_count(entry, n)):
            state.gpus.append(_gpu(entry, n, len(state.gpus), seed))
    uuids = [g.uuid for g in state.gpus]
    if len(set(uuids)) != len(uuids):
        raise SpecError("node spec: gpus[].uuid values must be unique")
    if spec.get("shuffle_gi_ids") is not None:
        shuffle(state, int(spec["shuffle_gi_ids"]))
    return state


def shuffle(state: State, seed: int | None) -> None:
    """Give every GPU opaque GI IDs (a seeded permutation), or back to heap numbering (None)."""
    for gpu in state.gpus:
        if gpu.gis:
            raise SpecError(f"cannot renumber GI IDs of {gpu.uuid}: it has GPU instances")
        gpu.gi_id_map = None if seed is None else shuffled_ids(gpu.model, seed, gpu.uuid)


def _count(entry: Any, n: int) -> int:
    if not isinstance(entry, dict) or "model" not in entry:
        raise SpecError(f'node spec: gpus[{n}] must be an object with a "model" field')
    unknown = set(entry) - _ENTRY_KEYS
    if unknown:
        raise SpecError(f"node spec: gpus[{n}] has unknown fields {sorted(unknown)}; allowed: {sorted(_ENTRY_KEYS)}")
    count = entry.get("count", 1)
    if not isinstance(count, int) or count < 1:
        raise SpecError(f"node spec: gpus[{n}].count must be a positive integer, got {count!r}")
    if "uuid" in entry and count != 1:
        raise SpecError(f"node spec: gpus[{n}] gives a uuid, so count must be 1 (use one entry per GPU)")
    return count


def _gpu(entry: dict[str, Any], n: int, index: int, seed: str) -> Gpu:
    try:
        model = find_model(str(entry["model"]))
    except UnknownModel as error:
        raise SpecError(f"node spec: gpus[{n}].model: {error}") from None
    uuid = entry.get("uuid") or gpu_uuid(seed, index)
    if not _GPU_UUID.match(uuid):
        raise SpecError(f"node spec: gpus[{n}].uuid {uuid!r} must look like GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx")
    mig = 1 if entry.get("mig", True) else 0
    return Gpu(index=index, uuid=uuid, model_key=model.key, mig_current=mig, mig_pending=mig)
