"""Node spec -> initial simulated state.

A spec is small JSON-able data::

    {"node": "gpu-node-1",                      # seed for GPU UUIDs (default "sim-node")
     "gpus": [{"model": "A100-SXM4-40GB", "count": 2},
              {"model": "RTX PRO 6000 Blackwell Server Edition", "uuid": "GPU-...",
               "mig": false,                    # MIG mode at boot (default enabled)
               "driver": "R575"}],              # this GPU's driver release (default: the node's)
     "driver": "R570",                          # the node's driver release (default: each model's)
     "gi_ids": "driver",                        # "driver" (default), "heap", "halves-swapped", "shuffled"
     "shuffle_gi_ids": 7,                       # seed of the shuffled GI IDs (implies "shuffled")
     "mig_uuids": "fresh",                      # "fresh" (default) or "stable" on re-creation
     "timing": "driver",                        # "zero" (default: instant) or "driver" latencies
     "timing_serialization": "gpu",             # "model" (default: the data's), "gpu" or "node"
     "listing_lag_s": 1.5}                      # MIG device list lag after a create (default: data's)

Models are resolved with `hardware.find_model` (key, NVML name or a unique part of it); their facts
come from `drivers/*.yaml`. With "gi_ids": "driver" each GPU numbers its GIs the way its model's
drivers were seen to, the GPUs of a node taking the observed numberings in turn (identity.py).

MIG UUIDs default to "fresh" - a new UUID for every creation, even of the same placement - because
NVIDIA's DRA driver states that a MIG UUID changes across destruction and re-creation of the same
configuration and nvml.h promises immutability only "for the lifetime of a MIG device"; walkthroughs
that show a UUID coming back are served by "stable".

Timing: with "timing": "driver" every GI/CI create and destroy takes the seconds its model's
`timing` block in drivers/*.yaml gives (estimates, with their sources there), the calls of one GPU
(or of the whole node) in series, and a new MIG device may show in NVML's list only after
`listing_lag_s`. "zero" keeps every call instant, which is what unit tests want; the benches choose
"driver" (bench/startup.py).

Whole test runs can change the defaults from the environment (a spec's own fields still win):
DYNMIG_SIM_GI_IDS (one of the gi_ids values), DYNMIG_SIM_MIG_UUIDS ("fresh" or "stable") and
DYNMIG_SIM_TIMING ("zero" or "driver"), e.g. `DYNMIG_SIM_GI_IDS=shuffled make test` proves nothing
infers a placement from a GI ID, and `DYNMIG_SIM_TIMING=driver dynmig lab` runs the lab at the
driver data's speed.
"""

from __future__ import annotations

import os
import re
from typing import Any

from sim.nvml import hardware
from sim.nvml.hardware import UnknownModel, UnknownRelease
from sim.nvml.identity import gpu_uuid, shuffled_ids
from sim.nvml.state import DRIVER as TIMED
from sim.nvml.state import FRESH, STABLE, ZERO, Gpu, State, TimingConfig

_GPU_UUID = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_ENTRY_KEYS = {"model", "count", "uuid", "mig", "driver"}
_NODE_KEYS = {
    "node",
    "gpus",
    "driver",
    "gi_ids",
    "shuffle_gi_ids",
    "mig_uuids",
    "timing",
    "timing_serialization",
    "listing_lag_s",
}
TIMING_MODES = (ZERO, TIMED)
SERIALIZATIONS = ("model", *hardware.SERIALIZATIONS)
DRIVER, SHUFFLED = "driver", "shuffled"
GI_ID_MODES = (DRIVER, *hardware.NUMBERINGS, SHUFFLED)
_MAX_GPUS = 64


class SpecError(ValueError):
    """The node spec is malformed; the message names the field and the fix."""


def build_state(spec: dict[str, Any]) -> State:
    if not isinstance(spec, dict) or not isinstance(spec.get("gpus"), list):
        raise SpecError('node spec: "gpus" must be a list, e.g. {"gpus": [{"model": "A100-SXM4-40GB"}]}')
    unknown = set(spec) - _NODE_KEYS
    if unknown:
        raise SpecError(f"node spec: unknown fields {sorted(unknown)}; allowed: {sorted(_NODE_KEYS)}")
    seed = str(spec.get("node", "sim-node"))
    state = State(mig_uuids=_choice(spec, "mig_uuids", (FRESH, STABLE), _env("DYNMIG_SIM_MIG_UUIDS", FRESH)))
    state.timing = timing_config(spec)
    node_driver = _driver(spec.get("driver"), "driver")
    for n, entry in enumerate(spec["gpus"]):
        for _ in range(_count(entry, n)):
            if len(state.gpus) >= _MAX_GPUS:
                raise SpecError(f"node spec: at most {_MAX_GPUS} GPUs per node")
            state.gpus.append(_gpu(entry, n, len(state.gpus), seed, node_driver))
    uuids = [g.uuid for g in state.gpus]
    if len(set(uuids)) != len(uuids):
        raise SpecError("node spec: gpus[].uuid values must be unique")
    default = SHUFFLED if spec.get("shuffle_gi_ids") is not None else _env("DYNMIG_SIM_GI_IDS", DRIVER)
    mode = _choice(spec, "gi_ids", GI_ID_MODES, default)
    seed_value = spec.get("shuffle_gi_ids")
    if mode == SHUFFLED:
        if seed_value is not None and (isinstance(seed_value, bool) or not isinstance(seed_value, int)):
            raise SpecError(f"node spec: shuffle_gi_ids must be an integer seed, got {seed_value!r}")
        shuffle(state, 0 if seed_value is None else seed_value)
    elif mode != DRIVER:
        for gpu in state.gpus:
            gpu.gi_numbering = mode
    return state


def timing_config(spec: dict[str, Any]) -> TimingConfig:
    """The spec's timing fields (with DYNMIG_SIM_TIMING as the mode's default), checked."""
    mode = _choice(spec, "timing", TIMING_MODES, _env("DYNMIG_SIM_TIMING", ZERO))
    serialization = _choice(spec, "timing_serialization", SERIALIZATIONS, "model")
    lag = spec.get("listing_lag_s")
    if lag is not None and (isinstance(lag, bool) or not isinstance(lag, int | float) or not 0 <= lag <= 60):
        raise SpecError(f"node spec: listing_lag_s must be seconds from 0 to 60, got {lag!r}")
    return TimingConfig(mode, serialization, None if lag is None else float(lag))


def shuffle(state: State, seed: int | None) -> None:
    """Give every GPU opaque GI IDs (a seeded permutation), or its driver's numbering back (None)."""
    for gpu in state.gpus:
        if gpu.gis:
            raise SpecError(f"cannot renumber GI IDs of {gpu.uuid}: it has GPU instances")
        gpu.gi_id_map = None if seed is None else shuffled_ids(gpu.model, seed, gpu.uuid)


def _env(name: str, default: str) -> str:
    return os.environ.get(name, "").strip() or default


def _choice(spec: dict[str, Any], field: str, allowed: tuple[str, ...], default: str) -> str:
    value = spec.get(field, default)
    if value not in allowed:
        raise SpecError(f"node spec: {field} must be one of {list(allowed)}, got {value!r}")
    return value


def _driver(value: Any, where: str) -> str | None:
    if value is not None and (not isinstance(value, str) or not 0 < len(value) <= 40):
        raise SpecError(f'node spec: {where} must be a driver release such as "R570" or "570.124.06"')
    return value


def _count(entry: Any, n: int) -> int:
    if not isinstance(entry, dict) or "model" not in entry:
        raise SpecError(f'node spec: gpus[{n}] must be an object with a "model" field')
    unknown = set(entry) - _ENTRY_KEYS
    if unknown:
        raise SpecError(
            f"node spec: gpus[{n}] has unknown fields {sorted(unknown)}; allowed: {sorted(_ENTRY_KEYS)}"
        )
    count = entry.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= _MAX_GPUS:
        raise SpecError(f"node spec: gpus[{n}].count must be an integer from 1 to {_MAX_GPUS}, got {count!r}")
    if "uuid" in entry and count != 1:
        raise SpecError(f"node spec: gpus[{n}] gives a uuid, so count must be 1 (use one entry per GPU)")
    return count


def _gpu(entry: dict[str, Any], n: int, index: int, seed: str, node_driver: str | None) -> Gpu:
    try:
        key = hardware.find_model(str(entry["model"]))
    except UnknownModel as error:
        raise SpecError(f"node spec: gpus[{n}].model: {error}") from None
    try:
        release = hardware.release_key(key, _driver(entry.get("driver"), f"gpus[{n}].driver") or node_driver)
    except UnknownRelease as error:
        raise SpecError(f"node spec: gpus[{n}].driver: {error}") from None
    uuid = entry.get("uuid") or gpu_uuid(seed, index)
    if not isinstance(uuid, str) or not _GPU_UUID.match(uuid):
        raise SpecError(
            f"node spec: gpus[{n}].uuid {uuid!r} must look like GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
        )
    mig = 1 if entry.get("mig", True) else 0
    numberings = hardware.model(key, release).gi_numberings
    return Gpu(
        index=index,
        uuid=uuid,
        model_key=key,
        mig_current=mig,
        mig_pending=mig,
        release=release,
        gi_numbering=numberings[index % len(numberings)],
    )
