"""The three patch types the API server accepts: JSON Patch (RFC 6902), JSON merge patch (RFC 7386)
and strategic merge patch (merge patch plus merge-by-key for the lists Kubernetes declares so).

All functions are pure: they never mutate their inputs. The merge patches copy only the maps on
the patch's paths, so their result may share unchanged parts with `doc` and with `patch`: clone
it (trees.clone) before changing it in place.
"""

from __future__ import annotations

from typing import Any

from sim.apiserver.trees import clone

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


class PatchError(Exception):
    """The patch cannot be applied; `test_failed` marks a failed `test` operation."""

    def __init__(self, message: str, test_failed: bool = False):
        super().__init__(message)
        self.test_failed = test_failed


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _tokens(pointer: str) -> list[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise PatchError(f"invalid JSON pointer {pointer!r}: must start with '/'")
    return [_unescape(t) for t in pointer[1:].split("/")]


def _index(container: list, token: str, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(container)
    if not token.isdigit():
        raise PatchError(f"invalid array index {token!r}")
    idx = int(token)
    if idx > len(container) or (idx == len(container) and not allow_end):
        raise PatchError(f"array index {idx} out of range")
    return idx


def _parent(doc: Any, tokens: list[str]) -> Any:
    cur = doc
    for t in tokens[:-1]:
        if isinstance(cur, dict):
            if t not in cur:
                raise PatchError(f"missing path component {t!r}: the parent must exist (add it first)")
            cur = cur[t]
        elif isinstance(cur, list):
            cur = cur[_index(cur, t, False)]
        else:
            raise PatchError(f"path component {t!r} is not a container")
    return cur


def _get(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        return doc
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"path {'/' + '/'.join(tokens)!r} does not exist")
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, False)]
    raise PatchError("target is not a container")


def _add(doc: Any, tokens: list[str], value: Any) -> Any:
    if not tokens:
        return value
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, True), value)
    else:
        raise PatchError("add target parent is not a container")
    return doc


def _remove(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"cannot remove missing key {last!r}")
        del parent[last]
    elif isinstance(parent, list):
        del parent[_index(parent, last, False)]
    return doc


def apply_json_patch(doc: Any, ops: Any) -> Any:
    """Apply an RFC 6902 operation list; a failed `test` raises PatchError(test_failed=True)."""
    if not isinstance(ops, list):
        raise PatchError("a JSON patch must be a list of operations")
    out = clone(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"invalid JSON patch operation {op!r}: needs 'op' and 'path'")
        kind, tokens = op["op"], _tokens(op["path"])
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchError(f"operation {kind} at {op['path']!r} needs a 'value'")
        if kind == "add":
            out = _add(out, tokens, clone(op["value"]))
        elif kind == "remove":
            out = _remove(out, tokens)
        elif kind == "replace":
            _get(out, tokens)
            out = _add(_remove(out, tokens), tokens, clone(op["value"])) if tokens else op["value"]
        elif kind in ("move", "copy"):
            src = _tokens(op.get("from", ""))
            value = clone(_get(out, src))
            if kind == "move":
                out = _remove(out, src)
            out = _add(out, tokens, value)
        elif kind == "test":
            try:
                current = _get(out, tokens)
            except PatchError as exc:
                raise PatchError(f"test operation failed: {exc}", test_failed=True) from exc
            if current != op["value"]:
                raise PatchError(
                    f"testing value {op['path']} failed: value is {current!r}, expected {op['value']!r}",
                    test_failed=True,
                )
        else:
            raise PatchError(f"unknown JSON patch operation {kind!r}")
    return out


def apply_merge_patch(doc: Any, patch: Any) -> Any:
    """RFC 7386: maps merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    out = dict(doc) if isinstance(doc, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = apply_merge_patch(out.get(key), value)
    return out


# Lists Kubernetes declares with patchStrategy "merge" and their merge keys (by field name).
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "conditions": "type",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "webhooks": "name",
    "ownerReferences": "uid",
    "taints": "key",
    "addresses": "type",
    "hostAliases": "ip",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
}
MERGE_PRIMITIVE_LISTS = {"finalizers"}


def _merge_list(key: str, current: list, patch: list) -> list:
    merge_key = MERGE_KEYS.get(key)
    if key in MERGE_PRIMITIVE_LISTS:
        out = list(current)
        for item in patch:
            if item not in out:
                out.append(item)
        return out
    if not merge_key or not all(isinstance(i, dict) for i in current + patch):
        return [apply_strategic_merge_patch(None, i) if isinstance(i, dict) else i for i in patch]
    out = list(current)
    for item in patch:
        directive = item.get("$patch")
        pos = next((n for n, cur in enumerate(out) if cur.get(merge_key) == item.get(merge_key)), None)
        if directive == "delete":
            if pos is not None:
                del out[pos]
            continue
        if directive == "replace":
            return [{k: v for k, v in i.items() if k != "$patch"} for i in patch]
        if pos is None:
            out.append(apply_strategic_merge_patch(None, item))
        else:
            out[pos] = apply_strategic_merge_patch(out[pos], item)
    return out


def apply_strategic_merge_patch(doc: Any, patch: Any) -> Any:
    """Merge patch, except lists with a declared merge key merge item-by-item (`$patch` directives
    `replace` and `delete` are honoured; `$setElementOrder`/`$retainKeys` are accepted and ignored)."""
    if not isinstance(patch, dict):
        return patch
    if patch.get("$patch") == "replace":
        return {k: v for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    out = dict(doc) if isinstance(doc, dict) else {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$retainKeys", "$patch"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            name = key.split("/", 1)[1]
            out[name] = [v for v in out.get(name) or [] if v not in (value or [])]
            continue
        if value is None:
            out.pop(key, None)
        elif isinstance(value, list) and isinstance(out.get(key), list):
            out[key] = _merge_list(key, out[key], value)
        elif isinstance(value, dict):
            merged = apply_strategic_merge_patch(out.get(key), value)
            if merged is None:
                out.pop(key, None)
            else:
                out[key] = merged
        else:
            out[key] = value
    return out
