"""The pod side of kubelet on one simulated node, against the API server.

    pods = SimulatedPods("gpu-rtx", api_client, kubelet, nvml, "nvidia.com/gpu").start()
    ...
    pods.stop()

Every `interval` it lists the pods bound to its node (a complete list or nothing: on an API error
it changes nothing, as a kubelet that lost the API server keeps its pods running) and, like kubelet:
- admits Pending pods one at a time, oldest creationTimestamp first, each with one Allocate per
  container that requests the device resource (through the device-plugin manager,
  `SimulatedKubelet`) inside its admission, so a slow Allocate holds up every pod behind it; a
  failed Allocate fails the pod (UnexpectedAdmissionError). (kubelet: `HandlePodAdditions` in
  pkg/kubelet/kubelet.go sorts the new pods by creation time and runs `canAdmitPod` for each in
  turn, in the sync loop; the resource allocator's admit handler in pkg/kubelet/cm calls the device
  manager's Allocate for the init containers, then the app containers.) Then it starts the pod's
  containers: `runtime(pod)` when the caller
  supplies one for that pod, else a `SimulatedWorkload` on the MIG devices the plugin answered with.
- stops the containers of a pod that has a deletionTimestamp, or that is gone from the API
  (deleted with grace 0, force-deleted, its namespace deleted): SIGTERM, then SIGKILL when the
  grace period is over. The grace period is the pod's deletionGracePeriodSeconds, else its
  terminationGracePeriodSeconds (30 when unset), at least 2 s (kuberuntime's minimum), and it
  only ever shrinks. Once they stopped, the devices are free and a pod that still exists gets its
  final status and is deleted with grace 0 and its UID as precondition (kubelet's status manager).
- restarts containers that exit on their own when they are `restartable` and the pod's
  restartPolicy asks for it (Always, the default: any exit; OnFailure: a non-zero exit; Never: no
  restart), after a back-off that doubles from `backoff[0]` up to `backoff[1]` (kubelet: 10 s to
  300 s) and is forgotten once they ran 2 × `backoff[1]` without exiting; each restart is logged
  and counted in the pod's restartCount. Other containers that exit end the pod: Succeeded on
  exit 0, else Failed.
- finishes a running simulated workload whose pod is annotated `lab.dynmig.io/exit-code`.
- with a DRA manager (`dra=`, sim.kubelet.dra): prepares a pod's ResourceClaims before its
  containers start; when that fails the pod stays Pending, gets a FailedPrepareDynamicResources
  event ("Failed to prepare dynamic resources: ...") and is tried again every `dra_retry` seconds
  (kubelet: `kuberuntime_manager.go` SyncPod calls PrepareDynamicResources before the sandbox and
  records that event; the pod worker requeues a failed sync after its 10 s backOffPeriod). A
  container gets the CDI devices of the claims it names; with `cdi_dirs` they are resolved as the
  container runtime does (sim.kubelet.cdi) and the simulated workload runs on the MIG devices the
  injected environment names (`PodRecord.cdi_devices`, `PodRecord.env`); an unresolvable device
  fails the container's creation (a "Failed" event, tried again). Once the pod's containers have
  stopped and it is terminal or deleted, its claims are unprepared, again every `dra_retry` seconds
  until that succeeds, and a deleted pod is removed from the API only after that (kubelet:
  `SyncTerminatedPod` calls UnprepareDynamicResources; `PodResourcesAreReclaimed` waits while
  `PodMightNeedToUnprepareResources`).
"""

from __future__ import annotations

import json
import logging
import re
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from pathlib import Path
from typing import Any

from kubernetes import client

from sim import recorder
from sim.kubelet import cdi
from sim.kubelet.dra import DraError, DraManager, has_claims
from sim.kubelet.runtime import (
    MIG_UUID,
    Containers,
    SimulatedWorkload,
    container_exit_code,
    describe_exit,
    mig_uuids,
)

log = logging.getLogger("sim.kubelet.pods")
EXIT_CODE = "lab.dynmig.io/exit-code"
IGNORE_SIGTERM = "lab.dynmig.io/ignore-sigterm"
MIN_GRACE_S = 2.0
DEFAULT_GRACE_S = 30.0
KUBELET_BACKOFF = (10.0, 300.0)
POD_WORKER_BACKOFF_S = 10.0  # pkg/kubelet/kubelet.go backOffPeriod: a failed pod sync is retried after it
TERMINAL = ("Succeeded", "Failed")


@dataclass
class PodRecord:
    uid: str
    namespace: str
    name: str
    pod: dict[str, Any] = field(default_factory=dict)  # as last listed
    allocation: Any = None  # sim.kubelet.PodAllocation, False when nothing was allocated
    env: dict[str, str] = field(default_factory=dict)  # container -> NVIDIA_VISIBLE_DEVICES
    containers: Containers | None = None
    phase: str = "Pending"
    failed_reason: str = ""
    ready: bool = False
    restarts: int = 0
    backoff_step: int = 0
    running_since: float = 0.0
    restart_at: float | None = None
    stop_deadline: float | None = None  # set once termination began
    killed: bool = False
    stale: bool = False  # the last running status could not be written
    cdi_devices: dict[str, list[str]] = field(default_factory=dict)  # container -> CDI device IDs (DRA)
    retry_at: float | None = None  # a failed DRA step (prepare, CDI injection, unprepare) waits until then

    @property
    def processes(self) -> list[tuple[str, int]]:
        return list(getattr(self.containers, "processes", []))


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def gpu_containers(pod: dict[str, Any], resource: str) -> list[tuple[str, int]]:
    """(container name, count) for containers requesting `resource`, init containers first. A
    count that is not a device quantity raises ValueError naming the container."""
    out = []
    spec = pod.get("spec") or {}
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        res = c.get("resources") or {}
        value = (res.get("limits") or {}).get(resource) or (res.get("requests") or {}).get(resource)
        if value is None:
            continue
        try:
            count = device_count(value)
        except ValueError as error:
            raise ValueError(f"container {c.get('name')!r}: {resource}: {error}") from None
        if count > 0:
            out.append((c["name"], count))
    return out


_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d{1,3})?)(?P<suffix>[KMGTPE]i|[numkMGTPE]?)$"
)
_SUFFIX = {
    "": 1,
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
MAX_DEVICES = 1024


def device_count(value: Any) -> int:
    """A device count as kubelet reads the quantity (its Value(), rounded up): `1`, `"2"`, `"1e0"`."""
    match = (
        _QUANTITY.match(str(value).strip())
        if isinstance(value, str | int) and not isinstance(value, bool)
        else None
    )
    if match is None or ("e" in match["number"].lower() and match["suffix"]):
        raise ValueError(f"{str(value)[:40]!r} is not a quantity")
    amount = Decimal(match["number"]) * _SUFFIX[match["suffix"]]
    if amount < 0 or amount > MAX_DEVICES:
        raise ValueError(f"{str(value)[:40]!r} is not a device count between 0 and {MAX_DEVICES}")
    return int(amount.to_integral_value(rounding=ROUND_CEILING))


def grace_period(pod: dict[str, Any]) -> float:
    """The seconds kubelet gives a pod's containers between SIGTERM and SIGKILL."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    grace = meta.get("deletionGracePeriodSeconds")
    if grace is None:
        grace = spec.get("terminationGracePeriodSeconds")
    try:
        seconds = DEFAULT_GRACE_S if grace is None else float(grace)
    except (TypeError, ValueError):
        seconds = DEFAULT_GRACE_S  # the API server validates it; a stored oddity gets the default
    return max(MIN_GRACE_S, seconds)


def restarted_after(pod: dict[str, Any], code: int) -> bool:
    """Whether kubelet restarts a container of `pod` that exited with `code` (as `subprocess`
    reports it), by the pod's restartPolicy."""
    policy = (pod.get("spec") or {}).get("restartPolicy") or "Always"
    if policy == "OnFailure":
        return container_exit_code(code) != 0
    return policy != "Never"


def backoff_delay(step: int, backoff: tuple[float, float]) -> float:
    initial, cap = backoff
    return min(cap, initial * 2 ** min(step, 30))


Runtime = Callable[[dict[str, Any]], Containers | None]


class SimulatedPods:
    def __init__(
        self,
        node: str,
        api_client: Any,
        kubelet: Any,
        nvml: Any,
        resource: str,
        *,
        runtime: Runtime | None = None,
        backoff: tuple[float, float] = KUBELET_BACKOFF,
        echo: Callable[[str], None] | None = None,
        interval: float = 0.2,
        log_path: Callable[[str, str, str, str], Path] | None = None,
        dra: DraManager | None = None,
        cdi_dirs: list[Path] | None = None,
        dra_retry: float = POD_WORKER_BACKOFF_S,
    ):
        """log_path(namespace, pod, uid, container): the file a container's output is appended to.
        dra: kubelet's DRA manager (None: pods' ResourceClaims are ignored, as before DRA);
        cdi_dirs: where the container runtime reads CDI specs (None: CDI devices are not resolved)."""
        self.node, self.kubelet, self.nvml, self.resource = node, kubelet, nvml, resource
        self.core = client.CoreV1Api(api_client)
        self.runtime = runtime or (lambda pod: None)
        self.backoff = backoff
        self.echo = echo or (lambda text: None)
        self.interval = interval
        self.log_path = log_path
        self.dra, self.cdi_dirs, self.dra_retry = dra, cdi_dirs, dra_retry
        self.pods: dict[str, PodRecord] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"kubelet-pods-{node}", daemon=True)
        self.paused = threading.Event()  # set: admit nothing new (the kubelet is "busy")

    def start(self) -> SimulatedPods:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def pods_by_name(self, namespace: str, name: str) -> PodRecord | None:
        return next((r for r in list(self.pods.values()) if (r.namespace, r.name) == (namespace, name)), None)

    def log_sink(self, pod: dict[str, Any]) -> Callable[[str, str], None]:
        """Where a container of `pod` writes its output: appended to the file `log_path` names (what
        `kubectl logs` reads), if the kubelet was given one."""
        meta = pod["metadata"]

        def write(container: str, line: str) -> None:
            if self.log_path is None:
                return
            try:
                with self.log_path(meta["namespace"], meta["name"], meta["uid"], container).open("a") as out:
                    out.write(line.rstrip("\n") + "\n")
            except OSError as error:
                log.debug(
                    "kubelet %s: log of %s/%s not written: %s", self.node, meta["name"], container, error
                )

        return write

    def logs(self, namespace: str, name: str) -> str | None:
        record = self.pods_by_name(namespace, name)
        return None if record is None or record.containers is None else record.containers.logs()

    # ---- the loop -------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sync()
            except Exception as error:  # noqa: BLE001 - an unavailable API: try again next tick
                log.debug("kubelet %s: %s", self.node, error)

    def _list(self) -> list[dict[str, Any]]:
        resp = self.core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={self.node}", _preload_content=False, _request_timeout=5
        )
        return json.loads(resp.data).get("items") or []

    def sync(self) -> None:
        try:
            listed = self._list()
        except Exception:
            # No complete list: nothing is admitted or stopped, but containers that exit are still
            # restarted, as a kubelet that lost the API server does from its own pod cache.
            for record in list(self.pods.values()):
                if (
                    record.containers is not None
                    and record.stop_deadline is None
                    and record.phase == "Running"
                ):
                    self._watch_containers(record)
            raise
        present = set()
        # kubelet admits new pods oldest first (HandlePodAdditions sorts by creation time)
        listed.sort(key=lambda pod: (pod.get("metadata") or {}).get("creationTimestamp") or "")
        for pod in listed:
            meta = pod["metadata"]
            present.add(meta["uid"])
            record = self.pods.get(meta["uid"])
            if record is None:
                record = self.pods[meta["uid"]] = PodRecord(meta["uid"], meta["namespace"], meta["name"])
            record.pod = pod
            self._guarded(record, self._sync_pod, record)
        for record in list(self.pods.values()):
            if record.uid not in present:
                self._begin_stop(record, grace_period(record.pod), "is gone from the API")
            if record.stop_deadline is not None:
                self._guarded(record, self._progress_stop, record, record.uid in present)

    def _guarded(self, record: PodRecord, step: Callable[..., None], *args: Any) -> None:
        """One pod's step; a failure (the API, an odd object) is retried next pass and never keeps
        the other pods of the node from being handled."""
        try:
            step(*args)
        except Exception as error:  # noqa: BLE001 - see above
            log.debug("kubelet %s: %s/%s: %s", self.node, record.namespace, record.name, error)

    def _sync_pod(self, record: PodRecord) -> None:
        pod = record.pod
        meta, status = pod["metadata"], pod.get("status") or {}
        phase = status.get("phase") or "Pending"
        if meta.get("deletionTimestamp"):
            self._begin_stop(record, grace_period(pod), "was deleted")
        elif record.stop_deadline is not None:
            return
        elif phase in TERMINAL:
            self._unprepared(record)
        elif record.containers is None:
            if phase == "Pending" and not self.paused.is_set():
                self._admit(record)
        else:
            self._watch_containers(record)

    # ---- admission --------------------------------------------------------------------------------

    def _admit(self, record: PodRecord) -> None:
        pod = record.pod
        if not self._prepared(record):
            return  # the pod waits for its claims
        containers = self.runtime(pod)
        if containers is None:
            if record.allocation is None:
                try:
                    wanted = gpu_containers(pod, self.resource)
                except ValueError as error:
                    self._admission_failed(record, "", f"cannot admit the pod: {error}")
                    return
                record.allocation = (
                    self.kubelet.allocate(
                        self.resource, wanted, pod_uid=record.uid, pod_ref=(record.namespace, record.name)
                    )
                    if wanted
                    else False
                )
                if record.allocation and not record.allocation.ok:
                    self._admission_failed(record, record.allocation.error)
                    return
            devices = {name: [] for name, _ in _containers(pod)}
            for c in record.allocation.containers if record.allocation else []:
                if c.response is not None and not self._plugin_cdi(record, c.name, c.response, devices):
                    return
            if not self._inject_cdi(record, devices):
                return
            ignore = (pod["metadata"].get("annotations") or {}).get(IGNORE_SIGTERM) == "true"
            containers = SimulatedWorkload(self.nvml, devices, ignore_sigterm=ignore, sink=self.log_sink(pod))
        record.containers = containers
        record.running_since = time.monotonic()
        self._set_running(record)

    # ---- DRA --------------------------------------------------------------------------------------

    def _waiting(self, record: PodRecord) -> bool:
        return record.retry_at is not None and time.monotonic() < record.retry_at

    def _prepared(self, record: PodRecord) -> bool:
        """PrepareDynamicResources before the pod's containers; False: the pod waits (event sent)."""
        if self.dra is None or not has_claims(record.pod):
            return True
        if self._waiting(record):
            return False
        try:
            self.dra.prepare(record.pod)
        except DraError as error:
            record.retry_at = time.monotonic() + self.dra_retry
            message = f"Failed to prepare dynamic resources: {error}"
            self._event(record.pod, "Warning", "FailedPrepareDynamicResources", message)
            self.echo(f"{self.node}: {record.namespace}/{record.name} waits: {message}")
            return False
        record.retry_at = None
        return True

    def _plugin_cdi(self, record: PodRecord, name: str, response: Any, devices: dict[str, list[str]]) -> bool:
        """A container's devices from the device plugin's answer. With `cdi_dirs` (a runtime with CDI
        on), the CDI devices it names are resolved from the spec files as the runtime does and the
        container runs on what the specs inject; False: one is unresolvable, the container is not
        created (a "Failed" event) and is tried again later, with the same answer (kubelet keeps a
        container's allocation)."""
        names = cdi.requested(response) if self.cdi_dirs is not None else []
        if not names:
            record.env[name] = dict(response.envs).get("NVIDIA_VISIBLE_DEVICES", "")
            devices.setdefault(name, []).extend(mig_uuids([response]))
            return True
        if self._waiting(record):
            return False
        try:
            env, applied = cdi.inject(self.cdi_dirs or [], names)
        except cdi.CdiError as error:
            self._create_failed(record, name, error)
            return False
        record.retry_at = None
        env = {**dict(response.envs), **env}
        record.env[name] = env.get("NVIDIA_VISIBLE_DEVICES", "")
        record.cdi_devices[name] = names
        texts = [*dict(response.envs).values(), *applied]
        found = devices.setdefault(name, [])
        found += [u for t in texts for u in MIG_UUID.findall(t) if u not in found]
        return True

    def _create_failed(self, record: PodRecord, name: str, error: Exception) -> None:
        record.retry_at = time.monotonic() + self.dra_retry
        message = f"Error: failed to create containerd container: CDI device injection failed: {error}"
        self._event(record.pod, "Warning", "Failed", message)
        self.echo(f"{self.node}: {record.namespace}/{record.name} container {name}: {message}")

    def _inject_cdi(self, record: PodRecord, devices: dict[str, list[str]]) -> bool:
        """Each container's CDI devices, resolved as the runtime does; False: a container could
        not be created (event sent, tried again later)."""
        if self.dra is None or not has_claims(record.pod):
            return True
        if self._waiting(record):
            return False
        for name in list(devices):
            ids = self.dra.cdi_devices(record.pod, name)
            if not ids:
                continue
            texts = list(ids)
            if self.cdi_dirs is not None:
                try:
                    env, applied = cdi.inject(self.cdi_dirs, ids)
                except cdi.CdiError as error:
                    self._create_failed(record, name, error)
                    return False
                record.env[name] = env.get("NVIDIA_VISIBLE_DEVICES", "")
                texts += applied
            record.cdi_devices[name] = ids
            found = devices[name]
            found += [u for t in texts for u in MIG_UUID.findall(t) if u not in found]
        return True

    def _unprepared(self, record: PodRecord) -> bool:
        """UnprepareDynamicResources once the containers stopped; False: not yet (retried)."""
        if self.dra is None or not self.dra.might_need_unprepare(record.uid):
            return True
        if self._waiting(record):
            return False
        try:
            self.dra.unprepare(record.pod)
        except DraError as error:
            record.retry_at = time.monotonic() + self.dra_retry
            self.echo(f"{self.node}: {record.namespace}/{record.name}: {error}; trying again")
            return False
        record.retry_at = None
        return True

    def _set_running(self, record: PodRecord) -> None:
        now = _now()
        record.ready = record.containers.ready()
        ready = "True" if record.ready else "False"
        conditions = [
            {"type": t, "status": "True", "lastTransitionTime": now} for t in ("PodScheduled", "Initialized")
        ]
        conditions += [
            {"type": t, "status": ready, "lastTransitionTime": now} for t in ("ContainersReady", "Ready")
        ]
        status = {
            "phase": "Running",
            "hostIP": "10.0.0.1",
            "podIP": "10.1.0.1",
            "conditions": conditions,
            "containerStatuses": [
                {
                    "name": n,
                    "ready": record.ready,
                    "restartCount": record.restarts,
                    "image": image,
                    "imageID": "",
                    "started": True,
                    "state": {"running": {"startedAt": now}},
                }
                for n, image in _containers(record.pod)
            ],
        }
        if record.phase != "Running":
            status["startTime"] = now
        record.stale = not self._patch_status(record.pod, status)
        first = record.phase != "Running"
        record.phase = "Running"
        if first:
            self.echo(
                f"{self.node}: {record.namespace}/{record.name} Running"
                + "".join(f" [{c}: NVIDIA_VISIBLE_DEVICES={v}]" for c, v in record.env.items())
            )

    def _admission_failed(self, record: PodRecord, error: str, message: str = "") -> None:
        message = (
            message
            or f"Allocate failed due to {error.removeprefix('Allocate failed: ')}, which is unexpected"
        )
        self._patch_status(
            record.pod, {"phase": "Failed", "reason": "UnexpectedAdmissionError", "message": message}
        )
        record.phase, record.failed_reason = "Failed", "UnexpectedAdmissionError"
        self._event(record.pod, "Warning", "UnexpectedAdmissionError", message)
        self.kubelet.release(record.uid)
        self.echo(f"{self.node}: {record.namespace}/{record.name} Failed: {message}")

    # ---- running containers -------------------------------------------------------------------------

    def _watch_containers(self, record: PodRecord) -> None:
        containers = record.containers
        annotations = record.pod["metadata"].get("annotations") or {}
        if (
            EXIT_CODE in annotations
            and isinstance(containers, SimulatedWorkload)
            and containers.exit_code() is None
        ):
            containers.finish(_int(annotations[EXIT_CODE]))
        code = containers.exit_code()
        if code is None:
            if record.restart_at is None and (containers.ready() != record.ready or record.stale):
                became_ready = containers.ready() and not record.ready
                self._set_running(record)
                if became_ready:
                    self.echo(f"{self.node}: {record.namespace}/{record.name} Ready")
            return
        if not (containers.restartable and restarted_after(record.pod, code)):
            self._ended(record, code)
        elif record.restart_at is None:
            self._schedule_restart(record, code)
        elif time.monotonic() >= record.restart_at:
            containers.restart()
            record.restarts += 1
            record.restart_at = None
            record.running_since = time.monotonic()
            self._set_running(record)
            self.echo(f"{self.node}: {record.namespace}/{record.name} restarted (restart {record.restarts})")

    def _schedule_restart(self, record: PodRecord, code: int) -> None:
        if time.monotonic() - record.running_since >= 2 * self.backoff[1]:
            record.backoff_step = 0
        delay = backoff_delay(record.backoff_step, self.backoff)
        record.backoff_step += 1
        record.restart_at = time.monotonic() + delay
        record.ready = False
        names = getattr(record.containers, "container", "") or _container_names(record.pod)
        self.echo(
            f"{self.node}: {names} of {record.namespace}/{record.name} exited "
            f"({describe_exit(code)}); restarting in {delay:g}s"
        )
        message = f"back-off {delay:g}s restarting failed container"
        self._patch_status(
            record.pod,
            {
                "conditions": [
                    {"type": t, "status": "False", "lastTransitionTime": _now()}
                    for t in ("ContainersReady", "Ready")
                ],
                "containerStatuses": [
                    {
                        "name": n,
                        "ready": False,
                        "restartCount": record.restarts,
                        "image": image,
                        "imageID": "",
                        "started": False,
                        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": message}},
                        "lastState": {
                            "terminated": {
                                "exitCode": container_exit_code(code),
                                "finishedAt": _now(),
                                "reason": "Error",
                            }
                        },
                    }
                    for n, image in _containers(record.pod)
                ],
            },
        )
        self._event(record.pod, "Warning", "BackOff", message)

    def _ended(self, record: PodRecord, code: int) -> None:
        exit_code = container_exit_code(code)
        phase = "Succeeded" if exit_code == 0 else "Failed"
        self._terminated_status(record, phase, exit_code)
        self.kubelet.release(record.uid)
        self.echo(f"{self.node}: {record.namespace}/{record.name} {phase} (exit code {exit_code})")
        self._unprepared(record)

    # ---- stopping a pod -----------------------------------------------------------------------------

    def _begin_stop(self, record: PodRecord, grace: float, why: str) -> None:
        deadline = time.monotonic() + grace
        if record.stop_deadline is not None:
            record.stop_deadline = min(record.stop_deadline, deadline)  # a grace period only shrinks
            return
        record.stop_deadline = deadline
        running = record.containers is not None and record.containers.exit_code() is None
        if running:
            record.containers.signal(signal.SIGTERM)
            self.echo(
                f"{self.node}: {record.namespace}/{record.name} {why}: stopping its containers "
                f"(SIGTERM, {grace:g}s grace period)"
            )

    def _progress_stop(self, record: PodRecord, exists: bool) -> None:
        containers = record.containers
        code = None if containers is None else containers.exit_code()
        if containers is not None and code is None:
            if time.monotonic() >= record.stop_deadline and not record.killed:
                record.killed = True
                containers.signal(signal.SIGKILL)
                self.echo(f"{self.node}: {record.namespace}/{record.name}: grace period over, SIGKILL")
            return
        if not self._unprepared(record):
            return  # kubelet keeps the pod until its claims are unprepared
        self.kubelet.release(record.uid)
        if exists:
            phase = (record.pod.get("status") or {}).get("phase")
            if phase not in TERMINAL and code is not None:
                exit_code = container_exit_code(code)
                self._terminated_status(record, "Succeeded" if exit_code == 0 else "Failed", exit_code)
            self._delete(record)
        self.pods.pop(record.uid, None)
        self.kubelet.forget(record.uid)
        self.echo(f"{self.node}: {record.namespace}/{record.name} deleted")

    def _delete(self, record: PodRecord) -> None:
        """What kubelet's status manager does once the containers of a deleted pod stopped."""
        body = client.V1DeleteOptions(
            grace_period_seconds=0, preconditions=client.V1Preconditions(uid=record.uid)
        )
        try:
            self.core.delete_namespaced_pod(
                record.name, record.namespace, body=body, _preload_content=False, _request_timeout=5
            )
        except client.ApiException as error:
            if error.status not in (404, 409):
                raise

    def _terminated_status(self, record: PodRecord, phase: str, code: int) -> None:
        now = _now()
        reason = "Completed" if code == 0 else "Error"
        self._patch_status(
            record.pod,
            {
                "phase": phase,
                "conditions": [
                    {"type": t, "status": "False", "lastTransitionTime": now}
                    for t in ("ContainersReady", "Ready")
                ],
                "containerStatuses": [
                    {
                        "name": n,
                        "ready": False,
                        "restartCount": record.restarts,
                        "image": image,
                        "imageID": "",
                        "started": False,
                        "state": {"terminated": {"exitCode": code, "reason": reason, "finishedAt": now}},
                    }
                    for n, image in _containers(record.pod)
                ],
            },
        )
        record.phase = phase

    # ---- API writes -----------------------------------------------------------------------------------

    def _patch_status(self, pod: dict[str, Any], status: dict[str, Any]) -> bool:
        """Write the pod's status; False when the API did not take it (gone meanwhile: the next
        pass stops it; the API unavailable: the running status is written again later)."""
        meta = pod["metadata"]
        try:
            self.core.patch_namespaced_pod_status(
                meta["name"],
                meta["namespace"],
                {"status": status},
                _preload_content=False,
                _request_timeout=5,
            )
        except Exception as error:  # noqa: BLE001 - any API failure: see above
            log.debug("kubelet %s: status of %s not written: %s", self.node, meta["name"], error)
            return False
        return True

    def _event(self, pod: dict[str, Any], type_: str, reason: str, message: str) -> None:
        recorder.record(
            self.core,
            pod,
            api_version="v1",
            kind="Pod",
            type_=type_,
            reason=reason,
            message=message,
            component="kubelet",
            host=self.node,
        )


def _containers(pod: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["name"], c.get("image") or "") for c in (pod.get("spec") or {}).get("containers") or []]


def _container_names(pod: dict[str, Any]) -> str:
    return ", ".join(n for n, _ in _containers(pod)) or "the containers"


def _int(text: str) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 1
