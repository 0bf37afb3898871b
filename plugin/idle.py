"""Idle reuse: an ended pod's MIG instance may stay, idle, for a later pod whose reservation names
exactly its profile and placement, so that pod's Allocate creates nothing.

The rules (docs/startup.md explains them and what they cost):
- kept only when its pod is terminal or gone from a complete pod list (a terminating pod's
  containers may still run), NVML shows no process on it, it is whole (GI, CI, MIG UUID), the
  journal records it as idle first, and its GPU keeps fewer than `per_gpu` idle instances;
- handed over only for an exact match (GPU, profile, placement), by default only to a pod of the
  namespace its last user was in (`scope` "any" widens that), and only while NVML shows no process
  on it (checked again at the hand-over, under the GPU's lock);
- destroyed when its TTL is over, when a process appears on it (then it is reclaimed as before),
  and in Allocate when a reservation overlaps it without being served by it (it is ours, journaled
  and runs nothing: destroying it is not a guess);
- published in `dynmig.io/node-idle-instances` (mig/idle.py) and not as a leftover: the scheduler
  counts it as free for every profile.
Warm-pool instances (plugin/warm.py) are idle instances no pod has used yet (owner `WARM_OWNER`): any
namespace may get one, and the pool, not the TTL, decides how long they stay.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from mig.idle import IDLE, IdleInstance, encode_idle
from plugin.instances import InstanceKey, ManagedInstance
from plugin.journal import UNKNOWN, Owner
from plugin.kube import Kube, NodeAnnotationWriter
from plugin.metrics import PluginMetrics

NAMESPACE, ANY = "namespace", "any"
WARM_UID = "dynmig.io/warm-pool"  # the owner of a warm-pool instance (plugin/warm.py); no pod UID looks so
WARM_OWNER = Owner(WARM_UID, UNKNOWN, "warm-pool")  # no namespace: no pod used it


def is_warm(instance: ManagedInstance | None) -> bool:
    """Created by the warm pool and never handed to a pod."""
    return instance is not None and instance.owner is not None and instance.owner.pod_uid == WARM_UID


@dataclass(frozen=True)
class IdlePolicy:
    ttl: float = 0.0  # seconds; 0 = reuse off
    per_gpu: int = 2
    scope: str = NAMESPACE
    clock: Callable[[], float] = field(default=time.time, compare=False)  # wall clock (the journal's)

    @property
    def enabled(self) -> bool:
        return self.ttl > 0

    def room(self, parked_on_gpu: int) -> bool:
        """Whether a GPU already keeping `parked_on_gpu` idle instances may park one more."""
        return parked_on_gpu < self.per_gpu

    def serves(self, instance: ManagedInstance, key: InstanceKey, namespace: str) -> bool:
        """Whether the idle `instance` may be handed to a pod of `namespace` reserving `key`."""
        if not (self.enabled and instance.idle and instance.key == key):
            return False
        if self.scope == ANY or is_warm(instance):
            return True  # a warm instance had no user yet: the namespace rule is about successive users
        return instance.owner is not None and instance.owner.namespace == namespace

    def expired(self, instance: ManagedInstance) -> bool:
        """Past the TTL; never for a warm instance (the warm pool keeps or trims those)."""
        if is_warm(instance):
            return False
        return instance.idle_since is not None and self.clock() - instance.idle_since >= self.ttl

    def why_not(self, instance: ManagedInstance, owner: Owner, key: InstanceKey) -> str:
        """The miss reason when the idle `instance` overlaps `key` but does not serve it."""
        if instance.key != key:
            return "other-placement"
        if is_warm(instance):
            return ""
        return (
            "other-namespace" if instance.owner is None or instance.owner.namespace != owner.namespace else ""
        )


def idle_list(instances: list[ManagedInstance]) -> list[IdleInstance]:
    return [
        IdleInstance.of(m.key.gpu_uuid, m.key.profile, m.key.placement, m.idle_since or 0.0)
        for m in instances
        if m.idle
    ]


class IdlePublisher:
    """Writes `dynmig.io/node-idle-instances` when it changed (an empty list removes it)."""

    def __init__(self, kube: Kube, metrics: PluginMetrics):
        self.metrics = metrics
        self.writer = NodeAnnotationWriter(kube, IDLE)

    def publish(self, instances: list[IdleInstance]) -> bool:
        self.metrics.idle_instances.set(len(instances))
        return self.writer.write(encode_idle(instances) if instances else None)
