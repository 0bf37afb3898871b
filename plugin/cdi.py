"""CDI specs: the files a container runtime reads to give a container its MIG device. The one place
of their rules, for the device plugin (plugin/migspecs.py) and the DRA plugin (plugin/dra/cdi.py).

As tags.cncf.io/container-device-interface reads them (github.com/cncf-tags/container-device-
interface: `SPEC.md`, `pkg/cdi/spec.go`, `pkg/cdi/cache.go`, `pkg/parser/parser.go`) and
containerd's CRI plugin hands them over (`WithCDI` in containerd's CRI `opts/spec_linux.go`, then
`pkg/cdi/oci_opt.go` `WithCDIDevices`):
- a spec is a `*.json` file in a spec directory (`/var/run/cdi` by default), read whole at each
  refresh; so it is written to a temporary file in the same directory whose name does not end in
  `.json` and renamed into place, as `pkg/cdi/spec.go` `write` does: the runtime never reads half;
- one spec per file, named as `pkg/cdi` `GenerateTransientSpecName` names a transient spec:
  `<vendor>-<class>_<id>.json`;
- `kind` is `vendor/class` (vendor a domain name, class letters, digits, `_` and `-`), a device's
  CDI name is `vendor/class=name`, and a name holds letters, digits, `_`, `-`, `.` and `:` only;
- `cdiVersion` 0.6.0, which every CDI release since v0.6.0 (containerd 1.7.x, 2.x; CRI-O 1.28+) reads.

The edits of a MIG device are what NVIDIA's toolkit writes for one (NVIDIA/nvidia-container-toolkit
`pkg/nvcdi/mig-device-nvml.go` with `internal/platform-support/dgpu`): the parent GPU's
`/dev/nvidia<minor>` and the two capability devices `/dev/nvidia-caps/nvidia-cap<N>` that grant
access to its GPU instance and compute instance, N read from the driver's
`/proc/driver/nvidia-caps/mig-minors` (`gpu<minor>/gi<GI>/access N`, `gpu<minor>/gi<GI>/ci<CI>/access
N`, as `internal/nvcaps` reads it), host paths under the driver's dev root. Each spec also carries
the control devices every CUDA process opens (`/dev/nvidiactl`, `/dev/nvidia-uvm`,
`/dev/nvidia-uvm-tools`, the toolkit's common edits) and `NVIDIA_VISIBLE_DEVICES=<MIG UUID>`, so the
NVIDIA runtime, where it runs the container, adds the driver's libraries for exactly that device.
The toolkit's hooks (`create-symlinks` for DRM by-path links, `chmod` of `/dev/nvidia-caps`) are
not written: a MIG device has no DRM node and the runtime creates the device nodes it is given.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CDI_VERSION = "0.6.0"
MIG_MINORS = Path("/proc/driver/nvidia-caps/mig-minors")
CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
_NAME_CHAR = re.compile(r"[^A-Za-z0-9_.:-]")
_VENDOR = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*[A-Za-z0-9]$")
_CLASS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
_MINOR_LINE = re.compile(r"^gpu(\d+)/gi(\d+)(?:/ci(\d+))?/access\s+(\d+)$")


class CdiError(RuntimeError):
    """A spec could not be written or its device described; the message says which and why."""


def device_name(text: str) -> str:
    """A CDI device name for `text` (a MIG UUID, a claim device): disallowed characters become `_`."""
    name = _NAME_CHAR.sub("_", text).strip("_.:-")
    if not name:
        raise CdiError(f"{text!r} gives no valid CDI device name")
    return name


@dataclass(frozen=True)
class MigDevice:
    """One MIG device as its spec describes it."""

    name: str  # the CDI device name, unique in its kind
    mig_uuid: str
    gpu_minor: int
    gi_id: int
    ci_id: int


def parse_mig_minors(text: str) -> dict[tuple[int, int, int | None], int]:
    """(GPU minor, GI, CI or None) -> capability device minor, from the driver's mig-minors table."""
    out: dict[tuple[int, int, int | None], int] = {}
    for line in text.splitlines():
        found = _MINOR_LINE.match(line.strip())
        if found:
            gpu, gi, ci, minor = found.groups()
            out[(int(gpu), int(gi), int(ci) if ci is not None else None)] = int(minor)
    return out


class MigEdits:
    """The container edits of MIG devices on this node: device nodes under `dev_root` (the NVIDIA
    driver root, `/` for a driver on the host), capability minors from `minors_file`."""

    def __init__(self, dev_root: Path = Path("/"), minors_file: Path | None = MIG_MINORS):
        """`minors_file` None: the edits name the device by NVIDIA_VISIBLE_DEVICES alone and the NVIDIA
        runtime adds its device nodes (the DRA plugin's specs until its lab carries the table)."""
        self.dev_root, self.minors_file = dev_root, minors_file
        self._minors: dict[tuple[int, int, int | None], int] = {}

    def _node(self, path: str) -> dict[str, str]:
        return {"path": path, "hostPath": str(self.dev_root / path.lstrip("/"))}

    def _minor(self, key: tuple[int, int, int | None]) -> int:
        assert self.minors_file is not None
        if key not in self._minors:  # the driver's table is fixed while it is loaded: read it once
            try:
                self._minors = parse_mig_minors(self.minors_file.read_text())
            except OSError as error:
                raise CdiError(
                    f"cannot read the driver's MIG capability table {self.minors_file}: {error.strerror}; "
                    "is the NVIDIA driver loaded and /proc/driver visible to the plugin?"
                ) from None
        if key not in self._minors:
            where = f"gpu{key[0]}/gi{key[1]}" + (f"/ci{key[2]}" if key[2] is not None else "")
            raise CdiError(f"{self.minors_file} has no line {where}/access")
        return self._minors[key]

    def common(self) -> dict[str, Any]:
        """Spec-wide edits: the control devices a CUDA process opens."""
        if self.minors_file is None:
            return {}
        return {"deviceNodes": [self._node(p) for p in CONTROL_DEVICES]}

    def device(self, d: MigDevice) -> dict[str, Any]:
        env = [f"NVIDIA_VISIBLE_DEVICES={d.mig_uuid}"]
        if self.minors_file is None:
            return {"env": env}
        gi_cap = self._minor((d.gpu_minor, d.gi_id, None))
        ci_cap = self._minor((d.gpu_minor, d.gi_id, d.ci_id))
        paths = [f"/dev/nvidia{d.gpu_minor}", f"/dev/nvidia-caps/nvidia-cap{gi_cap}"]
        paths.append(f"/dev/nvidia-caps/nvidia-cap{ci_cap}")
        return {
            "env": env,
            "deviceNodes": [self._node(p) for p in paths],
        }


class SpecDir:
    """The spec files of one kind in one directory, one file per `spec_id`."""

    def __init__(self, directory: Path, kind: str):
        vendor, _, cls = kind.partition("/")
        if not _VENDOR.match(vendor) or not _CLASS.match(cls):
            raise CdiError(f"CDI kind {kind!r} is not vendor/class (e.g. k8s.dynmig.io/mig)")
        self.directory, self.kind = directory, kind
        self._prefix = f"{vendor}-{cls}_"

    def qualified(self, name: str) -> str:
        return f"{self.kind}={name}"

    def path(self, spec_id: str) -> Path:
        return self.directory / f"{self._prefix}{device_name(spec_id)}.json"

    def ids(self) -> list[str]:
        """The ids of the specs of this kind now in the directory."""
        if not self.directory.is_dir():
            return []
        n = len(self._prefix)
        return sorted(p.name[n:-5] for p in self.directory.glob(f"{self._prefix}*.json"))

    def write(
        self, spec_id: str, devices: Sequence[tuple[str, dict[str, Any]]], common: dict[str, Any]
    ) -> Path:
        """Write (or replace) the spec `spec_id` with `devices` (name, container edits) atomically."""
        spec = {
            "cdiVersion": CDI_VERSION,
            "kind": self.kind,
            **({"containerEdits": common} if common else {}),
            "devices": [{"name": name, "containerEdits": edits} for name, edits in devices],
        }
        target = self.path(spec_id)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=f".{target.stem}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "w") as f:
                    json.dump(spec, f, indent=1)
                    f.flush()
                    os.fsync(f.fileno())
                os.chmod(tmp, 0o644)  # the runtime reads it as whatever user it runs as
                os.replace(tmp, target)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as error:
            raise CdiError(f"cannot write CDI spec {target}: {error.strerror or error}") from None
        return target

    def remove(self, spec_id: str) -> bool:
        """Remove the spec `spec_id`; True when there was one."""
        path = self.path(spec_id)
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        except OSError as error:
            raise CdiError(f"cannot remove CDI spec {path}: {error.strerror or error}") from None
        return True
