"""Neighbours on the node that manage the same GPUs: detected, never fought.

Two components of NVIDIA's GPU Operator do what dynmig's device plugin does:
- NVIDIA's device plugin registers `nvidia.com/gpu` with kubelet too. kubelet keeps one plugin per
  resource name, the later registration replacing the earlier (pkg/kubelet/cm/devicemanager
  `registerEndpoint`). What shows it on a real node is kubelet's own answer: its PodResources
  `GetAllocatableResources` (GA in 1.28; pkg/kubelet/apis/podresources/server_v1.go, from the device
  manager's `GetAllocatableDevices`, every device of the resource's current plugin) lists device IDs
  for our resource name that are not ours (ours are `<GPU UUID>-<n>`; NVIDIA's are GPU or MIG UUIDs,
  or `<UUID>::<n>` replicas). Socket files prove nothing (any name, and NVIDIA's default
  `nvidia-gpu.sock` is ours too); the node's allocatable count cannot tell whose devices it counts.
- MIG Manager re-lays a GPU's MIG instances when the node's `nvidia.com/mig.config` label changes,
  and reports in `nvidia.com/mig.config.state`: either label on the node means it works here, unless
  the node opts out with `nvidia.com/gpu.deploy.mig-manager=false` (GPU Operator's per-node switch).

While a neighbour is there the plugin creates, destroys and cleans nothing, does not register (a
registration would take `nvidia.com/gpu` from the other plugin) and fails Allocate; it says why in a
Node Event, `dynmig_plugin_node_refused{reason}`, and the node annotation `dynmig.io/plugin-refused`
that `dynmig status` shows, each naming the fix. It checks again every reconcile period.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import grpc

from mig.annotations import PLUGIN_REFUSED
from plugin.api import podresources_pb2 as pb
from plugin.api import podresources_pb2_grpc as rpc
from plugin.events import PodEvents
from plugin.kube import Kube, KubeError
from plugin.metrics import PluginMetrics

log = logging.getLogger("dynmig.plugin.neighbours")

MIG_CONFIG = "nvidia.com/mig.config"
MIG_CONFIG_STATE = "nvidia.com/mig.config.state"
DEPLOY_MIG_MANAGER = "nvidia.com/gpu.deploy.mig-manager"
DEPLOY_DEVICE_PLUGIN = "nvidia.com/gpu.deploy.device-plugin"
REASONS = ("mig-manager", "other-device-plugin")
TIMEOUT_S = 2.0
_OURS = re.compile(r"^(?P<gpu>.+)-(?P<n>\d+)$")


@dataclass(frozen=True)
class Refusal:
    reason: str  # one of REASONS
    message: str  # what was seen, and the fix


def mig_manager(node: str, labels: dict[str, str]) -> Refusal | None:
    """MIG Manager works on this node: its labels are there and the node does not opt out."""
    seen = [f"{k}={labels[k]}" for k in (MIG_CONFIG, MIG_CONFIG_STATE) if k in labels]
    if not seen or labels.get(DEPLOY_MIG_MANAGER) == "false":
        return None
    return Refusal(
        "mig-manager",
        f"NVIDIA MIG Manager manages this node's MIG layout ({', '.join(seen)}); dynmig creates and "
        "destroys instances itself and leaves the GPUs alone while MIG Manager may re-lay them. Fix: "
        f"GPU Operator value migManager.enabled=false, or on this node `kubectl label node {node} "
        f"{DEPLOY_MIG_MANAGER}=false {MIG_CONFIG}- {MIG_CONFIG_STATE}-`",
    )


def other_plugin(node: str, resource: str, kubelet_ids: Iterable[str], gpu_uuids: set[str]) -> Refusal | None:
    """kubelet's allocatable devices of `resource` include some that are not ours."""
    foreign = sorted(
        d for d in set(kubelet_ids) if not ((m := _OURS.match(d)) and m.group("gpu") in gpu_uuids)
    )
    if not foreign:
        return None
    shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
    return Refusal(
        "other-device-plugin",
        f"another device plugin is registered with kubelet for {resource} on this node (kubelet "
        f"lists devices {shown}, which are not dynmig's); dynmig does not register over it. Fix: "
        "GPU Operator value devicePlugin.enabled=false, or on this node `kubectl label node "
        f"{node} {DEPLOY_DEVICE_PLUGIN}=false`",
    )


class KubeletDevices:
    """kubelet's allocatable devices per resource name (PodResources GetAllocatableResources)."""

    def __init__(self, socket: str, timeout: float = TIMEOUT_S):
        self.socket = socket
        self._channel = grpc.insecure_channel(f"unix://{socket}")
        self._stub = rpc.PodResourcesListerStub(self._channel)
        self.timeout = timeout

    def of(self, resource: str) -> list[str] | None:
        """The device IDs kubelet holds for `resource`; None when kubelet does not answer."""
        try:
            answer = self._stub.GetAllocatableResources(
                pb.AllocatableResourcesRequest(), timeout=self.timeout
            )
        except grpc.RpcError as error:
            log.debug("PodResources GetAllocatableResources on %s: %s", self.socket, error.code().name)
            return None
        return [i for d in answer.devices if d.resource_name == resource for i in d.device_ids]

    def close(self) -> None:
        self._channel.close()


class Neighbours:
    def __init__(
        self,
        kube: Kube,
        resource: str,
        gpu_uuids: Callable[[], set[str]],
        metrics: PluginMetrics,
        events: PodEvents,
        kubelet: KubeletDevices | None,
    ):
        self.kube, self.resource, self.gpu_uuids = kube, resource, gpu_uuids
        self.metrics, self.events, self.kubelet = metrics, events, kubelet
        self.refusal: Refusal | None = None

    @property
    def refused(self) -> bool:
        return self.refusal is not None

    def check(self) -> Refusal | None:
        """Look again; on a change, say so (log, Event, metric, node annotation). An API error keeps
        the last verdict (nothing is touched on a guess)."""
        try:
            node = self.kube.get_node()
        except KubeError as error:
            log.warning("cannot read this node to look for neighbours (%s); keeping the last verdict", error)
            return self.refusal
        found = mig_manager(node.name, dict(node.labels))
        if found is None and self.kubelet is not None:
            ids = self.kubelet.of(self.resource)
            uuids = self.gpu_uuids()
            if ids is not None and uuids:
                found = other_plugin(node.name, self.resource, ids, uuids)
            elif self.refusal is not None and self.refusal.reason == "other-device-plugin":
                found = self.refusal  # kubelet did not answer: no news
        self._say(node.name, found)
        self._publish(node.annotations.get(PLUGIN_REFUSED), found)
        return self.refusal

    def _say(self, node: str, found: Refusal | None) -> None:
        before, self.refusal = self.refusal, found
        for reason in REASONS:
            self.metrics.refused.labels(reason=reason).set(1 if found and found.reason == reason else 0)
        if found == before:
            return
        if found is not None:
            log.error("leaving this node's GPUs alone: %s", found.message)
            self.events.node(node, True, f"dynmig leaves this node's GPUs alone: {found.message}")
        else:
            log.info("no neighbour manages this node's GPUs any more: serving them again")
            self.events.node(node, False, "no other component manages this node's GPUs: dynmig serves them")

    def _publish(self, current: str | None, found: Refusal | None) -> None:
        want = f"{found.reason}: {found.message}" if found else None
        if current == want:
            return
        try:
            self.kube.patch_node_annotations({PLUGIN_REFUSED: want})
        except KubeError as error:
            log.warning("could not publish %s: %s", PLUGIN_REFUSED, error)
