"""What is being admitted, and whether an admission rule (webhook `rules[]`, a policy's
`resourceRules`) selects it: shared by the webhook dispatcher and the policy evaluator."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sim.apiserver.identities import Identity
from sim.apiserver.resources import ResourceType
from sim.apiserver.selectors import labels_of, match_label_selector


@dataclass
class Attributes:
    """What is being admitted (the apiserver's admission.Attributes)."""

    operation: str
    rt: ResourceType
    subresource: str
    name: str
    namespace: str
    obj: dict[str, Any] | None
    old: dict[str, Any] | None
    user: Identity
    dry_run: bool = False
    kind: dict[str, str] = field(default_factory=dict)


def rule_matches(rule: dict[str, Any], a: Attributes) -> bool:
    ops = rule.get("operations") or []
    if "*" not in ops and a.operation not in ops:
        return False
    groups = rule.get("apiGroups") or []
    if "*" not in groups and a.rt.group not in groups:
        return False
    versions = rule.get("apiVersions") or []
    if "*" not in versions and a.rt.version not in versions:
        return False
    scope = rule.get("scope") or "*"
    if (scope == "Cluster" and a.rt.namespaced) or (scope == "Namespaced" and not a.rt.namespaced):
        return False
    wanted = f"{a.rt.plural}/{a.subresource}" if a.subresource else a.rt.plural
    for res in rule.get("resources") or []:
        if res == "*/*" or res == wanted:
            return True
        if res == "*" and not a.subresource:
            return True
        main, _, sub = res.partition("/")
        if (
            sub
            and (main == "*" or main == a.rt.plural)
            and (sub == "*" or sub == a.subresource)
            and a.subresource
        ):
            return True
    return False


def object_selector_matches(selector: dict[str, Any] | None, a: Attributes) -> bool:
    """An objectSelector (webhooks and policy bindings alike) matches when the new or the old
    object's labels match; no selector matches everything."""
    return not selector or any(
        o is not None and match_label_selector(selector, labels_of(o)) for o in (a.obj, a.old)
    )
