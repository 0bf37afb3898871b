"""PodDisruptionBudgets and the pods/eviction subresource, as kube-apiserver and the disruption controller do.

The eviction handler (kube-apiserver's pod eviction REST storage), POST .../pods/<name>/eviction:
- the body is a policy/v1 Eviction whose metadata.name must be the pod's (400 otherwise); a missing
  pod is 404;
- a pod that is Pending, Succeeded, Failed or already terminating is deleted at once, no budget asked;
- otherwise the PodDisruptionBudgets of the pod's namespace whose selector matches its labels are
  found (an empty or unreadable selector matches nothing). More than one: 500. None: the pod is
  deleted. One: if the budget's status is older than its spec (observedGeneration < generation):
  429 "still being processed"; disruptionsAllowed < 0: 403; disruptionsAllowed == 0: 429
  TooManyRequests "Cannot evict pod as it would violate the pod's disruption budget." with a
  `DisruptionBudget` cause; else the budget is decremented, the pod recorded in disruptedPods and
  deleted gracefully with the Eviction's deleteOptions. A pod that is not Ready is deleted without
  spending the budget when the budget is already healthy enough.
- success is a v1 Status "Success" with code 201.

The disruption controller (kube-controller-manager), one pass per `sync_budgets` call: expectedPods,
currentHealthy (Ready, not terminating, not recently disrupted), desiredHealthy from minAvailable or
maxUnavailable (percentages round up), disruptionsAllowed = currentHealthy - desiredHealthy (0 when
negative or no pod is expected), disruptedPods entries dropped once the pod is gone or after 2 min,
observedGeneration and the DisruptionAllowed condition. Simplification: a controller's scale is the
number of its pods that exist (the real controller reads spec.replicas); pods without a controller
count 0 for maxUnavailable and percentage budgets, as in kube-controller-manager.
"""

from __future__ import annotations

import calendar
import math
import time
from typing import Any

from sim.apiserver import objects
from sim.apiserver.errors import ApiError, status_object
from sim.apiserver.registry import Request, Result
from sim.apiserver.resources import BY_KEY
from sim.apiserver.selectors import labels_of, match_label_selector
from sim.apiserver.trees import clone

PODS = BY_KEY[("", "pods")]
BUDGETS = BY_KEY[("policy", "poddisruptionbudgets")]
DELETION_TIMEOUT = 120.0  # seconds a disrupted pod is not counted healthy while it has not gone
_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
BUDGET_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."


# ---- shared facts --------------------------------------------------------------------------------


def _selects(pdb: dict[str, Any], pod: dict[str, Any]) -> bool:
    """An empty or unreadable selector matches nothing (the eviction handler's rule)."""
    selector = (pdb.get("spec") or {}).get("selector")
    if not isinstance(selector, dict) or not (
        selector.get("matchLabels") or selector.get("matchExpressions")
    ):
        return False
    exprs = selector.get("matchExpressions") or []
    if not isinstance(exprs, list) or any(
        not isinstance(e, dict) or e.get("operator") not in _OPERATORS for e in exprs
    ):
        return False
    if not isinstance(selector.get("matchLabels") or {}, dict):
        return False
    return match_label_selector(selector, labels_of(pod))


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(
        isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True" for c in conditions
    )


def _epoch(text: Any) -> float:
    try:
        return float(calendar.timegm(time.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return 0.0


def budgets_for(registry: Any, pod: dict[str, Any]) -> list[dict[str, Any]]:
    namespace = pod["metadata"].get("namespace", "")
    return [b for b in registry.store.table(BUDGETS).items(namespace) if _selects(b, pod)]


# ---- the eviction subresource -----------------------------------------------------------------------


def _too_many(message: str, cause: str, retry_after: int) -> ApiError:
    details: dict[str, Any] = {"causes": [{"reason": "DisruptionBudget", "message": cause}]}
    if retry_after:
        details["retryAfterSeconds"] = retry_after
    return ApiError(429, message, "TooManyRequests", details)


def _spend(registry: Any, pdb: dict[str, Any], pod_name: str, dry_run: bool) -> None:
    """Check the budget allows one more disruption and take it (caller holds the store lock)."""
    meta, status = pdb["metadata"], pdb.get("status") or {}
    name = meta["name"]
    if int(status.get("observedGeneration") or 0) < int(meta.get("generation") or 0):
        raise _too_many(
            BUDGET_MESSAGE, f"The disruption budget {name} is still being processed by the server.", 10
        )
    allowed = int(status.get("disruptionsAllowed") or 0)
    if allowed < 0:
        raise ApiError(
            403,
            f'poddisruptionbudget.policy "{name}" is forbidden: pdb disruptions allowed is negative',
            "Forbidden",
            {"name": name, "group": "policy", "kind": "poddisruptionbudget"},
        )
    if allowed == 0:
        raise _too_many(
            BUDGET_MESSAGE,
            f"The disruption budget {name} needs {int(status.get('desiredHealthy') or 0)} healthy pods "
            f"and has {int(status.get('currentHealthy') or 0)} currently",
            0,
        )
    if dry_run:
        return
    new = clone(pdb)
    st = new.setdefault("status", {})
    st["disruptionsAllowed"] = allowed - 1
    st.setdefault("disruptedPods", {})[pod_name] = objects.now()
    if allowed - 1 == 0:
        _condition(st, False)
    registry.store.commit(BUDGETS, meta.get("namespace", ""), name, new, "MODIFIED")


def evict(registry: Any, req: Any, body: Any) -> Any:
    """POST pods/<name>/eviction (see the module docstring); returns the registry's Result."""
    if not isinstance(body, dict):
        raise ApiError(400, "the body of an Eviction must be a JSON object")
    if (body.get("metadata") or {}).get("name") != req.name:
        raise ApiError(400, "name in URL does not match name in Eviction object")
    options = body.get("deleteOptions") or {}
    if not isinstance(options, dict):
        raise ApiError(400, "deleteOptions must be an object")
    preq = Request(req.user, PODS, req.namespace, req.name, "", req.dry_run)
    with registry.store.lock:
        pod = registry.get(preq)
        phase = (pod.get("status") or {}).get("phase")
        if phase not in ("Pending", "Succeeded", "Failed") and not pod["metadata"].get("deletionTimestamp"):
            budgets = budgets_for(registry, pod)
            if len(budgets) > 1:
                raise ApiError(
                    500,
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does "
                    "not support.",
                    "",
                )
            if budgets and not _skips_budget(pod, budgets[0]):
                _spend(registry, budgets[0], req.name, req.dry_run)
        registry.delete(preq, options)
    return Result(status_object(201, "", "", ok=True), 201)


def _skips_budget(pod: dict[str, Any], pdb: dict[str, Any]) -> bool:
    """A pod that is not Ready is not counted healthy: evicting it costs nothing when enough are."""
    st = pdb.get("status") or {}
    desired = int(st.get("desiredHealthy") or 0)
    return not _ready(pod) and int(st.get("currentHealthy") or 0) >= desired and desired > 0


# ---- the disruption controller -------------------------------------------------------------------


def _scaled(value: Any, total: int) -> int | None:
    """An int-or-percent against `total`, rounding up; None when unreadable."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.endswith("%") and value[:-1].isdigit():
        return math.ceil(int(value[:-1]) * total / 100)
    return None


def _controller_scale(pods: list[dict[str, Any]]) -> int:
    """The pods that have a controller (each controller's scale taken as its pods that exist)."""
    return sum(
        1
        for p in pods
        if any(
            isinstance(r, dict) and r.get("controller") for r in p["metadata"].get("ownerReferences") or []
        )
    )


def _expected(pdb: dict[str, Any], pods: list[dict[str, Any]]) -> tuple[int, int]:
    """(expectedPods, desiredHealthy) as getExpectedPodCount computes them."""
    spec = pdb.get("spec") or {}
    if spec.get("maxUnavailable") is not None:
        expected = _controller_scale(pods)
        most = _scaled(spec["maxUnavailable"], expected)
        return expected, max(0, expected - (most if most is not None else expected))
    minimum = spec.get("minAvailable")
    if isinstance(minimum, int) and not isinstance(minimum, bool):
        return len(pods), minimum
    if minimum is not None:
        expected = _controller_scale(pods)
        least = _scaled(minimum, expected)
        return expected, least if least is not None else expected
    return 0, 0  # neither set: nothing expected, so no disruption is allowed


def _condition(status: dict[str, Any], allowed: bool) -> None:
    reason = "SufficientPods" if allowed else "InsufficientPods"
    conds = [c for c in status.get("conditions") or [] if c.get("type") != "DisruptionAllowed"]
    conds.append(
        {
            "type": "DisruptionAllowed",
            "status": "True" if allowed else "False",
            "reason": reason,
            "message": "",
            "lastTransitionTime": objects.now(),
            "observedGeneration": status.get("observedGeneration", 0),
        }
    )
    status["conditions"] = conds


def sync_budgets(registry: Any, now: float | None = None) -> None:
    """One pass of the disruption controller over every PodDisruptionBudget."""
    now = time.time() if now is None else now
    with registry.store.lock:
        for pdb in registry.store.table(BUDGETS).items(None):
            ns = pdb["metadata"].get("namespace", "")
            pods = [p for p in registry.store.table(PODS).items(ns) if _selects(pdb, p)]
            expected, desired = _expected(pdb, pods)
            was = (pdb.get("status") or {}).get("disruptedPods") or {}
            disrupted = {
                p["metadata"]["name"]: was[p["metadata"]["name"]]
                for p in pods
                if not p["metadata"].get("deletionTimestamp")
                and p["metadata"]["name"] in was
                and _epoch(was[p["metadata"]["name"]]) + DELETION_TIMEOUT > now
            }
            healthy = sum(
                1
                for p in pods
                if not p["metadata"].get("deletionTimestamp")
                and p["metadata"]["name"] not in disrupted
                and _ready(p)
            )
            allowed = max(0, healthy - desired) if expected > 0 else 0
            status = {
                "currentHealthy": healthy,
                "desiredHealthy": desired,
                "expectedPods": expected,
                "disruptionsAllowed": allowed,
                "observedGeneration": int(pdb["metadata"].get("generation") or 0),
                "conditions": (pdb.get("status") or {}).get("conditions") or [],
            }
            if disrupted:
                status["disruptedPods"] = disrupted
            old = dict(pdb.get("status") or {})
            if {k: v for k, v in old.items() if k != "conditions"} == {
                k: v for k, v in status.items() if k != "conditions"
            } and old.get("conditions"):
                continue
            _condition(status, allowed > 0)
            new = clone(pdb)
            new["status"] = status
            registry.store.commit(BUDGETS, ns, pdb["metadata"]["name"], new, "MODIFIED")
