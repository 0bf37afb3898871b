"""Label and field selectors, parsed once per request and matched against plain dict objects."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from sim.apiserver.errors import ApiError

Matcher = Callable[[dict[str, Any]], bool]

_SET_RE = re.compile(r"^\s*(!?)([A-Za-z0-9_./-]+)\s*(?:(notin|in)\s*\(([^)]*)\))?\s*$")
_EQ_RE = re.compile(r"^\s*([A-Za-z0-9_./-]+)\s*(==|=|!=)\s*([A-Za-z0-9_.-]*)\s*$")


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside parentheses (`a in (x,y),b`)."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p for p in parts if p.strip()]


def _label_term(term: str) -> Callable[[dict[str, str]], bool]:
    m = _EQ_RE.match(term)
    if m:
        key, op, value = m.groups()
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    m = _SET_RE.match(term)
    if not m:
        raise ApiError(
            400,
            f"unable to parse requirement: {term.strip()!r}: use key=value, key!=value, "
            "key in (a,b), key notin (a,b), key or !key",
        )
    neg, key, op, values = m.groups()
    if op:
        if neg:
            raise ApiError(400, f"unable to parse requirement: {term.strip()!r}")
        vals = {v.strip() for v in values.split(",") if v.strip()}
        if op == "in":
            return lambda labels: labels.get(key) in vals
        return lambda labels: labels.get(key) not in vals
    if neg:
        return lambda labels: key not in labels
    return lambda labels: key in labels


def parse_labels(text: str | None) -> Callable[[dict[str, str]], bool] | None:
    """Compile a label selector string into a predicate on a labels dict (None when empty)."""
    if not text or not text.strip():
        return None
    terms = [_label_term(t) for t in _split_top(text)]
    return lambda labels: all(t(labels) for t in terms)


def labels_of(obj: dict[str, Any] | None) -> dict[str, str]:
    if not obj:
        return {}
    return (obj.get("metadata") or {}).get("labels") or {}


def match_label_selector(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """Match a structured metav1.LabelSelector (matchLabels + matchExpressions); empty matches all."""
    if not selector:
        return True
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def selector_string(selector: Any) -> str:
    """A structured LabelSelector as its selector string, requirements sorted by key and set values
    sorted (as kube-apiserver's LabelSelectorAsSelector(...).String() writes it); "" when empty."""
    if not isinstance(selector, dict):
        return ""
    terms = [(str(k), f"{k}={v}") for k, v in (selector.get("matchLabels") or {}).items()]
    for expr in selector.get("matchExpressions") or []:
        if not isinstance(expr, dict):
            continue
        key, op = str(expr.get("key", "")), expr.get("operator")
        values = ",".join(sorted(str(v) for v in expr.get("values") or []))
        text = {"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})", "Exists": key}.get(
            str(op), f"!{key}"
        )
        terms.append((key, text))
    return ",".join(text for _, text in sorted(terms))


def field_value(obj: dict[str, Any], path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    if isinstance(cur, dict) and path == "source":
        return str(cur.get("component", ""))
    return str(cur)


def parse_fields(
    text: str | None, supported: tuple[str, ...], paths: dict[str, str] | None = None
) -> Matcher | None:
    """Compile a field selector; only the resource's supported field labels are accepted (400 else).
    `paths` maps a label to the path it reads in the stored object where the two differ."""
    if not text or not text.strip():
        return None
    allowed = {"metadata.name", "metadata.namespace", *supported}
    paths = paths or {}
    checks = []
    for term in _split_top(text):
        m = re.match(r"^\s*([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*?)\s*$", term)
        if not m:
            raise ApiError(400, f"invalid field selector: {term!r}: use field=value or field!=value")
        path, op, value = m.groups()
        if path not in allowed:
            raise ApiError(400, f"field label not supported: {path}")
        checks.append((paths.get(path, path), op == "!=", value))

    def match(obj: dict[str, Any]) -> bool:
        return all((field_value(obj, p) != v) if neg else (field_value(obj, p) == v) for p, neg, v in checks)

    return match


def exact_field(text: str | None, path: str) -> str | None:
    """The value of a single `path=value` term when present (used to index by namespace or name)."""
    if not text:
        return None
    for term in _split_top(text):
        m = re.match(r"^\s*([A-Za-z0-9_.]+)\s*(==|=)\s*(.*?)\s*$", term)
        if m and m.group(1) == path:
            return m.group(3)
    return None
