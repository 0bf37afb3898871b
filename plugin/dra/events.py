"""Events the DRA plugin posts on the pods of the claims it prepares, as the device plugin does in
extender mode (`plugin.events`): `MigInstanceCreated` when a claim's instance is created,
`MigInstanceReclaimed` when it is destroyed. They show in `kubectl describe pod`.

The pods are the claim's `status.reservedFor` entries when it is prepared (kept by claim UID until it
is unprepared; a restarted plugin knows none, so its first unprepare of an older claim posts
nothing). Posting goes through base.events (aggregated, one background sender, bounded): it never
blocks or fails a prepare or an unprepare.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from base.events import EventRecorder, Regarding
from mig.jsontext import at
from plugin.dra.claims import ClaimRef
from plugin.dra.status import DeviceReport
from plugin.events import CREATED, RECLAIMED, NodeEvents

COMPONENT = "dynmig-dra-plugin"
MAX_PODS = 16  # pods named per claim (a claim shared by more gets its first ones)
MAX_CLAIMS = 4096  # claims remembered between prepare and unprepare


def reserved_pods(claim: Mapping[str, Any]) -> list[Regarding]:
    namespace = str(at(claim, "metadata", "namespace") or "")
    entries = at(claim, "status", "reservedFor")
    out = []
    for e in entries[:MAX_PODS] if isinstance(entries, list) else []:
        if isinstance(e, Mapping) and e.get("resource") == "pods" and isinstance(e.get("name"), str):
            out.append(Regarding("Pod", namespace, e["name"], str(e.get("uid") or "")))
    return out


class ClaimEvents(NodeEvents):
    component = COMPONENT

    def __init__(self, recorder: EventRecorder | None):
        super().__init__(recorder)
        self._pods: dict[str, list[Regarding]] = {}
        self._lock = threading.Lock()

    def created(self, ref: ClaimRef, claim: Mapping[str, Any], reports: list[DeviceReport]) -> None:
        pods = reserved_pods(claim)
        with self._lock:
            if len(self._pods) >= MAX_CLAIMS:
                self._pods.pop(next(iter(self._pods)))
            self._pods[ref.uid] = pods
        for pod in pods:
            for r in reports:
                message = (
                    f"created MIG instance {r.profile}@{r.start} on {r.gpu_uuid} (GI {r.gpu_instance}, "
                    f"CI {r.compute_instance}): {r.mig_uuid}, for claim {ref.namespace}/{ref.name}"
                )
                self._record(pod, CREATED, message, r.device)

    def reclaimed(self, ref: ClaimRef, what: str, mig_uuid: str) -> None:
        with self._lock:
            pods = list(self._pods.get(ref.uid, ()))
        for pod in pods:
            message = (
                f"destroyed MIG instance {what} ({mig_uuid}): claim {ref.namespace}/{ref.name} was unprepared"
            )
            self._record(pod, RECLAIMED, message, what)

    def _record(self, pod: Regarding, reason: str, message: str, distinct: str) -> None:
        if self.recorder is not None and pod.namespace and pod.name:
            self.recorder.record_about(pod, "Normal", reason, message, distinct)
