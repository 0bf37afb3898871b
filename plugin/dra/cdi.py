"""CDI specs for prepared claims: the file the container runtime reads to give a container its MIG
device (`NVIDIA_VISIBLE_DEVICES=<MIG UUID>`, as NVIDIA's container toolkit reads it).

One spec file per prepared claim, `<dir>/dynmig-<claim uid>.json`, CDI spec version 0.6.0, kind
`k8s.<driver>/claim`, one device per prepared device named `<claim uid>-<device>`; its CDI ID is
`k8s.<driver>/claim=<claim uid>-<device>`. Written atomically (temporary file, fsync, rename), so
the runtime never reads half a spec; removed when the claim is unprepared.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

CDI_VERSION = "0.6.0"


@dataclass(frozen=True)
class CdiDevice:
    device: str  # the DRA device name
    mig_uuid: str


class CdiSpecs:
    def __init__(self, directory: Path, driver: str):
        self.directory = directory
        self.kind = f"k8s.{driver}/claim"

    def device_id(self, claim_uid: str, device: str) -> str:
        return f"{self.kind}={claim_uid}-{device}"

    def path(self, claim_uid: str) -> Path:
        return self.directory / f"dynmig-{claim_uid}.json"

    def write(self, claim_uid: str, devices: Sequence[CdiDevice]) -> list[str]:
        """Write the claim's spec; the CDI IDs of its devices, in order."""
        spec = {
            "cdiVersion": CDI_VERSION,
            "kind": self.kind,
            "devices": [
                {
                    "name": f"{claim_uid}-{d.device}",
                    "containerEdits": {"env": [f"NVIDIA_VISIBLE_DEVICES={d.mig_uuid}"]},
                }
                for d in devices
            ],
        }
        self.directory.mkdir(parents=True, exist_ok=True)
        target = self.path(claim_uid)
        tmp = target.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(spec, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
        return [self.device_id(claim_uid, d.device) for d in devices]

    def remove(self, claim_uid: str) -> None:
        self.path(claim_uid).unlink(missing_ok=True)
