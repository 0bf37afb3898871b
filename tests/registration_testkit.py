"""Node registrations for tests: `hami.io/node-nvidia-register` as dynmig's device plugin publishes
it for GPUs of one catalog model with the default allowlist's profiles."""

from __future__ import annotations


def registration(node: str, model_key: str, gpus: int, health: bool = True) -> str:
    """`hami.io/node-nvidia-register` as a device plugin publishes it for `gpus` GPUs of a model."""
    from mig import catalog
    from mig.allowlist import default_allowlist
    from mig.annotations import DeviceInfo, MigProfile, encode_node_register

    model = catalog.find_model(model_key)
    names = default_allowlist().profiles_for(model.nvml_name)
    profiles = []
    for name in names:
        spec = model.profile(name)
        if spec is None:
            continue
        profiles.append(
            MigProfile(
                name=spec.name,
                memoryMB=spec.memory_mib,
                core=catalog.core_percent(model, spec),
                sliceCount=spec.slice_count,
                placements=tuple({"start": p.start, "size": p.size} for p in spec.placements),
            )
        )
    devices = [
        DeviceInfo(
            id=f"GPU-{node}-{i}",
            index=i,
            count=7,
            devmem=model.memory_mib,
            devcore=100,
            type=model.nvml_name,
            health=health,
            mode="mig",
            migProfiles=tuple(profiles),
        )
        for i in range(gpus)
    ]
    return encode_node_register(devices)
