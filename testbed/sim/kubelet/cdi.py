"""The container runtime's part of CDI that the simulated containers need: turning the CDI device
IDs kubelet passes (`vendor/class=name`) into the environment the runtime injects, read from the
CDI spec files the DRA driver wrote.

Checked against tags.cncf.io/container-device-interface (github.com/cncf-tags/container-device-
interface) `pkg/cdi/cache.go` (`InjectDevices`: every device must resolve, else "unresolvable CDI
devices ..."), `pkg/cdi/spec.go` (spec files `*.json` / `*.yaml` in the spec dirs, `kind` is
`vendor/class`, later dirs override earlier ones), `pkg/cdi/container-edits.go` (the spec's
`containerEdits` apply with each of its devices' own, env entries `KEY=VALUE`) and
`pkg/parser/parser.go` (a qualified name is `vendor/class=name`).

What a device plugin's Allocate answer asks of the runtime: containerd's CRI `WithCDI`
(`internal/cri/opts/spec_linux.go`; `pkg/cri/opts/spec_linux.go` in 1.7) takes the CRI `CDIDevices`
field, then the names of `cdi.k8s.io/*` annotations (`pkg/cdi/annotations.go` `ParseAnnotations`:
comma-separated qualified names), and injects them all through `pkg/cdi/oci_opt.go`
`WithCDIDevices`, whose failure it reports as "CDI device injection failed: ..." and kubelet as
"failed to create containerd container: ..." (reason CreateContainerError, HAMi issue #1903 shows it
on a real node).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml


class CdiError(Exception):
    pass


def _specs(dirs: list[Path]) -> dict[str, list[str]]:
    """Qualified device name -> env entries (spec-wide first, then the device's)."""
    out: dict[str, list[str]] = {}
    for directory in dirs:
        paths = sorted(p for p in directory.glob("*") if p.suffix in (".json", ".yaml", ".yml"))
        for path in paths:
            try:
                spec = (
                    json.loads(path.read_text())
                    if path.suffix == ".json"
                    else yaml.safe_load(path.read_text())
                )
            except (OSError, ValueError, yaml.YAMLError):
                continue  # the runtime skips a spec it cannot read and reports it
            if not isinstance(spec, dict) or not isinstance(spec.get("kind"), str):
                continue
            common = _env(spec.get("containerEdits"))
            for device in spec.get("devices") or []:
                if isinstance(device, dict) and isinstance(device.get("name"), str):
                    out[f"{spec['kind']}={device['name']}"] = common + _env(device.get("containerEdits"))
    return out


def _env(edits: Any) -> list[str]:
    env = edits.get("env") if isinstance(edits, dict) else None
    return [e for e in env if isinstance(e, str) and "=" in e] if isinstance(env, list) else []


ANNOTATION_PREFIX = "cdi.k8s.io/"


def requested(answer: Any) -> list[str]:
    """The CDI devices a device plugin's container answer asks the runtime for, in containerd's order
    (the CRI field, then the annotations by key), each once."""
    names = [d.name for d in answer.cdi_devices]
    for key, value in sorted(dict(answer.annotations).items()):
        if key.startswith(ANNOTATION_PREFIX):
            names += [n.strip() for n in value.split(",") if n.strip()]
    return list(dict.fromkeys(names))


def inject(dirs: list[Path], device_ids: list[str]) -> tuple[dict[str, str], list[str]]:
    """The environment a container gets for `device_ids` (a later entry of a key wins, as the
    runtime applies the edits in turn) and every env entry that was applied, in order (where the
    MIG devices of several CDI devices can all be read); CdiError when any does not resolve."""
    known = _specs(dirs)
    missing = [d for d in device_ids if d not in known]
    if missing:
        raise CdiError(f"unresolvable CDI devices {', '.join(missing)}")
    env: dict[str, str] = {}
    applied: list[str] = []
    for device in device_ids:
        for entry in known[device]:
            key, _, value = entry.partition("=")
            env[key] = value
            applied.append(entry)
    return env, applied
