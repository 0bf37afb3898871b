"""Which nodes a pod may run on, as kube-scheduler's own filters decide it from the pod's spec and the
Node objects alone, so advice about a waiting pod (`dynmig status`, the page, defrag) only counts
nodes the pod could land on. Pure (no I/O).

Three filters of kube-scheduler's default profile, in the order it runs them (a node is refused by
the first that refuses it):

- NodeUnschedulable: a cordoned node (`spec.unschedulable`) takes only pods tolerating the taint
  `node.kubernetes.io/unschedulable:NoSchedule`;
- TaintToleration: every taint of effect NoSchedule or NoExecute must be tolerated (PreferNoSchedule
  only scores). A toleration with an empty effect matches every effect, an empty key every key (with
  `Exists`); `Exists` matches every value, `Equal` (or no operator) only its own value. Other
  operators (`Lt`/`Gt` behind an alpha feature gate, off by default) tolerate nothing;
- NodeAffinity: every `spec.nodeSelector` label must be on the node with that value, and when
  `requiredDuringSchedulingIgnoredDuringExecution` is set, one of its node selector terms must
  match (terms are ORed; an empty term, or no term, matches nothing). Within a term every
  `matchExpressions` requirement must hold against the node's labels (In, NotIn, Exists,
  DoesNotExist, Gt, Lt; NotIn and DoesNotExist hold when the label is absent; Gt/Lt compare base-10
  64-bit integers and fail on a label that is not one) and every `matchFields` requirement
  (In/NotIn with exactly one value; only `metadata.name` has a value, the node's name). A
  requirement kube-scheduler cannot parse (unknown operator, wrong number of values, a key or value
  that is not a valid label key or value, a Gt/Lt value that is no integer) makes its term match
  nothing.

Checked against kubernetes/kubernetes: component-helpers/scheduling/corev1/nodeaffinity/nodeaffinity.go
(GetRequiredNodeAffinity, LazyErrorNodeSelector, the requirement converters),
component-helpers/scheduling/corev1/helpers.go (FindMatchingUntoleratedTaint), api/core/v1/toleration.go
(ToleratesTaint), apimachinery/pkg/labels/selector.go (NewRequirement, Requirement.Matches),
pkg/scheduler/framework/plugins/tainttoleration (Filter) and nodeunschedulable (Filter).

Hostile input never raises: a field of the wrong type is read as kube-scheduler would fail to match
it (a nodeSelector or affinity that is not a map matches no node; a toleration that is not a map
tolerates nothing); a huge toleration list costs one pass to index it. A node whose object is not
known is taken as eligible: only nodes known to refuse the pod are left out.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
FILTERED_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
CORDONED = "cordoned (spec.unschedulable), not tolerated"
NOT_SELECTED = "not matching its nodeSelector"
NOT_AFFINE = "not matching its required node affinity"
MAX_TEXT = 80  # one taint's key or value in a reason
MAX_REASONS = 3  # reasons named in a summary; the rest are counted

_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_INT64 = re.compile(r"^[+-]?[0-9]+$")
_SET_OPS = frozenset({"In", "NotIn"})
_EXISTS_OPS = frozenset({"Exists", "DoesNotExist"})
_NUMBER_OPS = frozenset({"Gt", "Lt"})


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _optional(value: object) -> str | None:
    """An optional string field: "" when absent, None when it is of another type."""
    return "" if value is None else value if isinstance(value, str) else None


# ---------------------------------------------------------------- nodes


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        value = f"={self.value[:MAX_TEXT]}" if self.value else ""
        return f"{self.key[:MAX_TEXT]}{value}:{self.effect[:MAX_TEXT]}"


@dataclass(frozen=True)
class NodeFacts:
    """What the three filters read of a Node: its name, labels, filtered taints, and cordon."""

    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    unschedulable: bool = False


def node_facts(node: Mapping[str, Any]) -> NodeFacts:
    """The filters' view of a Node object (fields of the wrong type read as absent)."""
    meta, spec = _map(node.get("metadata")), _map(node.get("spec"))
    labels = {k: v for k, v in _map(meta.get("labels")).items() if isinstance(k, str) and isinstance(v, str)}
    taints = tuple(
        Taint(_text(t.get("key")), _text(t.get("value")), effect)
        for t in _list(spec.get("taints"))
        if isinstance(t, Mapping) and (effect := _text(t.get("effect"))) in FILTERED_EFFECTS
    )
    return NodeFacts(_text(meta.get("name")), labels, taints, spec.get("unschedulable") is True)


# ---------------------------------------------------------------- tolerations


@dataclass(frozen=True)
class Tolerations:
    """A pod's tolerations, indexed: (key, effect) of `Exists` ones, (key, effect, value) of `Equal`
    ones ("" key or effect: any). One lookup per taint, however long the list."""

    exists: frozenset[tuple[str, str]] = frozenset()
    equal: frozenset[tuple[str, str, str]] = frozenset()

    def tolerate(self, taint: Taint) -> bool:
        for key in {taint.key, ""}:
            for effect in {taint.effect, ""}:
                if (key, effect) in self.exists or (key, effect, taint.value) in self.equal:
                    return True
        return False


def tolerations_of(value: object) -> Tolerations:
    exists: set[tuple[str, str]] = set()
    equal: set[tuple[str, str, str]] = set()
    for t in _list(value):
        if not isinstance(t, Mapping):
            continue
        key, effect, operator, value = (_optional(t.get(f)) for f in ("key", "effect", "operator", "value"))
        if key is None or effect is None or value is None:
            continue  # a field of the wrong type: this toleration tolerates nothing
        if operator == "Exists":
            exists.add((key, effect))
        elif operator in ("", "Equal"):
            equal.add((key, effect, value))
    return Tolerations(frozenset(exists), frozenset(equal))


# ---------------------------------------------------------------- node affinity


def _qualified_name(key: object) -> bool:
    """A valid label key: an optional DNS subdomain prefix and "/", then a name of at most 63."""
    if not isinstance(key, str):
        return False
    prefix, slash, name = key.rpartition("/")
    if slash and not (0 < len(prefix) <= 253 and all(_DNS_LABEL.match(p) for p in prefix.split("."))):
        return False
    return 0 < len(name) <= 63 and _NAME.match(name) is not None


def _label_value(value: object) -> bool:
    return isinstance(value, str) and len(value) <= 63 and (not value or _NAME.match(value) is not None)


def _int64(value: str) -> int | None:
    if not _INT64.match(value):
        return None
    n = int(value)
    return n if -(2**63) <= n < 2**63 else None


@dataclass(frozen=True)
class LabelRequirement:
    key: str
    operator: str
    values: frozenset[str]
    number: int = 0  # the value of Gt/Lt

    def holds(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "In":
            return present and labels[self.key] in self.values
        if self.operator == "NotIn":
            return not present or labels[self.key] not in self.values
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        have = _int64(labels[self.key]) if present else None
        if have is None:
            return False
        return have > self.number if self.operator == "Gt" else have < self.number


def _label_requirement(expr: object) -> LabelRequirement | None:
    """One matchExpressions entry as kube-scheduler parses it, or None when it cannot be parsed."""
    if not isinstance(expr, Mapping):
        return None
    key, op, raw = expr.get("key"), expr.get("operator"), expr.get("values")
    values = [] if raw is None else raw
    if not isinstance(values, list) or not _qualified_name(key) or not isinstance(op, str):
        return None
    if not all(_label_value(v) for v in values):
        return None
    if op in _SET_OPS and values:
        return LabelRequirement(str(key), op, frozenset(values))
    if op in _EXISTS_OPS and not values:
        return LabelRequirement(str(key), op, frozenset())
    if op in _NUMBER_OPS and len(values) == 1 and (number := _int64(values[0])) is not None:
        return LabelRequirement(str(key), op, frozenset(values), number)
    return None


@dataclass(frozen=True)
class FieldRequirement:
    key: str
    equal: bool  # In (equal) or NotIn
    value: str

    def holds(self, name: str) -> bool:
        have = name if self.key == "metadata.name" else ""
        return (have == self.value) == self.equal


def _field_requirement(expr: object) -> FieldRequirement | None:
    if not isinstance(expr, Mapping):
        return None
    key, op, values = expr.get("key"), expr.get("operator"), expr.get("values")
    if not isinstance(key, str) or op not in _SET_OPS or not isinstance(values, list) or len(values) != 1:
        return None
    if not isinstance(values[0], str):
        return None
    return FieldRequirement(key, op == "In", values[0])


@dataclass(frozen=True)
class Term:
    """One node selector term that parsed; `broken` terms are dropped (they match nothing)."""

    labels: tuple[LabelRequirement, ...]
    fields: tuple[FieldRequirement, ...]

    def matches(self, node: NodeFacts) -> bool:
        if not all(r.holds(node.labels) for r in self.labels):
            return False
        return not node.name or all(r.holds(node.name) for r in self.fields)


def _term(value: object) -> Term | None:
    term = _map(value)
    exprs, fields = _list(term.get("matchExpressions")), _list(term.get("matchFields"))
    if not exprs and not fields:
        return None  # an empty term selects nothing
    labels = [_label_requirement(e) for e in exprs]
    found = [_field_requirement(f) for f in fields]
    if any(r is None for r in labels) or any(r is None for r in found):
        return None
    return Term(tuple(r for r in labels if r is not None), tuple(r for r in found if r is not None))


def _required_terms(spec: Mapping[str, Any]) -> tuple[Term, ...] | None:
    """The required node affinity's usable terms: None when unset, () when it matches no node."""
    value: object = spec
    for key in ("affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution"):
        value = _map(value).get(key)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            return ()  # not a map: kube-scheduler could not read it either
    terms = _list(_map(value).get("nodeSelectorTerms"))
    return tuple(t for t in (_term(x) for x in terms) if t is not None)


# ---------------------------------------------------------------- the pod's constraints


@dataclass(frozen=True)
class Constraints:
    """What of a pod's spec the three filters read, parsed once (hashable: pods alike share it)."""

    selector: tuple[tuple[str, str], ...] | None = ()  # None: a nodeSelector that is not a map
    terms: tuple[Term, ...] | None = None  # None: no required node affinity
    tolerations: Tolerations = field(default_factory=Tolerations)

    def refusal(self, node: NodeFacts) -> str:
        """Why the node refuses the pod, as the first refusing filter would say it; "" if it may run."""
        if node.unschedulable and not self.tolerations.tolerate(Taint(UNSCHEDULABLE_TAINT, "", "NoSchedule")):
            return CORDONED
        for taint in node.taints:
            if not self.tolerations.tolerate(taint):
                return f"with taint {taint}, not tolerated"
        if self.selector is None or any(node.labels.get(k) != v for k, v in self.selector):
            return NOT_SELECTED
        if self.terms is not None and not any(t.matches(node) for t in self.terms):
            return NOT_AFFINE
        return ""


def constraints_of(pod: Mapping[str, Any]) -> Constraints:
    """A pod's constraints from its spec (see the module doc for what of it is read)."""
    spec = _map(pod.get("spec"))
    return Constraints(
        _selector(spec.get("nodeSelector")), _required_terms(spec), tolerations_of(spec.get("tolerations"))
    )


def _selector(raw: object) -> tuple[tuple[str, str], ...] | None:
    """spec.nodeSelector as sorted pairs; None (no node matches) when it is not a map of strings."""
    if raw is None:
        return ()
    if not isinstance(raw, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in raw.items()
    ):
        return None
    return tuple(sorted(raw.items()))


# ---------------------------------------------------------------- over a fleet


@dataclass(frozen=True)
class Eligibility:
    """The nodes a pod may run on among those asked about, and why the others refuse it."""

    allowed: frozenset[str]
    refused: Mapping[str, int]  # why -> how many nodes
    considered: int

    @property
    def restriction(self) -> frozenset[str] | None:
        """The nodes to plan over; None when no node refuses the pod (plan over all)."""
        return self.allowed if self.refused else None

    def summary(self) -> str:
        """E.g. "2 of 3 nodes refuse it: 1 not matching its nodeSelector, 1 with taint a=b:NoSchedule,
        not tolerated" ("" when none refuses it)."""
        if not self.refused:
            return ""
        count = sum(self.refused.values())
        ranked = sorted(self.refused.items(), key=lambda kv: (-kv[1], kv[0]))
        parts = [f"{n} {why}" for why, n in ranked[:MAX_REASONS]]
        if len(ranked) > MAX_REASONS:
            parts.append(f"{len(ranked) - MAX_REASONS} more reasons")
        return f"{count} of {self.considered} nodes refuse it: " + ", ".join(parts)


def eligibility(constraints: Constraints, nodes: Iterable[tuple[str, NodeFacts | None]]) -> Eligibility:
    """Which of `nodes` ((name, facts), facts None: the object is not known, so it is eligible) the
    pod with these constraints may run on."""
    allowed: set[str] = set()
    refused: Counter[str] = Counter()
    considered = 0
    for name, facts in nodes:
        considered += 1
        why = constraints.refusal(facts) if facts is not None else ""
        if why:
            refused[why] += 1
        else:
            allowed.add(name)
    return Eligibility(frozenset(allowed), dict(refused), considered)


__all__ = [
    "Constraints",
    "Eligibility",
    "NodeFacts",
    "Taint",
    "Tolerations",
    "constraints_of",
    "eligibility",
    "node_facts",
    "tolerations_of",
]
