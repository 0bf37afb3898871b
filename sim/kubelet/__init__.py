"""Simulated kubelet (device-plugin manager side) on unix sockets: Registration server,
ListAndWatch client, Allocate / GetPreferredAllocation / PreStartContainer like kubelet, restart."""

from sim.kubelet.kubelet import (
    ContainerAllocation,
    Options,
    PodAllocation,
    RegisterRecord,
    ResourceView,
    SimulatedKubelet,
)

__all__ = ["ContainerAllocation", "Options", "PodAllocation", "RegisterRecord", "ResourceView", "SimulatedKubelet"]
