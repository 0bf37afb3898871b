"""Sets of field paths over JSON objects, as structured-merge-diff computes them for server-side
apply: the fields a value sets, what changed between two versions, an applied configuration
merged over a live object, the removal of fields nobody applies any more, and the `FieldsV1`
encoding of a set (`f:<field>`, `k:<keys as JSON>`, `v:<value as JSON>`, `.` for the node itself).

A path is a tuple of path elements; an element is (tag, text): ("f", field name), ("k", the list
item's keys as canonical JSON), ("v", a set item as JSON) or ("i", index). The rules follow
sigs.k8s.io/structured-merge-diff/typed (tofieldset.go, compare.go, merge.go, remove.go), read at
commit 15d0754; the shapes come from fieldtypes.py.
"""

from __future__ import annotations

import json
from typing import Any

from sim.apiserver.fieldtypes import KEY_DEFAULTS, Shape, child_type, shape
from sim.apiserver.trees import clone

PathElement = tuple[str, str]
Path = tuple[PathElement, ...]
FieldSet = set[Path]
MISSING: Any = object()  # a field that is not there (a JSON null is a value)
_TAG_ORDER = {"f": 0, "k": 1, "v": 2, "i": 3}


class FieldSetError(ValueError):
    """A value that cannot be given a field set: a list item without its keys, duplicates, and in an
    applied configuration a field its type does not declare."""


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def render(path: Path) -> str:
    """A path as structured-merge-diff prints it: `.spec.containers[name="a"].image`."""
    out = []
    for tag, text in path:
        if tag == "f":
            out.append("." + text)
        elif tag == "k":
            keys = json.loads(text)
            out.append("[" + ",".join(f"{k}={_json(v)}" for k, v in keys.items()) + "]")
        elif tag == "v":
            out.append(f"[={text}]")
        else:
            out.append(f"[{text}]")
    return "".join(out)


def _item_element(sh: Shape, item: Any, where: Path, index: int) -> PathElement:
    """The path element of one item of a list merged by keys or values."""
    if sh.mode == "set":
        if isinstance(item, (dict, list)):
            raise FieldSetError(f"{render(where)}: element {index}: a set holds scalars only")
        return ("v", _json(item))
    if not isinstance(item, dict):
        raise FieldSetError(f"{render(where)}: element {index}: expected an object with keys {list(sh.keys)}")
    keys: dict[str, Any] = {}
    for key in sh.keys:
        value = item.get(key, MISSING)
        if value is MISSING or value is None:
            value = KEY_DEFAULTS.get((sh.item, key), MISSING)
        if value is MISSING:
            raise FieldSetError(
                f"{render(where)}: element {index}: associative list with keys has an element that "
                f'omits key field "{key}" (and doesn\'t have default value)'
            )
        if isinstance(value, (dict, list)):
            raise FieldSetError(f'{render(where)}: element {index}: key field "{key}" must be a scalar')
        keys[key] = value
    return ("k", _json(keys))


def _index(sh: Shape, items: list[Any], where: Path, strict: bool) -> list[tuple[PathElement | None, Any]]:
    """(element, item) per list item; an item without a usable element is (None, item) unless
    `strict` (an applied configuration), where it and duplicates are errors."""
    out: list[tuple[PathElement | None, Any]] = []
    seen: set[PathElement] = set()
    for i, item in enumerate(items):
        try:
            pe: PathElement | None = _item_element(sh, item, where, i)
        except FieldSetError:
            if strict:
                raise
            pe = None
        if pe is not None and pe in seen:
            if strict:
                raise FieldSetError(f"{render(where)}: duplicate entries for key {render((pe,))}")
            pe = None
        if pe is not None:
            seen.add(pe)
        out.append((pe, item))
    return out


# ---- the fields a value sets ---------------------------------------------------------------------


def field_set(value: Any, type_str: str, strict: bool = False) -> FieldSet:
    """Every path `value` sets (structured-merge-diff's ToFieldSet)."""
    out: FieldSet = set()
    _fields(value, type_str, (), out, "", "", strict)
    return out


def _fields(value: Any, t: str, path: Path, out: FieldSet, parent: str, field: str, strict: bool) -> None:
    sh = shape(t, value, parent, field)
    if sh.kind == "scalar" or sh.atomic:
        out.add(path)
        return
    if sh.kind == "list":
        for pe, item in _index(sh, value, path, strict):
            if pe is None:
                continue
            here = (*path, pe)
            _fields(item, sh.item, here, out, "", "", strict)
            out.add(here)
        return
    for key, child in value.items():
        ct, declared = child_type(sh, key)
        here = (*path, ("f", key))
        if strict and sh.kind == "struct" and not declared:
            raise FieldSetError(f"{render(here)}: field not declared in schema")
        _fields(child, ct, here, out, sh.model, key, strict)
        if child is None or (isinstance(child, dict) and not child) or not declared:
            out.add(here)


# ---- what changed ----------------------------------------------------------------------------------


class Comparison:
    def __init__(self) -> None:
        self.added: FieldSet = set()
        self.modified: FieldSet = set()
        self.removed: FieldSet = set()


def compare(old: Any, new: Any, type_str: str) -> Comparison:
    """The paths added, modified and removed from `old` to `new` (structured-merge-diff's Compare)."""
    out = Comparison()
    _compare(old, new, type_str, (), out, "", "")
    return out


def _empty(v: Any) -> bool:
    return v is MISSING or v is None or v == {} or v == []


def _keyed(sh: Shape, items: Any, path: Path) -> dict[PathElement, Any]:
    """A list's items by path element (those without one are left out, as in a live object)."""
    return {
        pe: item for pe, item in _index(sh, [] if items is MISSING else items, path, False) if pe is not None
    }


def _unchanged(old: Any, new: Any) -> bool:
    """True when `old` and `new` are the same JSON value, so nothing under them changed: a C-level
    equality first, then (for maps and lists, where Python's `1 == 1.0 == True` would hide a change
    of a set item or a list key) the same canonical JSON."""
    if old is new:
        return True
    if old != new:
        return False
    return not isinstance(old, (dict, list)) or _json(old) == _json(new)


def _added(new: Any, t: str, path: Path, out: FieldSet, parent: str, field: str) -> None:
    """`_compare(MISSING, new, ...)`: every path of a value that was not there (a create), walked
    without the comparison's branches."""
    sh = shape(t, new, parent, field)
    if sh.kind == "list" and not sh.atomic and new:
        for pe, item in _index(sh, new, path, False):
            if pe is not None:
                _added(item, sh.item, (*path, pe), out, "", "")
    elif sh.kind not in ("scalar", "list") and not sh.atomic and new:
        for key, child in new.items():
            ct, _ = child_type(sh, key)
            _added(child, ct, (*path, ("f", key)), out, sh.model, key)
    out.add(path)


def _compare(old: Any, new: Any, t: str, path: Path, out: Comparison, parent: str, field: str) -> None:
    if old is MISSING and new is not MISSING:
        _added(new, t, path, out.added, parent, field)
        return
    if old is not MISSING and new is not MISSING and _unchanged(old, new):
        return  # as the walk below would find: nothing added, modified or removed
    sh = shape(t, new if new is not MISSING else old, parent, field)
    same_kind = old is MISSING or new is MISSING or type(old) is type(new)
    if sh.kind == "scalar" or sh.atomic or not same_kind or (_empty(old) and _empty(new)):
        if old is MISSING:
            out.added.add(path)
        elif new is MISSING:
            out.removed.add(path)
        elif old != new:
            out.modified.add(path)
        return
    if sh.kind == "list":
        left = _keyed(sh, old, path)
        right = _keyed(sh, new, path)
        for pe in [*left, *(p for p in right if p not in left)]:
            _compare(left.get(pe, MISSING), right.get(pe, MISSING), sh.item, (*path, pe), out, "", "")
    else:
        lm = {} if old is MISSING else old
        rm = {} if new is MISSING else new
        for key in [*lm, *(k for k in rm if k not in lm)]:
            before, after = lm.get(key, MISSING), rm.get(key, MISSING)
            if before is after:
                continue  # one shared value (a write keeps what it does not change): nothing changed
            ct, _ = child_type(sh, key)
            _compare(before, after, ct, (*path, ("f", key)), out, sh.model, key)
    if old is MISSING:
        out.added.add(path)
    elif new is MISSING:
        out.removed.add(path)


# ---- merging an applied configuration --------------------------------------------------------------


def merge(live: Any, config: Any, type_str: str) -> Any:
    """`config` merged over `live`: maps key by key, lists by their keys or values, atomic values
    and scalars replaced. Neither input is changed."""
    return _merge(live, config, type_str, (), "", "")


def _merge(old: Any, new: Any, t: str, path: Path, parent: str, field: str) -> Any:
    if old is MISSING or old is None or type(old) is not type(new):
        return clone(new)
    sh = shape(t, new, parent, field)
    if sh.kind == "scalar" or sh.atomic:
        return clone(new)
    if sh.kind == "list":
        return _merge_items(sh, _index(sh, old, path, False), _index(sh, new, path, True), path)
    merged = dict(old)
    for key, value in new.items():
        if value is None:
            merged.pop(key, None)
            continue
        ct, _ = child_type(sh, key)
        merged[key] = _merge(old.get(key, MISSING), value, ct, (*path, ("f", key)), sh.model, key)
    return merged


def _merge_items(
    sh: Shape,
    left: list[tuple[PathElement | None, Any]],
    right: list[tuple[PathElement | None, Any]],
    path: Path,
) -> list[Any]:
    """Two keyed lists merged in structured-merge-diff's order: the live items in their order, the
    applied ones where the applied order puts them, items both have taken in the applied order."""
    by_left = {pe: item for pe, item in left if pe is not None}
    by_right = {pe: item for pe, item in right if pe is not None}
    shared = [pe for pe, _ in right if pe in by_left]
    nxt = shared.pop(0) if shared else None
    done: set[PathElement] = set()
    out: list[Any] = []

    def both(pe: PathElement) -> Any:
        if pe in by_left:
            return _merge(by_left[pe], by_right[pe], sh.item, (*path, pe), "", "")
        return clone(by_right[pe])

    li = ri = 0
    while li < len(left) or ri < len(right):
        if li < len(left) and ri < len(right):
            pe = left[li][0]
            if pe is not None and pe == right[ri][0]:
                done.add(pe)
                out.append(both(pe))
                li, ri = li + 1, ri + 1
                nxt = shared.pop(0) if shared else None
                continue
            if pe in by_right and nxt is not None and nxt != pe:
                li += 1  # a shared item, taken when the applied order reaches it
                continue
        if li < len(left):
            pe, item = left[li]
            if pe is None or pe not in by_right:
                out.append(item)
                li += 1
                continue
            if pe in done:
                li += 1
        if ri < len(right):
            pe = right[ri][0]
            assert pe is not None  # an applied list's items all have elements (strict)
            done.add(pe)
            out.append(both(pe))
            ri += 1
            if nxt == pe:
                nxt = shared.pop(0) if shared else None
    return out


# ---- removing what nobody applies any more ---------------------------------------------------------


def prefixes(paths: FieldSet) -> FieldSet:
    """Every path in `paths` and every path leading to one."""
    out: FieldSet = set()
    for p in paths:
        for i in range(1, len(p) + 1):
            out.add(p[:i])
    return out


def remove(value: Any, type_str: str, drop: FieldSet, keep: FieldSet) -> Any:
    """`value` without the paths in `drop` that are not in `keep` (keep every path leading to a
    field someone still owns: `prefixes`). A map or list emptied by a removal goes too, as a typed
    object's empty omitempty field does."""
    if not drop:
        return value
    out = _remove(value, type_str, (), drop, keep, "", "")
    return {} if out is MISSING else out


def _remove(v: Any, t: str, path: Path, drop: FieldSet, keep: FieldSet, parent: str, field: str) -> Any:
    sh = shape(t, v, parent, field)
    if sh.kind == "scalar" or sh.atomic:
        return v
    removed = False
    if sh.kind == "list":
        items = []
        for pe, item in _index(sh, v, path, False):
            here = (*path, pe) if pe is not None else None
            if here is not None and here in drop and here not in keep:
                removed = True
                continue
            kept = _remove(item, sh.item, here, drop, keep, "", "") if here is not None else item
            if kept is MISSING:
                removed = True
                continue
            items.append(kept)
        return MISSING if removed and not items else items
    out = {}
    for key, child in v.items():
        here = (*path, ("f", key))
        if here in drop and here not in keep:
            removed = True
            continue
        ct, _ = child_type(sh, key)
        kept = _remove(child, ct, here, drop, keep, sh.model, key)
        if kept is MISSING:
            removed = True
            continue
        out[key] = kept
    return MISSING if removed and not out else out


# ---- FieldsV1 ----------------------------------------------------------------------------------------


def _order(key: str) -> tuple[int, str]:
    return (-1, "") if key == "." else (_TAG_ORDER.get(key[0], 9), key[2:])


def encode(paths: FieldSet) -> dict[str, Any]:
    """The `fieldsV1` tree of a set: a leaf member is `{}`, a member with children carries `.`."""
    tree: dict[str, Any] = {}
    members: set[int] = set()
    for path in paths:
        node = tree
        for tag, text in path:
            node = node.setdefault(f"{tag}:{text}", {})
        members.add(id(node))

    def emit(node: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {".": {}} if node and id(node) in members else {}
        for key in sorted(node, key=_order):
            out[key] = emit(node[key])
        return out

    return emit(tree)


def decode(tree: Any, max_paths: int = 100_000) -> FieldSet:
    """The set a `fieldsV1` tree names; ValueError when it is not one."""
    out: FieldSet = set()
    stack: list[tuple[Any, Path]] = [(tree, ())]
    while stack:
        node, path = stack.pop()
        if not isinstance(node, dict):
            raise ValueError(f"fieldsV1 at {render(path) or '.'} is not an object")
        if not node and path:
            out.add(path)
        for key, child in node.items():
            if key == ".":
                if path:
                    out.add(path)
                continue
            if len(key) < 2 or key[1] != ":" or key[0] not in _TAG_ORDER:
                raise ValueError(f"fieldsV1 key {key[:64]!r} is not f:, k:, v:, i: or .")
            tag, text = key[0], key[2:]
            if tag in ("k", "v"):
                try:
                    parsed = json.loads(text)
                except ValueError as exc:
                    raise ValueError(f"fieldsV1 key {key[:64]!r}: {exc}") from exc
                if tag == "k" and not isinstance(parsed, dict):
                    raise ValueError(f"fieldsV1 key {key[:64]!r} does not name keys")
                text = _json(parsed)
            stack.append((child, (*path, (tag, text))))
        if len(out) > max_paths:
            raise ValueError(f"fieldsV1 names more than {max_paths} fields")
    return out
