"""What the ReplicaSet controller does in one pass, as pure functions of a ReplicaSet and the pods
it controls (kube-controller-manager's pkg/controller/replicaset, the parts a user can tell).

- Active pods (not terminal, not being deleted) are counted against `spec.replicas`; missing ones
  are made from the template (`generateName: <replicaset>-`, the template's labels and
  annotations, the ReplicaSet as controlling owner), at most `CREATE_BATCH` a pass; surplus ones
  are deleted, the ones that cost least first: unscheduled before scheduled, pending before
  running, not ready before ready, and the most recently made among equals.
- A pod the API server refuses (a webhook's denial) is a FailedCreate event on the ReplicaSet
  ("Error creating: <the server's message>", once per message), the ReplicaFailure condition, and
  another try after a back-off doubling from 1 s to 60 s; events SuccessfulCreate and
  SuccessfulDelete name each pod made or deleted.
- Status: replicas (active pods), fullyLabeledReplicas (those carrying every template label),
  readyReplicas, availableReplicas (ready for at least `minReadySeconds`), observedGeneration.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Any

CREATE_BATCH = 20  # pods a ReplicaSet gets per pass; the rest in the next passes
TERMINAL = ("Succeeded", "Failed")
RETRY = (1.0, 60.0)  # back-off after a refused pod: initial, cap (the controller's queue backs off too)


@dataclass(frozen=True)
class Refusal:
    """The last pod the API server refused a ReplicaSet: why, since when, when to try again."""

    message: str
    since: str
    retry_at: float
    delay: float


def refused(last: Refusal | None, message: str, now: float) -> Refusal:
    delay = RETRY[0] if last is None else min(RETRY[1], last.delay * 2)
    since = last.since if last is not None and last.message == message else _stamp(now)
    return Refusal(message, since, now + delay, delay)


def _stamp(now: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))


def controller_of(obj: dict[str, Any]) -> dict[str, Any] | None:
    return next((ref for ref in obj["metadata"].get("ownerReferences") or [] if ref.get("controller")), None)


def active(pod: dict[str, Any]) -> bool:
    return (
        not pod["metadata"].get("deletionTimestamp")
        and (pod.get("status") or {}).get("phase") not in TERMINAL
    )


def _ready_condition(pod: dict[str, Any]) -> dict[str, Any] | None:
    return next(
        (
            c
            for c in (pod.get("status") or {}).get("conditions") or []
            if c.get("type") == "Ready" and c.get("status") == "True"
        ),
        None,
    )


def ready(pod: dict[str, Any]) -> bool:
    return _ready_condition(pod) is not None


def available(pod: dict[str, Any], min_ready_seconds: int, now: float) -> bool:
    condition = _ready_condition(pod)
    if condition is None:
        return False
    if min_ready_seconds <= 0:
        return True
    try:
        since = time.mktime(time.strptime(str(condition.get("lastTransitionTime")), "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        return False
    return since - time.timezone + min_ready_seconds <= now


def quantities_as_strings(spec: dict[str, Any]) -> None:
    """Resource quantities as the strings a Quantity serializes to (an API server that stores a
    JSON number as typed would otherwise hand the client a number it refuses to send)."""
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        for kind in ("limits", "requests"):
            values = (c.get("resources") or {}).get(kind)
            if isinstance(values, dict):
                for name, value in values.items():
                    if isinstance(value, int | float) and not isinstance(value, bool):
                        values[name] = str(value)


def pod_for(rs: dict[str, Any]) -> dict[str, Any]:
    """A pod of the ReplicaSet, from its template."""
    meta = rs["metadata"]
    template = copy.deepcopy(rs["spec"].get("template") or {})
    tmeta = template.get("metadata") or {}
    spec = template.get("spec") or {}
    quantities_as_strings(spec)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{meta['name']}-",
            "namespace": meta["namespace"],
            "labels": tmeta.get("labels") or {},
            "annotations": tmeta.get("annotations") or {},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


def _cost(pod: dict[str, Any]) -> tuple[int, int, int]:
    """Lower first: what deleting the pod costs (the controller's ranking, simplified)."""
    phase = (pod.get("status") or {}).get("phase")
    return (
        1 if pod["spec"].get("nodeName") else 0,
        {"Pending": 0, "Unknown": 1, "Running": 2}.get(str(phase), 0),
        1 if ready(pod) else 0,
    )


def surplus(pods: list[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    """The `count` pods the controller deletes first (the newest among equals: a stable sort)."""
    newest_first = sorted(pods, key=lambda p: str(p["metadata"].get("creationTimestamp") or ""), reverse=True)
    return sorted(newest_first, key=_cost)[: max(0, count)]


def status(
    rs: dict[str, Any], pods: list[dict[str, Any]], now: float, refusal: Refusal | None = None
) -> dict[str, Any]:
    """The ReplicaSet's status from its active pods, and ReplicaFailure while pods are refused."""
    labels = ((rs["spec"].get("template") or {}).get("metadata") or {}).get("labels") or {}
    min_ready = rs["spec"].get("minReadySeconds", 0)
    min_ready = min_ready if isinstance(min_ready, int) and not isinstance(min_ready, bool) else 0
    out: dict[str, Any] = {
        "replicas": len(pods),
        "fullyLabeledReplicas": sum(
            1 for p in pods if all((p["metadata"].get("labels") or {}).get(k) == v for k, v in labels.items())
        ),
        "readyReplicas": sum(1 for p in pods if ready(p)),
        "availableReplicas": sum(1 for p in pods if available(p, min_ready, now)),
        "observedGeneration": int(rs["metadata"].get("generation") or 1),
    }
    out["conditions"] = None  # none: removed from the stored status
    if refusal is not None:
        out["conditions"] = [
            {
                "type": "ReplicaFailure",
                "status": "True",
                "lastTransitionTime": refusal.since,
                "reason": "FailedCreate",
                "message": refusal.message[:1024],
            }
        ]
    return out
