"""The NVIDIA driver's MIG capability table, `/proc/driver/nvidia-caps/mig-minors`, for a simulated
node: the file a real driver exposes and the device plugin reads to name the
`/dev/nvidia-caps/nvidia-cap<N>` nodes of a GPU instance and a compute instance.

Its layout as the driver writes it (NVIDIA MIG user guide, "Device Nodes and Capabilities";
the sample in NVIDIA/k8s-dra-driver-gpu `cmd/gpu-kubelet-plugin/nvlib.go`): `config 1`,
`monitor 2`, then per GPU minor G, per GI I (0 to 14): `gpu<G>/gi<I>/access <N>` followed by
`gpu<G>/gi<I>/ci<C>/access <N+1+C>` for C 0 to 7, numbered on from 3 (so `gpu3/gi3/ci3/access 439`).
"""

from __future__ import annotations

from pathlib import Path

GIS_PER_GPU = 15
CIS_PER_GI = 8


def mig_minors(gpus: int) -> str:
    lines = ["config 1", "monitor 2"]
    minor = 3
    for gpu in range(gpus):
        for gi in range(GIS_PER_GPU):
            lines.append(f"gpu{gpu}/gi{gi}/access {minor}")
            minor += 1
            for ci in range(CIS_PER_GI):
                lines.append(f"gpu{gpu}/gi{gi}/ci{ci}/access {minor}")
                minor += 1
    return "\n".join(lines) + "\n"


def write_mig_minors(path: Path, gpus: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(mig_minors(gpus))
    return path
