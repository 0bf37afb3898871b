"""The in-tree filtering the simulated kube-scheduler does before extenders: node readiness,
unschedulable nodes, taints/tolerations, nodeSelector; and how many feasible nodes it looks for."""

from __future__ import annotations

from typing import Any

MIN_FEASIBLE_NODES = 100
MIN_FEASIBLE_PERCENT = 5

NOT_READY_TAINT = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


def num_feasible_nodes_to_find(percentage: int, num_all_nodes: int) -> int:
    """kube-scheduler's sampling: below 100 nodes all; else percentageOfNodesToScore (adaptive
    50 - nodes/125, at least 5 %) of them, at least 100."""
    if num_all_nodes < MIN_FEASIBLE_NODES:
        return num_all_nodes
    if percentage == 0:
        percentage = max(50 - num_all_nodes // 125, MIN_FEASIBLE_PERCENT)
    if percentage >= 100:
        return num_all_nodes
    return max(num_all_nodes * percentage // 100, MIN_FEASIBLE_NODES)


def _tolerates(tolerations: list[dict[str, Any]], taint: dict[str, Any]) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        op = t.get("operator") or "Equal"
        if op == "Exists":
            if not t.get("key") or t["key"] == taint.get("key"):
                return True
        elif t.get("key") == taint.get("key") and (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _ready(node: dict[str, Any]) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


PLAIN_POD: dict[str, Any] = {"spec": {}}


def is_plain(pod: dict[str, Any]) -> bool:
    """No tolerations and no nodeSelector: the pod fits a node exactly when `PLAIN_POD` does, so the
    answer can be computed once per node version (as kube-scheduler's snapshot keeps NodeInfo)."""
    spec = pod.get("spec") or {}
    return not spec.get("tolerations") and not spec.get("nodeSelector")


def unfit_reason(pod: dict[str, Any], node: dict[str, Any]) -> str | None:
    """Why the node cannot take the pod, in kube-scheduler's words; None when it fits."""
    spec = pod.get("spec") or {}
    tolerations = spec.get("tolerations") or []
    if (node.get("spec") or {}).get("unschedulable") and not _tolerates(tolerations, UNSCHEDULABLE_TAINT):
        return "node(s) were unschedulable"
    if not _ready(node) and not _tolerates(tolerations, NOT_READY_TAINT):
        return "node(s) had untolerated taint {node.kubernetes.io/not-ready: }"
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(tolerations, taint):
            return f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value') or ''}}}"
    labels = (node.get("metadata") or {}).get("labels") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return "node(s) didn't match Pod's node affinity/selector"
    return None
