"""What a HAMi v2.10 install brings to a handover, as the lab's fixtures: its chart's default
device config and its components' identities.

The device config is HAMi v2.10.0's chart default (charts/hami/templates/scheduler/device-configmap.yaml
with the chart's default values: the `nvidia:` section and its migProfileAllowlist, HAMi's model
strings and profile names unchanged), the file a HAMi user points dynmig at during a handover.
"""

from __future__ import annotations

import time

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

V2_10_DEVICE_CONFIG = """\
nvidia:
  resourceCountName: nvidia.com/gpu
  resourceMemoryName: nvidia.com/gpumem
  resourceMemoryPercentageName: nvidia.com/gpumem-percentage
  resourceCoreName: nvidia.com/gpucores
  resourcePriorityName: nvidia.com/priority
  overwriteEnv: false
  defaultMemory: 0
  defaultCores: 0
  defaultGPUNum: 1
  deviceSplitCount: 10
  deviceMemoryScaling: 1
  deviceCoreScaling: 1
  gpuCorePolicy: default
  libCudaLogLevel: 1
  migProfileAllowlist:
    - models: ["A30"]
      profiles: ["1g.6gb", "2g.12gb", "4g.24gb"]
    - models: ["A100-SXM4-40GB", "A100-40GB-PCIe", "A100-PCIE-40GB"]
      profiles: ["1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb"]
    - models: ["A100-SXM4-80GB", "A100-80GB-PCIe", "A100-PCIE-80GB"]
      profiles: ["1g.10gb", "2g.20gb", "3g.40gb", "7g.79gb"]
    - models: ["H100-PCIE-80GB", "H100-SXM5-80GB"]
      profiles: ["1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"]
    - models: ["H100-PCIE-94GB", "H100-SXM5-94GB"]
      profiles: ["1g.12gb", "2g.24gb", "3g.47gb", "7g.94gb"]
    - models: ["H20", "H100 on GH200"]
      profiles: ["1g.12gb", "2g.24gb", "3g.48gb", "7g.96gb"]
    - models: ["H200 NVL", "H200-SXM5"]
      profiles: ["1g.18gb", "2g.35gb", "3g.71gb", "7g.141gb"]
    - models: ["B200"]
      profiles: ["1g.23gb", "2g.45gb", "3g.90gb", "7g.180gb"]
    - models: ["RTX PRO 6000 Blackwell Server Edition"]
      profiles: ["1g.24gb", "2g.48gb", "4g.96gb"]
"""


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


# The allowlist the hami-handover scenario installs dynmig with. HAMi's own (V2_10_DEVICE_CONFIG) is
# what a HAMi user brings; `dynmig policy check` refuses it today (7g.79gb, the H20 entry matching
# H200, catalog models it does not name), so until dynmig loads what HAMi loads the scenario runs
# with the chart's default allowlist (None), which carries HAMi v2.10's default profiles with model
# strings that match. Set this to V2_10_DEVICE_CONFIG once dynmig loads it.
HANDOVER_DEVICE_CONFIG: str | None = None
