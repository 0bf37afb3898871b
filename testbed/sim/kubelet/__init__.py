"""Simulated kubelet: the device-plugin manager on unix sockets (Registration server, ListAndWatch
client, Allocate / GetPreferredAllocation / PreStartContainer like kubelet, restart) and the pod side
(`SimulatedPods`: admit pods bound to the node, run, stop and restart their containers)."""

from sim.kubelet.kubelet import (
    ContainerAllocation,
    Options,
    PodAllocation,
    RegisterRecord,
    ResourceView,
    SimulatedKubelet,
)
from sim.kubelet.pods import EXIT_CODE, IGNORE_SIGTERM, PodRecord, SimulatedPods
from sim.kubelet.runtime import Containers, SimulatedWorkload

__all__ = [
    "EXIT_CODE",
    "IGNORE_SIGTERM",
    "ContainerAllocation",
    "Containers",
    "Options",
    "PodAllocation",
    "PodRecord",
    "RegisterRecord",
    "ResourceView",
    "SimulatedKubelet",
    "SimulatedPods",
    "SimulatedWorkload",
]
