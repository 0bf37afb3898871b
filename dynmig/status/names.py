"""Which extended-resource names `dynmig status` reads pods by: the ones `dynmig serve` reads.

A device config may rename the resources (`resourceCountName`, `resourceMemoryName`, ...). A pod that
asks for `example.com/vram` is a MIG pod to the scheduler of that install, so status must read it by
the same names or it would not show the pod at all. The names come from, in this order:
1. `--device-config FILE`: the file `dynmig serve` reads (an invalid file is an error);
2. the ConfigMaps labelled `dynmig.io/device-config: "true"` (the chart's device config carries the
   label): one set of names among them is used; ConfigMaps that disagree are an error that asks for
   `--device-config`; an invalid one is skipped with a warning;
3. the defaults (`nvidia.com/gpu`, `nvidia.com/gpumem`, ...) when none is found or they may not be
   listed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from base.policyfiles import load_device_config
from mig.allowlist import (
    DEVICE_CONFIG_KEY,
    DEVICE_CONFIG_LABEL,
    ERROR,
    PolicyError,
    ResourceNames,
    check_text,
)

SELECTOR = f"{DEVICE_CONFIG_LABEL}=true"
MAX_SHOWN = 3  # ConfigMaps named in a disagreement


class NamesError(ValueError):
    """The resource names cannot be decided; the text says which source and what to do."""


@dataclass(frozen=True)
class Names:
    """The resource names to read pods by, where they came from, and warnings for the terminal."""

    names: ResourceNames
    source: str
    warnings: tuple[str, ...] = ()


def from_file(path: str) -> Names:
    """The names in a device-config file; any error in it is a `NamesError` naming the file."""
    try:
        config = load_device_config(Path(path))
    except PolicyError as error:
        raise NamesError(f"--device-config {path}: {error}") from None
    return Names(config.resources, path)


def _label(resources: ResourceNames) -> str:
    return ", ".join((resources.count, resources.memory, resources.memory_percentage, resources.cores))


def _name_of(config_map: Mapping[str, Any]) -> str:
    meta = config_map.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return f"configmap {meta.get('namespace') or ''}/{meta.get('name') or ''}"


def _read(config_map: Mapping[str, Any]) -> tuple[ResourceNames | None, str]:
    """(names, "") or (None, why the ConfigMap was skipped)."""
    data = config_map.get("data")
    text = data.get(DEVICE_CONFIG_KEY) if isinstance(data, Mapping) else None
    if not isinstance(text, str):
        return None, f"it has no data key {DEVICE_CONFIG_KEY}"
    config, issues = check_text(text)
    errors = [i for i in issues if i.severity == ERROR]
    if errors:
        return None, f"{DEVICE_CONFIG_KEY} is invalid ({errors[0].path}: {errors[0].problem})"
    return config.resources, ""


def from_config_maps(config_maps: Iterable[Mapping[str, Any]] | None) -> Names:
    """The names the labelled device-config ConfigMaps agree on; `None`: they could not be listed."""
    if config_maps is None:
        return Names(ResourceNames(), "defaults (device-config ConfigMaps could not be listed)")
    found: dict[ResourceNames, list[str]] = {}
    warnings: list[str] = []
    for config_map in config_maps:
        if not isinstance(config_map, Mapping):
            continue
        names, problem = _read(config_map)
        if names is None:
            warnings.append(f"{_name_of(config_map)} is skipped: {problem}")
        else:
            found.setdefault(names, []).append(_name_of(config_map))
    if not found:
        return Names(ResourceNames(), "defaults", tuple(warnings))
    if len(found) > 1:
        sides = "; ".join(f"{' and '.join(where[:MAX_SHOWN])} name {_label(n)}" for n, where in found.items())
        raise NamesError(
            f"the device-config ConfigMaps (label {SELECTOR}) name different resources: {sides}. Pass "
            "--device-config FILE with the device config of the dynmig serve you want to see"
        )
    ((names, where),) = found.items()
    return Names(names, where[0], tuple(warnings))
