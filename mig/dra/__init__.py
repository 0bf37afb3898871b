"""MIG devices for Dynamic Resource Allocation: what a DRA driver publishes, and in which order.

Pure (no I/O). `devices`: the devices, counters and names NVIDIA's DRA driver publishes for a MIG
GPU; `steer`: the same devices ordered by dynmig's placement engine for the current
occupancy; `slices`: the `resource.k8s.io/v1` ResourceSlice objects of a node, natural or steered.
See docs/dra.md.
"""

from mig.dra.devices import Gpu, Instance, MigDevice, counter_set, device_name, natural_devices
from mig.dra.slices import natural_slices, steered_slices, validate_slice
from mig.dra.steer import Steered, steer

__all__ = [
    "Gpu",
    "Instance",
    "MigDevice",
    "Steered",
    "counter_set",
    "device_name",
    "natural_devices",
    "natural_slices",
    "steer",
    "steered_slices",
    "validate_slice",
]
