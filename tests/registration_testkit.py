"""Node registrations for tests and benches: `hami.io/node-nvidia-register` as dynmig's device plugin
publishes it for GPUs of one catalog model, with the default allowlist's profiles or the ones named."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any


@functools.cache
def catalog_profiles(model_key: str, names: tuple[str, ...] | None = None) -> tuple[Any, tuple[Any, ...]]:
    """(the catalog model, its MigProfiles as the plugin publishes them): the profiles `names` (each
    resolved as HAMi resolves it and published under that name), or the default allowlist's for the
    model; computed once per model."""
    from base.policyfiles import default_allowlist
    from mig import catalog
    from mig.annotations import MigProfile
    from mig.resolve import on_model

    model = catalog.find_model(model_key)
    wanted = names if names is not None else default_allowlist().profiles_for(model.nvml_name)
    profiles = tuple(
        MigProfile(
            name=r.label,
            memoryMB=r.profile.memory_mib,
            core=catalog.core_percent(model, r.profile),
            sliceCount=r.profile.slice_count,
            placements=tuple({"start": p.start, "size": p.size} for p in r.profile.placements),
        )
        for r in on_model(model, wanted)
    )
    return model, profiles


def registration(
    node: str,
    model_key: str,
    gpus: int,
    health: bool = True,
    names: Sequence[str] | None = None,
    ids: Sequence[str] | None = None,
) -> str:
    """The registration of `gpus` GPUs of a model on `node`: GPU ids `GPU-<node>-<i>` unless `ids`
    names them (then one GPU per id), profiles as catalog_profiles gives them."""
    from mig.annotations import DeviceInfo, encode_node_register

    model, profiles = catalog_profiles(model_key, tuple(names) if names is not None else None)
    uuids = list(ids) if ids is not None else [f"GPU-{node}-{i}" for i in range(gpus)]
    return encode_node_register(
        [
            DeviceInfo(
                id=uuid,
                index=i,
                count=7,
                devmem=model.memory_mib,
                devcore=100,
                type=model.nvml_name,
                health=health,
                mode="mig",
                migProfiles=profiles,
            )
            for i, uuid in enumerate(uuids)
        ]
    )
