"""Simulated NVML under nvidia-ml-py: the node's GPUs, MIG instances and driver rules.

Public API: `SimulatedNvml` (see simulator.py), the view types `SimGpu`, `SimGpuInstance`,
`SimComputeInstance`, `SpecError`, and the NVML return codes in `sim.nvml.codes`.
"""

from sim.nvml.simulator import SimulatedNvml
from sim.nvml.spec import SpecError
from sim.nvml.views import SimComputeInstance, SimGpu, SimGpuInstance, SimProcess

__all__ = ["SimComputeInstance", "SimGpu", "SimGpuInstance", "SimProcess", "SimulatedNvml", "SpecError"]
