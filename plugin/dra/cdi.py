"""CDI specs for prepared claims, written by the rules of plugin/cdi.py.

One spec file per prepared claim, `<dir>/k8s.<driver>-claim_<claim uid>.json`, kind
`k8s.<driver>/claim`, one device per prepared device named `<claim uid>-<device>`; its CDI ID is
`k8s.<driver>/claim=<claim uid>-<device>`. Written atomically, removed when the claim is unprepared
(with the `dynmig-<claim uid>.json` an earlier release named it).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from plugin.cdi import MigDevice, MigEdits, SpecDir, device_name


class CdiSpecs:
    def __init__(self, directory: Path, driver: str, edits: MigEdits | None = None):
        self.specs = SpecDir(directory, f"k8s.{driver}/claim")
        self.edits = edits or MigEdits(minors_file=None)

    @staticmethod
    def device_name(claim_uid: str, device: str) -> str:
        return device_name(f"{claim_uid}-{device}")

    def path(self, claim_uid: str) -> Path:
        return self.specs.path(claim_uid)

    def write(self, claim_uid: str, devices: Sequence[MigDevice]) -> list[str]:
        """Write the claim's spec; the CDI IDs of its devices, in order."""
        self.specs.write(claim_uid, [(d.name, self.edits.device(d)) for d in devices], self.edits.common())
        return [self.specs.qualified(d.name) for d in devices]

    def remove(self, claim_uid: str) -> None:
        self.specs.remove(claim_uid)
        (self.specs.directory / f"dynmig-{claim_uid}.json").unlink(missing_ok=True)
