"""The node status sync a kubelet runs: every `interval` seconds (kubelet's
nodeStatusUpdateFrequency, 10 s by default: pkg/kubelet/apis/config/v1beta1/defaults.go) it asks its
device manager for each device-plugin resource's capacity and allocatable and patches the Node's
status when they changed.

What the device manager answers (pkg/kubelet/cm/devicemanager/manager.go): allocatable is the count
of healthy devices; when a plugin's endpoint goes (its socket closed, the process killed),
PluginDisconnected moves every device of the resource to unhealthy (markResourceUnhealthy), so the
next sync publishes allocatable 0 while capacity stays; GetCapacity drops the resource altogether
once the endpoint has been stopped for its grace period (endpointStopGracePeriod, 5 minutes); a new
registration and its first ListAndWatch make the devices healthy again, published at the next sync.
So a node keeps showing its old allocatable for up to one interval after its plugin died.
"""

from __future__ import annotations

import time
from typing import Any

from kubernetes import client

from sim.kubelet.kubelet import SimulatedKubelet
from sim.kubelet.periodic import Periodic

UPDATE_S = 10.0  # nodeStatusUpdateFrequency
STOP_GRACE_S = 300.0  # endpointStopGracePeriod


class NodeStatus(Periodic):
    def __init__(
        self, node: str, api_client: Any, kubelet: SimulatedKubelet, resource: str, interval: float = UPDATE_S
    ) -> None:
        self.node = node
        self.core = client.CoreV1Api(api_client)
        self.kubelet = kubelet
        self.resource = resource
        self.published: tuple[int, int] | None = None  # (capacity, allocatable) last written
        self.syncs = 0
        self._down_since: float | None = None
        super().__init__(f"kubelet-status-{node}", interval)

    def tick(self) -> None:
        self.sync()

    def counts(self) -> tuple[int, int] | None:
        """(capacity, allocatable) of the resource as GetCapacity reports it; None once dropped."""
        view = self.kubelet.resource(self.resource)
        if view is None:
            return None
        if view.connected:
            self._down_since = None
        else:
            self._down_since = self._down_since or time.monotonic()
            if time.monotonic() - self._down_since >= STOP_GRACE_S:
                return None
        return view.capacity, view.allocatable

    def sync(self) -> None:
        counts = self.counts()
        self.syncs += 1
        if counts is None or counts == self.published:
            return
        capacity, allocatable = counts
        body = {
            "status": {
                "capacity": {self.resource: str(capacity)},
                "allocatable": {self.resource: str(allocatable)},
            }
        }
        self.core.patch_node_status(self.node, body, _request_timeout=5)
        self.published = counts
