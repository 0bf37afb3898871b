"""Simulated kubelet: the device-plugin manager on unix sockets (Registration server, ListAndWatch
client, Allocate / GetPreferredAllocation / PreStartContainer like kubelet, restart) and the pod side
(`SimulatedPods`: admit pods bound to the node, run, stop and restart their containers), and the
DRA half: `PluginWatcher` (kubelet's plugin manager over plugins_registry/) registering DRA
drivers' plugins with a `DraManager`, which `SimulatedPods(dra=...)` uses to prepare and unprepare
pods' ResourceClaims."""

from sim.kubelet.dra import ClaimInfo, DraCall, DraError, DraManager
from sim.kubelet.kubelet import (
    ContainerAllocation,
    Options,
    PodAllocation,
    RegisterRecord,
    ResourceView,
    SimulatedKubelet,
)
from sim.kubelet.plugin_watcher import PluginWatcher, Registration
from sim.kubelet.pods import EXIT_CODE, IGNORE_SIGTERM, PodRecord, SimulatedPods
from sim.kubelet.runtime import Containers, SimulatedWorkload

__all__ = [
    "EXIT_CODE",
    "IGNORE_SIGTERM",
    "ClaimInfo",
    "ContainerAllocation",
    "Containers",
    "DraCall",
    "DraError",
    "DraManager",
    "Options",
    "PluginWatcher",
    "PodAllocation",
    "PodRecord",
    "RegisterRecord",
    "Registration",
    "ResourceView",
    "SimulatedKubelet",
    "SimulatedPods",
    "SimulatedWorkload",
]
