"""What a person does against the lab, as functions: make GPU pods, wait for them, read what
dynmig recorded (allocation annotation, events) and what the simulated GPUs hold.

Used by the scenarios and by the end-to-end tests; everything goes through the official client.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from kubernetes import client

from kube.rest import json_object
from mig.annotations import MIG_ALLOCATIONS, AnnotationError, MigAllocation, decode_allocations

GPU = "nvidia.com/gpu"
GPUMEM = "nvidia.com/gpumem"

if TYPE_CHECKING:
    from lab.cluster import Lab

T = TypeVar("T")


class WaitTimeout(AssertionError):
    pass


def gpu_pod(
    name: str,
    memory_mib: int | None = None,
    gpus: int = 1,
    annotations: dict[str, str] | None = None,
    namespace: str = "default",
    node: str | None = None,
    containers: list[tuple[str, int, int | None]] | None = None,
) -> dict[str, Any]:
    """A pod asking for `gpus` MIG devices of at least `memory_mib` each (or per-container
    (name, gpus, memory) tuples)."""
    wanted = containers or [("main", gpus, memory_mib)]
    spec_containers = []
    for cname, count, mem in wanted:
        limits = {GPU: str(count)}
        if mem is not None:
            limits[GPUMEM] = str(mem)
        spec_containers.append(
            {
                "name": cname,
                "image": "nvcr.io/nvidia/cuda:12.8.0-base-ubuntu24.04",
                "command": ["sleep", "infinity"],
                "resources": {"limits": limits},
            }
        )
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": dict(annotations or {})},
        "spec": {"containers": spec_containers, "terminationGracePeriodSeconds": 5},
    }
    if node:
        pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return pod


@dataclass(frozen=True)
class Instance:
    """A MIG instance the simulated NVML holds."""

    node: str
    gpu_index: int
    gpu_uuid: str
    profile: str
    start: int
    size: int
    gi: int
    ci: int
    mig_uuid: str
    busy: bool  # a process runs on it


class Kit:
    def __init__(self, lab: Lab, namespace: str = "default", identity: str = "admin"):
        self.lab = lab
        self.namespace = namespace
        self.core = client.CoreV1Api(lab.api_client(identity))

    # ---- pods -----------------------------------------------------------------------------------

    def create(self, pod: dict[str, Any]) -> dict[str, Any]:
        resp = self.core.create_namespaced_pod(
            pod["metadata"].get("namespace", self.namespace), pod, _preload_content=False
        )
        return json_object(f"create pod {pod['metadata'].get('name')}", json.loads(resp.data))

    def pod(self, name: str) -> dict[str, Any] | None:
        try:
            resp = self.core.read_namespaced_pod(name, self.namespace, _preload_content=False)
        except client.ApiException as error:
            if error.status == 404:
                return None
            raise
        return json_object(f"read pod {name}", json.loads(resp.data))

    def existing_pod(self, name: str) -> dict[str, Any]:
        """The pod, for a step that knows it exists: a missing one is a LookupError naming it."""
        pod = self.pod(name)
        if pod is None:
            raise LookupError(f"pod {self.namespace}/{name} does not exist")
        return pod

    def pods(self) -> list[dict[str, Any]]:
        resp = self.core.list_namespaced_pod(self.namespace, _preload_content=False)
        return json.loads(resp.data).get("items") or []

    def phase(self, name: str) -> str:
        pod = self.pod(name)
        return "(gone)" if pod is None else (pod.get("status") or {}).get("phase", "Pending")

    def annotate(self, name: str, annotations: dict[str, str | None]) -> None:
        self.core.patch_namespaced_pod(name, self.namespace, {"metadata": {"annotations": annotations}})

    def delete(self, name: str, wait: bool = True, timeout: float = 30.0) -> None:
        try:
            self.core.delete_namespaced_pod(name, self.namespace, _preload_content=False)
        except client.ApiException as error:
            if error.status != 404:
                raise
        if wait:
            self.wait(lambda: self.pod(name) is None, timeout, f"pod {name} to be gone")

    def delete_all(self, timeout: float = 60.0) -> None:
        """Delete every pod of the namespace and wait until the GPUs hold no MIG instance."""
        for pod in self.pods():
            self.delete(pod["metadata"]["name"], wait=False)
        self.wait(lambda: not self.pods(), timeout, "every pod to be gone")
        # the CI goes first: a GPU instance without one is a destroy still under way
        self.wait(
            lambda: not self.instances() and not self.bare_gpu_instances(),
            timeout,
            "every MIG instance to be reclaimed",
        )

    # ---- waiting --------------------------------------------------------------------------------

    @staticmethod
    def wait(condition: Callable[[], T | None], timeout: float = 30.0, what: str = "") -> T:
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                raise WaitTimeout(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(0.1)

    def wait_phase(self, name: str, phase: str = "Running", timeout: float = 30.0) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            pod = self.pod(name)
            return pod if pod is not None and (pod.get("status") or {}).get("phase") == phase else None

        try:
            return self.wait(reached, timeout, f"pod {name} to be {phase}")
        except WaitTimeout:
            raise WaitTimeout(
                f"pod {name} is {self.phase(name)}, not {phase}, after {timeout:.0f}s; events: "
                + " | ".join(f"{e['reason']}: {e['message']}" for e in self.events(name))
            ) from None

    def wait_event(self, name: str, reason: str, timeout: float = 30.0, contains: str = "") -> dict[str, Any]:
        """The pod's first event with this reason (and text in its message); events are written in
        the background, so they may come a moment after the state they describe."""

        def seen() -> dict[str, Any] | None:
            return next(
                (e for e in self.events(name) if e["reason"] == reason and contains in e.get("message", "")),
                None,
            )

        return self.wait(
            seen, timeout, f"a {reason} event{f' saying {contains!r}' if contains else ''} for pod {name}"
        )

    # ---- what dynmig recorded -------------------------------------------------------------------

    def allocations(self, name: str) -> tuple[MigAllocation, ...]:
        pod = self.pod(name)
        text = ((pod or {}).get("metadata", {}).get("annotations") or {}).get(MIG_ALLOCATIONS)
        try:
            return decode_allocations(text)
        except AnnotationError:
            return ()

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        pod = self.pod(name) if name else None
        uid = (pod or {}).get("metadata", {}).get("uid")
        resp = self.core.list_namespaced_event(self.namespace, _preload_content=False)
        items = json.loads(resp.data).get("items") or []
        out = [
            e
            for e in items
            if name is None
            or (
                e.get("involvedObject", {}).get("name") == name
                and (uid is None or e["involvedObject"].get("uid") == uid)
            )
        ]
        # kube-scheduler's events (events.k8s.io/v1, read here through core/v1) carry eventTime and
        # no firstTimestamp; dynmig's own carry firstTimestamp.
        return sorted(
            out,
            key=lambda e: (
                (e.get("firstTimestamp") or e.get("eventTime") or "")[:19],
                int(e["metadata"].get("resourceVersion") or 0),
            ),
        )

    # ---- what the GPUs hold -----------------------------------------------------------------------

    def instances(self, node: str | None = None) -> list[Instance]:
        out = []
        for runtime in self.lab.nodes.values():
            if node is not None and runtime.name != node:
                continue
            for gpu in runtime.nvml.gpus():
                busy = {(p.gi_id, p.ci_id) for p in gpu.processes}
                for gi in gpu.gpu_instances:
                    for ci in gi.compute_instances:
                        out.append(
                            Instance(
                                runtime.name,
                                gpu.index,
                                gpu.uuid,
                                gi.profile,
                                gi.placement.start,
                                gi.placement.size,
                                gi.gi_id,
                                ci.ci_id,
                                ci.mig_uuid,
                                (gi.gi_id, ci.ci_id) in busy,
                            )
                        )
        return out

    def bare_gpu_instances(self) -> list[tuple[str, str, int]]:
        """GPU instances without a compute instance: a create or destroy half done (CI goes first)."""
        return [
            (runtime.name, gpu.uuid, gi.gi_id)
            for runtime in self.lab.nodes.values()
            for gpu in runtime.nvml.gpus()
            for gi in gpu.gpu_instances
            if not gi.compute_instances
        ]

    def nvml_events(self, node: str) -> list[dict[str, Any]]:
        return self.lab.nodes[node].nvml.events()

    def gpu(self, uuid: str) -> tuple[str, Any]:
        """(node, SimGpu) of a GPU UUID."""
        for runtime in self.lab.nodes.values():
            for gpu in runtime.nvml.gpus():
                if gpu.uuid == uuid:
                    return runtime.name, gpu
        raise KeyError(f"no simulated GPU {uuid}")

    def gpus_of_model(self, text: str) -> list[tuple[str, Any]]:
        return [
            (r.name, g)
            for r in self.lab.nodes.values()
            for g in r.nvml.gpus()
            if text.lower() in g.name.lower()
        ]
