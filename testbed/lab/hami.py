"""What a HAMi v2.10 install brings to a handover, as the lab's fixtures: its chart's default
device config and its components' identities.

The device config is HAMi v2.10.0's chart default (charts/hami/templates/scheduler/device-configmap.yaml
with the chart's default values: the `nvidia:` section and its migProfileAllowlist, HAMi's model
strings and profile names unchanged), the file a HAMi user points dynmig at during a handover.
"""

from __future__ import annotations

import time
from pathlib import Path

from mig.annotations import (
    BIND_PHASE,
    BIND_TIME,
    DEVICES_ALLOCATED,
    DEVICES_TO_ALLOCATE,
    MIG_ALLOCATIONS,
    VGPU_NODE,
    VGPU_TIME,
    ContainerDevice,
    MigAllocation,
    encode_allocations,
    encode_devices,
)

NAMESPACE = "kube-system"  # where HAMi's chart is installed in docs/migrating-from-hami.md
SCHEDULER_ACCOUNT = "hami-scheduler"
DEVICE_PLUGIN_ACCOUNT = "hami-device-plugin"
SCHEDULER_NAME = "hami-scheduler"


def account(name: str) -> str:
    return f"system:serviceaccount:{NAMESPACE}:{name}"


# allocationWriters of docs/migrating-from-hami.md ("Let HAMi keep working while both run")
ALLOCATION_WRITERS = (account(SCHEDULER_ACCOUNT), account(DEVICE_PLUGIN_ACCOUNT))

# HAMi v2.10's chart default device config, as rendered from its chart (the file names its source)
V2_10_FILE = Path(__file__).with_name("hami-v2.10-chart-device-config.yaml")
V2_10_DEVICE_CONFIG = V2_10_FILE.read_text()


def reservation(
    node: str, gpu_uuid: str, profile: str, start: int, size: int, memory: int
) -> dict[str, str | None]:
    """The annotations HAMi v2.10's scheduler writes on a pod at filter and bind time for one MIG
    device (pkg/scheduler/scheduler.go, pkg/device/nvidia/device.go: vgpu-node, the devices to
    allocate, the MIG allocation, bind-phase "allocating")."""
    devices = encode_devices([[ContainerDevice(gpu_uuid, "NVIDIA", memory, 0)]])
    allocation = MigAllocation.model_validate(
        {
            "containerIndex": 0,
            "deviceIndex": 0,
            "gpuUUID": gpu_uuid,
            "profile": profile,
            "placement": {"start": start, "size": size},
        }
    )
    now = str(int(time.time()))
    return {
        VGPU_NODE: node,
        VGPU_TIME: now,
        DEVICES_TO_ALLOCATE: devices,
        DEVICES_ALLOCATED: devices,
        MIG_ALLOCATIONS: encode_allocations([allocation]) or "",
        BIND_PHASE: "allocating",
        BIND_TIME: now,
    }


# The allowlist the hami-handover scenario installs dynmig with: what a HAMi user brings.
HANDOVER_DEVICE_CONFIG: str | None = V2_10_DEVICE_CONFIG
