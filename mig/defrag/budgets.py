"""PodDisruptionBudgets as the defrag advisor counts them: which select a pod, and whether a set of pods
stays within what each still allows. See docs/defrag.md, "Legal sets".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mig.defrag.holders import Holder
from mig.pods import metadata_of


def within_budgets(victims: Iterable[Holder], budgets: Mapping[str, int]) -> str:
    """The first PodDisruptionBudget group the set would take below zero, or "" when none."""
    taken: dict[str, int] = {}
    for h in victims:
        for g in h.groups:
            taken[g] = taken.get(g, 0) + 1
            if taken[g] > max(0, budgets.get(g, 0)):
                return g
    return ""


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    labels = metadata_of(obj).get("labels")
    return labels if isinstance(labels, Mapping) else {}


_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def selects(selector: Any, labels: Mapping[str, Any]) -> bool:
    """A PodDisruptionBudget's label selector; empty or unreadable matches nothing (the eviction rule)."""
    if not isinstance(selector, Mapping):
        return False
    match = selector.get("matchLabels") or {}
    exprs = selector.get("matchExpressions") or []
    if not isinstance(match, Mapping) or not isinstance(exprs, list) or not (match or exprs):
        return False
    if any(labels.get(k) != v for k, v in match.items()):
        return False
    for e in exprs:
        if not isinstance(e, Mapping) or e.get("operator") not in _OPERATORS:
            return False
        key, op, values = str(e.get("key")), e.get("operator"), e.get("values") or []
        present = key in labels
        if (
            (op == "In" and labels.get(key) not in values)
            or (op == "NotIn" and present and labels.get(key) in values)
            or (op == "Exists" and not present)
            or (op == "DoesNotExist" and present)
        ):
            return False
    return True


def _whole(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclass(frozen=True)
class Budgets:
    """PodDisruptionBudgets as the advisor needs them: which select a pod, how many more may go."""

    selectors: tuple[tuple[str, str, Any], ...] = ()  # (namespace, "namespace/name", selector)
    allowed: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_objects(cls, pdbs: Iterable[Mapping[str, Any]]) -> Budgets:
        selectors, allowed = [], {}
        for pdb in pdbs:
            meta, spec, status = metadata_of(pdb), pdb.get("spec"), pdb.get("status")
            key = f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"
            selectors.append(
                (
                    str(meta.get("namespace") or ""),
                    key,
                    spec.get("selector") if isinstance(spec, Mapping) else None,
                )
            )
            status = status if isinstance(status, Mapping) else {}
            left = status.get("disruptionsAllowed")
            stale = _whole(status.get("observedGeneration")) < _whole(meta.get("generation"))
            allowed[key] = 0 if stale else _whole(left)
        return cls(tuple(selectors), allowed)

    def groups(self, pod: Mapping[str, Any]) -> tuple[str, ...]:
        namespace, labels = metadata_of(pod).get("namespace") or "", _labels(pod)
        return tuple(key for ns, key, sel in self.selectors if ns == namespace and selects(sel, labels))
