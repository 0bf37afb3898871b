"""A v1 NodeSelector matched against a node, as an allocated ResourceClaim's `nodeSelector` is.

Why: an allocated claim restricts its pods to the nodes its allocation names; kube-scheduler's
DynamicResources plugin parses `status.allocation.nodeSelector` once in PreFilter and matches it per
node in Filter. Checked against kubernetes
`staging/src/k8s.io/component-helpers/scheduling/corev1/nodeaffinity/nodeaffinity.go`
(`NewNodeSelector`, `nodeSelectorTerms.Match`: terms are ORed, a term's requirements ANDed, a term
without requirements matches nothing; `matchFields` only on `metadata.name`; operators In,
NotIn, Exists, DoesNotExist, Gt, Lt). A malformed selector is a `ValueError` naming the field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

JSON = dict[str, Any]
Requirement = Callable[[dict[str, str]], bool]


def _requirement(req: Any, where: str, fields: bool) -> Requirement:
    if not isinstance(req, dict) or not isinstance(req.get("key"), str):
        raise ValueError(f"{where}.key: Required value")
    key, op, values = req["key"], req.get("operator"), req.get("values") or []
    if fields and key != "metadata.name":
        raise ValueError(f'{where}.key: Invalid value: "{key}": not a supported field selector key')
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ValueError(f"{where}.values: must be a list of strings")
    if op in ("In", "NotIn"):
        if not values:
            raise ValueError(f"{where}.values: Required value: must be specified when `operator` is '{op}'")
        wanted = set(values)
        if op == "In":
            return lambda labels: key in labels and labels[key] in wanted
        return lambda labels: key not in labels or labels[key] not in wanted
    if op in ("Exists", "DoesNotExist") and not fields:
        if values:
            raise ValueError(f"{where}.values: Forbidden: may not be specified when `operator` is '{op}'")
        return (lambda labels: key in labels) if op == "Exists" else (lambda labels: key not in labels)
    if op in ("Gt", "Lt") and not fields:
        if len(values) != 1 or not values[0].lstrip("-").isdigit():
            raise ValueError(f"{where}.values: must be a single integer for '{op}'")
        bound = int(values[0])

        def compare(labels: dict[str, str]) -> bool:
            have = labels.get(key, "")
            if not have.lstrip("-").isdigit():
                return False
            return int(have) > bound if op == "Gt" else int(have) < bound

        return compare
    raise ValueError(f'{where}.operator: Unsupported value: "{op}"')


class NodeSelector:
    """A parsed NodeSelector; `matches(node)` for node objects as the API serves them."""

    def __init__(self, selector: Any, where: str = "nodeSelector"):
        if not isinstance(selector, dict) or not isinstance(selector.get("nodeSelectorTerms"), list):
            raise ValueError(f"{where}.nodeSelectorTerms: Required value")
        self._terms: list[tuple[list[Requirement], list[Requirement]]] = []
        for ti, term in enumerate(selector["nodeSelectorTerms"]):
            at = f"{where}.nodeSelectorTerms[{ti}]"
            if not isinstance(term, dict):
                raise ValueError(f"{at}: must be an object")
            exprs = [
                _requirement(r, f"{at}.matchExpressions[{i}]", False)
                for i, r in enumerate(term.get("matchExpressions") or [])
            ]
            fields = [
                _requirement(r, f"{at}.matchFields[{i}]", True)
                for i, r in enumerate(term.get("matchFields") or [])
            ]
            self._terms.append((exprs, fields))

    def matches(self, node: JSON) -> bool:
        meta = node.get("metadata") or {}
        labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        fields = {"metadata.name": str(meta.get("name", ""))}
        for exprs, field_reqs in self._terms:
            if not exprs and not field_reqs:
                continue  # an empty term matches no objects
            if all(r(labels) for r in exprs) and all(r(fields) for r in field_reqs):
                return True
        return False
