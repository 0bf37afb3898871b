"""The pod lifecycle a kubelet plays on one simulated node.

A pod bound to the node is admitted the way kubelet admits it: one Allocate per container that
requests the GPU resource, through the simulated kubelet's device-plugin manager. Then the pod is
Running and the simulated NVML shows a process on each MIG instance it got, so a plugin restart can
be seen not to touch running work. A failed Allocate fails the pod as kubelet does
(UnexpectedAdmissionError). A deleted pod has its processes stopped, turns terminal and is removed.
A pod annotated `lab.dynmig.io/exit-code` finishes (0 -> Succeeded, else Failed).
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from mig.annotations import MIG_ALLOCATIONS, AnnotationError, decode_allocations

log = logging.getLogger("dynmig.lab.agent")
EXIT_CODE = "lab.dynmig.io/exit-code"
_PIDS = itertools.count(31000)


@dataclass
class PodRecord:
    uid: str
    namespace: str
    name: str
    allocation: Any = None  # sim.kubelet.PodAllocation
    env: dict[str, str] = field(default_factory=dict)  # container -> NVIDIA_VISIBLE_DEVICES
    processes: list[tuple[str, int]] = field(default_factory=list)  # (GPU UUID, pid)
    phase: str = "Pending"
    failed_reason: str = ""


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def gpu_containers(pod: dict[str, Any], resource: str) -> list[tuple[str, int]]:
    """(container name, count) for containers requesting `resource`, init containers first."""
    out = []
    spec = pod.get("spec") or {}
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        res = c.get("resources") or {}
        value = (res.get("limits") or {}).get(resource) or (res.get("requests") or {}).get(resource)
        if value is not None and int(value) > 0:
            out.append((c["name"], int(value)))
    return out


class NodeAgent:
    def __init__(self, node: str, api_client: Any, kubelet: Any, nvml: Any, resource: str,
                 echo=None, interval: float = 0.2):
        self.node, self.kubelet, self.nvml, self.resource = node, kubelet, nvml, resource
        self.core = client.CoreV1Api(api_client)
        self.echo = echo or (lambda text: None)
        self.interval = interval
        self.pods: dict[str, PodRecord] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"agent-{node}", daemon=True)
        self.paused = threading.Event()  # set: admit nothing new (the kubelet is "busy")

    def start(self) -> NodeAgent:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def pods_by_name(self, namespace: str, name: str) -> PodRecord | None:
        return next((r for r in list(self.pods.values()) if (r.namespace, r.name) == (namespace, name)), None)

    # ---- the loop -------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sync()
            except Exception as error:  # noqa: BLE001 - an unavailable API: try again next tick
                log.debug("agent %s: %s", self.node, error)

    def _list(self) -> list[dict[str, Any]]:
        resp = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={self.node}",
                                                     _preload_content=False, _request_timeout=5)
        return json.loads(resp.data).get("items") or []

    def sync(self) -> None:
        for pod in self._list():
            meta, status = pod["metadata"], pod.get("status") or {}
            uid = meta["uid"]
            record = self.pods.get(uid)
            if record is None:
                record = self.pods[uid] = PodRecord(uid, meta["namespace"], meta["name"])
            phase = status.get("phase") or "Pending"
            if meta.get("deletionTimestamp"):
                self._terminate(pod, record, phase)
            elif phase == "Pending" and not self.paused.is_set():
                self._admit(pod, record)
            elif phase == "Running" and EXIT_CODE in (meta.get("annotations") or {}):
                self._finish(pod, record, int(meta["annotations"][EXIT_CODE] or 0))

    # ---- admission --------------------------------------------------------------------------------

    def _admit(self, pod: dict[str, Any], record: PodRecord) -> None:
        meta = pod["metadata"]
        if record.allocation is None:
            wanted = gpu_containers(pod, self.resource)
            if wanted:
                record.allocation = self.kubelet.allocate(self.resource, wanted, pod_uid=record.uid)
                if not record.allocation.ok:
                    self._admission_failed(pod, record, record.allocation.error)
                    return
                for c in record.allocation.containers:
                    if c.response is not None:
                        record.env[c.name] = dict(c.response.envs).get("NVIDIA_VISIBLE_DEVICES", "")
                self._start_processes(meta, record)
            else:
                record.allocation = False  # nothing to allocate
        self._set_running(pod, record)

    def _start_processes(self, meta: dict[str, Any], record: PodRecord) -> None:
        """The workload starts: one process on each MIG instance the pod was given."""
        fresh = self.core.read_namespaced_pod(meta["name"], meta["namespace"], _preload_content=False)
        annotations = json.loads(fresh.data)["metadata"].get("annotations") or {}
        try:
            allocations = decode_allocations(annotations.get(MIG_ALLOCATIONS))
        except AnnotationError:
            return
        for a in allocations:
            if a.gpuInstanceID is None or a.computeInstanceID is None:
                continue
            pid = next(_PIDS)
            try:
                self.nvml.set_busy(a.gpuUUID, (pid,), gi_id=a.gpuInstanceID, ci_id=a.computeInstanceID)
                record.processes.append((a.gpuUUID, pid))
            except (KeyError, ValueError) as error:
                log.warning("agent %s: no process for %s: %s", self.node, record.name, error)

    def _stop_processes(self, record: PodRecord) -> None:
        for gpu, pid in record.processes:
            self.nvml.clear_busy(gpu, (pid,))
        record.processes.clear()

    def _set_running(self, pod: dict[str, Any], record: PodRecord) -> None:
        now = _now()
        containers = [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]
        status = {"phase": "Running", "hostIP": "10.0.0.1", "podIP": "10.1.0.1", "startTime": now,
                  "conditions": [{"type": t, "status": "True", "lastTransitionTime": now}
                                 for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")],
                  "containerStatuses": [{"name": n, "ready": True, "restartCount": 0, "image": "lab",
                                         "imageID": "", "started": True,
                                         "state": {"running": {"startedAt": now}}} for n in containers]}
        self._patch_status(pod, status)
        record.phase = "Running"
        self.echo(f"{self.node}: {record.namespace}/{record.name} Running"
                  + ("".join(f" [{c}: NVIDIA_VISIBLE_DEVICES={v}]" for c, v in record.env.items())))

    def _admission_failed(self, pod: dict[str, Any], record: PodRecord, error: str) -> None:
        message = f"Allocate failed due to {error.removeprefix('Allocate failed: ')}, which is unexpected"
        self._patch_status(pod, {"phase": "Failed", "reason": "UnexpectedAdmissionError", "message": message})
        record.phase, record.failed_reason = "Failed", "UnexpectedAdmissionError"
        self._event(pod, "Warning", "UnexpectedAdmissionError", message)
        self.kubelet.release(record.uid)
        self.echo(f"{self.node}: {record.namespace}/{record.name} Failed: {message}")

    # ---- the end of a pod ---------------------------------------------------------------------------

    def _finish(self, pod: dict[str, Any], record: PodRecord, code: int) -> None:
        self._stop_processes(record)
        phase = "Succeeded" if code == 0 else "Failed"
        self._terminated_status(pod, phase, code)
        record.phase = phase
        self.kubelet.release(record.uid)
        self.echo(f"{self.node}: {record.namespace}/{record.name} {phase} (exit code {code})")

    def _terminate(self, pod: dict[str, Any], record: PodRecord, phase: str) -> None:
        meta = pod["metadata"]
        self._stop_processes(record)
        if phase not in ("Succeeded", "Failed"):
            self._terminated_status(pod, "Succeeded", 0)
        self.kubelet.release(record.uid)
        try:
            self.core.delete_namespaced_pod(meta["name"], meta["namespace"], grace_period_seconds=0,
                                            _preload_content=False)
        except client.ApiException as error:
            if error.status != 404:
                raise
        self.pods.pop(record.uid, None)
        self.echo(f"{self.node}: {record.namespace}/{record.name} deleted")

    def _terminated_status(self, pod: dict[str, Any], phase: str, code: int) -> None:
        now = _now()
        containers = [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]
        self._patch_status(pod, {"phase": phase, "containerStatuses": [
            {"name": n, "ready": False, "restartCount": 0, "image": "lab", "imageID": "", "started": False,
             "state": {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                      "finishedAt": now}}} for n in containers]})

    # ---- API writes -----------------------------------------------------------------------------------

    def _patch_status(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        meta = pod["metadata"]
        self.core.patch_namespaced_pod_status(meta["name"], meta["namespace"], {"status": status},
                                              _preload_content=False)

    def _event(self, pod: dict[str, Any], type_: str, reason: str, message: str) -> None:
        meta = pod["metadata"]
        now = _now()
        body = {"apiVersion": "v1", "kind": "Event",
                "metadata": {"name": f"{meta['name']}.{time.time_ns():x}", "namespace": meta["namespace"]},
                "involvedObject": {"kind": "Pod", "namespace": meta["namespace"], "name": meta["name"],
                                   "uid": meta["uid"], "apiVersion": "v1"},
                "reason": reason, "message": message, "type": type_,
                "source": {"component": "kubelet", "host": self.node}, "reportingComponent": "kubelet",
                "reportingInstance": self.node, "firstTimestamp": now, "lastTimestamp": now, "count": 1}
        self.core.create_namespaced_event(meta["namespace"], body, _preload_content=False)
