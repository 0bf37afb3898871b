"""Pods waiting for MIG devices of a DRA driver, with kube-scheduler's reason, for `dynmig status`.

A pod is listed when it waits for a node (`mig.pods.is_waiting`) and one of its ResourceClaims asks
this driver: a request names a DeviceClass called after the driver (the chart's `mig.dynmig.io`, or
its per-profile classes `mig-<profile>.<driver>`), or a selector reads the driver's attributes
(`device.attributes["<driver>"]`). A pod whose claim is not created yet is listed once its name
(from the template) is known, else by the pod alone. The reason is kube-scheduler's own: the
message of the pod's PodScheduled=False condition (e.g. `0/3 nodes are available: 1 cannot
allocate all claims, ...`), or that the claim does not exist yet (kube-scheduler holds such a pod
without a word: PreEnqueue), or that no attempt is recorded yet.

Pure: JSON in, `PendingPod`s out; hostile input is skipped, never raised on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from mig.dra.score import claim_asks
from mig.jsontext import at
from mig.pods import is_waiting, metadata_of, not_scheduled
from mig.slicemap import PendingPod

MAX_REASON = 300
NO_CLAIM_YET = "its ResourceClaim is not created yet (kube-scheduler waits for it)"
NO_ATTEMPT = "waiting for kube-scheduler's first attempt"


def _claim_names(pod: Mapping[str, Any]) -> list[str | None]:
    """The pod's claim names (None for a template's claim not yet recorded)."""
    spec, status = at(pod, "spec"), at(pod, "status")
    statuses = at(status, "resourceClaimStatuses") if isinstance(status, Mapping) else None
    recorded = {
        s.get("name"): s.get("resourceClaimName")
        for s in (statuses[:64] if isinstance(statuses, list) else [])
        if isinstance(s, Mapping)
    }
    entries = at(spec, "resourceClaims") if isinstance(spec, Mapping) else None
    out: list[str | None] = []
    for e in entries[:64] if isinstance(entries, list) else []:
        if not isinstance(e, Mapping):
            continue
        name = e.get("resourceClaimName") or recorded.get(e.get("name"))
        out.append(name if isinstance(name, str) and name else None)
    return out


def _asks_driver(claim: Mapping[str, Any], driver: str) -> bool:
    requests = at(claim, "spec", "devices", "requests")
    for r in requests[:32] if isinstance(requests, list) else []:
        exactly = at(r, "exactly") if isinstance(r, Mapping) else None
        cls = at(exactly, "deviceClassName") if isinstance(exactly, Mapping) else None
        if isinstance(cls, str) and (cls == driver or cls.endswith("." + driver)):
            return True
        selectors = at(exactly, "selectors") if isinstance(exactly, Mapping) else None
        for s in selectors[:32] if isinstance(selectors, list) else []:
            expr = at(s, "cel", "expression")
            if isinstance(expr, str) and f'["{driver}"]' in expr[:10240]:
                return True
    return False


def _asks_text(claims: list[Mapping[str, Any]], driver: str) -> str:
    parts = []
    for c in claims:
        asks = claim_asks(c, driver)
        name = str(at(c, "metadata", "name") or "?")[:80]
        if asks:
            parts.append(", ".join(f"{a.count} × {'|'.join(a.profiles)}" for a in asks))
        else:
            parts.append(f"claim {name}")
    return "; ".join(parts) or "a ResourceClaim"


def pending_claim_pods(pods: Iterable[object], claims: Iterable[object], driver: str) -> list[PendingPod]:
    """The waiting pods whose claims ask `driver`, each with kube-scheduler's reason."""
    by_key: dict[tuple[str, str], Mapping[str, Any]] = {}
    for c in claims:
        if isinstance(c, Mapping):
            by_key[(str(at(c, "metadata", "namespace") or ""), str(at(c, "metadata", "name") or ""))] = c
    out = []
    for pod in pods:
        if not isinstance(pod, Mapping) or not is_waiting(pod):
            continue
        meta = metadata_of(pod)
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        names = _claim_names(pod)
        if not names:
            continue
        found = [by_key[(namespace, n)] for n in names if n is not None and (namespace, n) in by_key]
        ours = [c for c in found if _asks_driver(c, driver)]
        missing = len(found) < len(names)
        if not ours and not (missing and not found):
            continue
        cond = not_scheduled(pod)
        message = cond.get("message") if cond is not None else None
        fallback = NO_CLAIM_YET if missing else NO_ATTEMPT
        reason = message if isinstance(message, str) and message else fallback
        out.append(
            PendingPod(namespace, name, _asks_text(ours, driver), " ".join(reason.split())[:MAX_REASON])
        )
    return out
