"""The pod rules dynmig applies in more than one place, each stated once.

- When a pod is *active*: two rules on purpose, one for the scheduler and one for the device plugin
  (`active_for_scheduler`, `active_for_plugin`; the docstring below says why they differ).
- What GPU a pod asks for (`gpu_request`, `names_gpu`): read from its containers' resources, init
  containers first, as HAMi reads them.
- What its record says (`PodRecord`): the reservation as HAMi's annotations wrote it on the pod,
  decoded once per copy of the pod.

Pure functions over pod JSON as the API server sends it. Fields of the wrong type read as absent
(admission and the extender check types at their boundary before they act on a pod).

Why two "active" rules. A pod being deleted (it has a `metadata.deletionTimestamp`) keeps running
for its grace period, and its containers may still use their MIG instances until it is terminal.

- The scheduler counts its reservation until the pod is terminal (Succeeded or Failed) or gone:
  while its instance may still exist, handing those slices to another pod would make that pod's
  create fail on the node. HAMi's scheduler does the same: `Scheduler.onAddPod` / `onUpdatePod`
  (pkg/scheduler/scheduler.go) drop a pod's usage when `util.IsPodInTerminatedState` (phase Failed
  or Succeeded) and keep it, "preserving cache", when only `util.IsPodTerminating` holds.
- The device plugin no longer treats a terminating pod as the owner of its instances: reclaim may
  destroy them (NVML refuses while a process runs, and the pass retries until the containers have
  stopped) and Allocate never serves it. HAMi's device plugin skips pods with a DeletionTimestamp
  as well as terminal ones when it collects live MIG allocations (`activeMigAllocationKeys` and
  `primeMigManagerFromAnnotations` in pkg/device-plugin/nvidiadevice/nvinternal/plugin/server.go,
  `activeMigGPUUUIDs` in mig_startup.go).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import Any

from mig.allowlist import ResourceNames
from mig.annotations import (
    BIND_PHASE,
    DEVICES_ALLOCATED,
    DEVICES_TO_ALLOCATE,
    MIG_ALLOCATIONS,
    VGPU_NODE,
    ContainerDevice,
    MigAllocation,
    decode_allocations,
    decode_devices,
    drain_container,
    split_devices,
)
from mig.placement.request import (
    ContainerRequest,
    PodRequest,
    RequestError,
    annotation_problem,
    container_request,
    devices_problem,
)

DEFAULT_SCHEDULER = "dynmig-scheduler"  # the schedulerName of dynmig's scheduler (the chart's default)
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
CONTAINER_FIELDS = ("initContainers", "containers")  # HAMi's order: init containers first


def _map(value: object) -> Mapping[str, Any]:
    if type(value) is dict:  # JSON objects: skip the (slower) abstract Mapping check
        return value
    return value if isinstance(value, Mapping) else {}


def metadata_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """An object's metadata ({} when absent or not a map)."""
    return _map(obj.get("metadata"))


def qualified_name(obj: Mapping[str, Any]) -> str:
    """ "namespace/name" of an object (either part "" when absent)."""
    meta = metadata_of(obj)
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """An object's annotations ({} when absent or not a map)."""
    return _map(metadata_of(obj).get("annotations"))


# ---------------------------------------------------------------- active


def phase_of(pod: Mapping[str, Any]) -> str:
    phase = _map(pod.get("status")).get("phase")
    return phase if isinstance(phase, str) else ""


def is_terminal(phase: str | None) -> bool:
    """The pod has ended (Succeeded or Failed): no container of it runs again."""
    return phase in TERMINAL_PHASES


def is_terminating(pod: Mapping[str, Any]) -> bool:
    """The pod is being deleted (it has a deletionTimestamp); its containers may still run."""
    return bool(metadata_of(pod).get("deletionTimestamp"))


def active_for_scheduler(pod: Mapping[str, Any]) -> bool:
    """The scheduler counts what the pod holds: it is not terminal (terminating pods still count)."""
    return not is_terminal(phase_of(pod))


def is_waiting(pod: Mapping[str, Any]) -> bool:
    """The pod waits for a node: none bound, not ended, not being deleted."""
    return not _map(pod.get("spec")).get("nodeName") and active_for_scheduler(pod) and not is_terminating(pod)


def not_scheduled(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """kube-scheduler's last word on a pod it could not place: its PodScheduled=False condition."""
    conditions = _map(pod.get("status")).get("conditions")
    for cond in conditions if isinstance(conditions, list) else ():
        if isinstance(cond, Mapping) and cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return cond
    return None


def active_for_plugin(phase: str | None, terminating: bool) -> bool:
    """The device plugin treats the pod as the owner of its instances: not terminal, not terminating."""
    return not terminating and not is_terminal(phase)


# ---------------------------------------------------------------- the GPU request

Container = tuple[str, int, Mapping[str, Any]]  # (field, index in that field, container)


def containers(pod: Mapping[str, Any]) -> list[Container]:
    """(field, index, container) for init containers first, then app containers (HAMi order)."""
    spec = _map(pod.get("spec"))
    out: list[Container] = []
    for key in CONTAINER_FIELDS:
        items = spec.get(key) or []
        if isinstance(items, list):
            out.extend((key, i, c) for i, c in enumerate(items) if isinstance(c, Mapping))
    return out


def resources(container: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    """The container's `resources.limits` or `resources.requests` ({} when absent)."""
    return _map(_map(container.get("resources")).get(kind))


def container_label(key: str, index: int, container: Mapping[str, Any]) -> str:
    """The container's name for messages (its field path when the name is missing or not a string)."""
    name = container.get("name")
    return name[:253] if isinstance(name, str) and name else f"{key}[{index}]"


def names_gpu(container: Mapping[str, Any], names: ResourceNames) -> bool:
    """The container names a GPU resource (device count, memory or memory share), even at 0: the
    pod is then dynmig's to route and complete at admission."""
    wanted = (names.count, names.memory, names.memory_percentage)
    return any(n in resources(container, k) for k in ("limits", "requests") for n in wanted)


def read_container(
    key: str, index: int, container: Mapping[str, Any], names: ResourceNames
) -> ContainerRequest:
    """One container's GPU request; RequestError names the container and the resource."""
    return container_request(
        container_label(key, index, container),
        resources(container, "limits"),
        resources(container, "requests"),
        names,
    )


def gpu_request(pod: Mapping[str, Any], names: ResourceNames) -> PodRequest | None:
    """What GPU the pod asks for (per container, init containers first, with its scheduling
    annotations), or None when no container asks for a device.

    RequestError names what cannot be read or can never fit: a container's resources, the devices
    of all containers together, or an over-long scheduling annotation."""
    requests = [read_container(key, i, c, names) for key, i, c in containers(pod)]
    if not any(r.devices for r in requests):
        return None
    meta = metadata_of(pod)
    annotations = annotations_of(pod)
    problem = devices_problem(requests, names.count) or annotation_problem(annotations)
    if problem:
        raise RequestError(problem)
    return PodRequest.from_annotations(
        requests, annotations, name=f"{meta.get('namespace')}/{meta.get('name')}"
    )


# ---------------------------------------------------------------- the record


class PodRecord:
    """A pod's record: its reservation as HAMi's protocol writes it on the pod (the scheduler's
    in-memory reservation is webhooks/fleet.py's `Reservation`), each annotation decoded at most
    once (on first use). The decoding properties raise AnnotationError naming the annotation."""

    def __init__(self, annotations: Mapping[str, Any]) -> None:
        self.annotations = annotations

    def _text(self, key: str) -> str | None:
        value = self.annotations.get(key)
        return value if isinstance(value, str) else None

    @property
    def node(self) -> str:
        """`hami.io/vgpu-node`: the node the scheduler reserved on ("" when none)."""
        return self._text(VGPU_NODE) or ""

    @property
    def bind_phase(self) -> str:
        return self._text(BIND_PHASE) or ""

    @cached_property
    def allocations(self) -> tuple[MigAllocation, ...]:
        """`hami.io/vgpu-mig-allocations`: the reserved MIG instances (strict: any bad entry raises)."""
        return decode_allocations(self._text(MIG_ALLOCATIONS))

    @property
    def holds_instance(self) -> bool:
        """A reservation carries a runtime identity: a MIG instance exists for it on the node."""
        return any(
            a.migUUID is not None or a.gpuInstanceID is not None or a.computeInstanceID is not None
            for a in self.allocations
        )

    @cached_property
    def allocated(self) -> tuple[tuple[ContainerDevice, ...], ...]:
        """`hami.io/vgpu-devices-allocated`, per container."""
        return tuple(tuple(c) for c in decode_devices(self._text(DEVICES_ALLOCATED), DEVICES_ALLOCATED))

    @cached_property
    def _pieces(self) -> tuple[tuple[ContainerDevice, ...], ...]:
        return tuple(tuple(c) for c in split_devices(self._text(DEVICES_TO_ALLOCATE)))

    @cached_property
    def to_allocate(self) -> tuple[tuple[ContainerDevice, ...], ...]:
        """`hami.io/vgpu-devices-to-allocate`, per container: what Allocate has still to serve."""
        text = self._text(DEVICES_TO_ALLOCATE)
        return self._pieces[:-1] if text and text.endswith(";") else self._pieces

    def next_container(self) -> tuple[int, list[ContainerDevice]] | None:
        """The first container that still has devices to allocate (init containers first), or None."""
        return next(((i, list(d)) for i, d in enumerate(self.to_allocate) if d), None)

    def drained(self, container_index: int) -> str:
        """`hami.io/vgpu-devices-to-allocate` once Allocate served this container, as HAMi writes it."""
        if not self._pieces:
            return ""
        return drain_container([list(p) for p in self._pieces], container_index)

    def left_after(self, container_index: int) -> bool:
        """Another container still has devices to allocate once this one is served."""
        return any(d for i, d in enumerate(self.to_allocate) if i != container_index)


PodReservation = PodRecord  # the former name, still imported by mig/reconstruct.py (another owner's file)
