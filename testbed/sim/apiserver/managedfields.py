"""`metadata.managedFields`: who owns which fields of an object, kept on every write as
kube-apiserver's field manager keeps it (k8s.io/apimachinery/pkg/util/managedfields/internal, with
structured-merge-diff's merge/update.go for the rules).

An entry is one manager's claim: `manager`, `operation` (Apply for server-side apply, Update for
create, update and the other patches), `apiVersion`, `time`, `fieldsType: FieldsV1`, `fieldsV1`
and, for a subresource, `subresource`. A write by a manager that names none is recorded under the
start of its User-Agent (`kubectl/v1.35.0 (linux/amd64) ...` -> `kubectl`). Rules:
- Update: the fields the write adds or changes join its manager's Update entry; every other
  manager loses them and any removed field.
- Apply: the manager's Apply entry becomes exactly the applied fields; fields it applied before and
  no longer sends are removed from the object unless another manager owns them; a changed field
  another manager owns is a 409 conflict unless forced, which moves ownership to the applier.
- The identity fields (apiVersion, kind, metadata name/namespace/uid/...) are nobody's; status is
  not owned through the main endpoint of a kind with a status subresource, and only status is
  owned through that subresource. A manager left with no fields is dropped; past 10 Update
  entries the oldest merge into one `ancient-changes` entry. Entries are sorted Apply before
  Update, then by time, then manager name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from sim.apiserver import fieldsets, fieldtypes, objects
from sim.apiserver.errors import ApiError
from sim.apiserver.fieldsets import FieldSet, Path
from sim.apiserver.resources import ResourceType

MAX_MANAGER = 128  # validation.FieldManagerMaxLength
MAX_UPDATERS = 10  # Update entries kept; older ones are merged into ANCIENT
ANCIENT = "ancient-changes"
# the identity fields: top-level ones, and those of metadata
_IDENTITY_TOP = frozenset({("f", "apiVersion"), ("f", "kind")})
_IDENTITY_META = frozenset(
    ("f", name)
    for name in (
        "name",
        "namespace",
        "creationTimestamp",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "managedFields",
    )
)
_STATUS = ("f", "status")
_METADATA = (("f", "metadata"),)  # the metadata node itself is nobody's, its fields are
Key = tuple[str, str, str]  # (manager, operation, subresource)


@dataclass
class Entry:
    manager: str
    operation: str
    api_version: str
    time: str = ""
    subresource: str = ""
    fields: FieldSet = field(default_factory=set)
    # the stored fieldsV1 this entry was read from and the set it named: written back as it was
    # when the set did not change (a stored tree is never changed in place)
    stored: tuple[dict[str, Any], frozenset[Path]] | None = None

    @property
    def key(self) -> Key:
        return (self.manager, self.operation, self.subresource)

    def describe(self) -> str:
        """The manager as a conflict message names it (its time left out, as the real identifier)."""
        text = f'"{self.manager}"'
        if self.subresource:
            text += f' with subresource "{self.subresource}"'
        if self.operation == "Update":
            text += f" using {self.api_version}"
        return text

    def encoded(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
        }
        if self.time:
            out["time"] = self.time
        out["fieldsType"] = "FieldsV1"
        if self.stored is not None and self.stored[1] == self.fields:
            out["fieldsV1"] = self.stored[0]
        else:
            out["fieldsV1"] = fieldsets.encode(self.fields)
        if self.subresource:
            out["subresource"] = self.subresource
        return out


@lru_cache(maxsize=256)  # clients send the same few User-Agents on every request
def manager_from_user_agent(user_agent: str) -> str:
    """What the real handlers call a write whose request names no fieldManager: the User-Agent up
    to its first `/`, printable characters only, at most 128 bytes."""
    out = ""
    for ch in user_agent.split("/")[0]:
        if not ch.isprintable():  # Go's unicode.IsPrint: ASCII space is the only printable space
            continue
        if len((out + ch).encode()) > MAX_MANAGER:
            break
        out += ch
    return out


def check_manager(options_kind: str, manager: str) -> None:
    """ValidateFieldManager: at most 128 bytes, printable characters only (422 on the options)."""
    problem = ""
    if len(manager.encode()) > MAX_MANAGER:
        problem = f"Too long: may not be more than {MAX_MANAGER} bytes"
    elif not manager.isprintable():
        problem = f"Invalid value: {manager[:64]!r}: must only contain printable characters"
    if problem:
        raise ApiError(
            422,
            f'{options_kind}.meta.k8s.io "" is invalid: fieldManager: {problem}',
            "Invalid",
            {
                "group": "meta.k8s.io",
                "kind": options_kind,
                "causes": [{"reason": "FieldValueInvalid", "message": problem, "field": "fieldManager"}],
            },
        )


# ---- decoding and encoding -------------------------------------------------------------------------


def decode(entries: Any) -> dict[Key, Entry]:
    """The entries of a managedFields list; ValueError when it is not one. An entry with no manager
    or no fields is dropped (so `[{}]` clears the list, as the real server documents)."""
    if entries is None:
        return {}
    if not isinstance(entries, list):
        raise ValueError("metadata.managedFields must be a list")
    out: dict[Key, Entry] = {}
    for raw in entries[:1000]:
        if not isinstance(raw, dict):
            raise ValueError("a managedFields entry must be an object")
        if not raw.get("manager") or raw.get("fieldsV1") is None:
            continue
        if raw.get("fieldsType", "FieldsV1") != "FieldsV1":
            raise ValueError(f"fieldsType {str(raw.get('fieldsType'))[:32]!r}: only FieldsV1 is known")
        entry = Entry(
            str(raw["manager"]),
            str(raw.get("operation") or "Update"),
            str(raw.get("apiVersion") or ""),
            str(raw.get("time") or ""),
            str(raw.get("subresource") or ""),
            fieldsets.decode(raw["fieldsV1"]),
        )
        entry.stored = (raw["fieldsV1"], frozenset(entry.fields))
        if entry.operation not in ("Apply", "Update"):
            raise ValueError(f"operation {entry.operation[:32]!r}: Apply or Update")
        out[entry.key] = entry
    return out


def encode(entries: dict[Key, Entry]) -> list[dict[str, Any]]:
    kept = [e for e in entries.values() if e.fields]
    kept.sort(key=lambda e: (e.operation, e.time, e.manager, e.api_version, e.subresource))
    return [e.encoded() for e in kept]


def _stored(obj: dict[str, Any] | None) -> dict[Key, Entry]:
    if obj is None:
        return {}
    try:
        return decode((obj.get("metadata") or {}).get("managedFields"))
    except ValueError:
        return {}


def _incoming(live: dict[str, Any] | None, new: dict[str, Any]) -> dict[Key, Entry]:
    """The managers a write starts from: the ones the request sets when it sets managedFields to
    something else than the stored list (a PUT or patch may rewrite or clear them), else the
    stored ones."""
    stored = (live or {}).get("metadata", {}).get("managedFields") if live else None
    sent = (new.get("metadata") or {}).get("managedFields", fieldsets.MISSING)
    if sent is fieldsets.MISSING or sent is None or sent == stored:
        return _stored(live)
    try:
        return decode(sent)
    except ValueError:
        return _stored(live)


# ---- what a write may own ----------------------------------------------------------------------------


def _ownable(rt: ResourceType, subresource: str, paths: FieldSet) -> FieldSet:
    resets_status = "status" in rt.subresources
    out = set()
    for p in paths:
        if len(p) < 2 and p in ((), _METADATA):
            continue
        if p[0] in _IDENTITY_TOP or (p[0] == _METADATA[0] and p[1] in _IDENTITY_META):
            continue
        if subresource == "status":
            if p[:1] != (_STATUS,) or len(p) < 2:
                continue
        elif resets_status and p[:1] == (_STATUS,):
            continue
        out.add(p)
    return out


def _strip(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return {**obj, "metadata": meta}


def _with(obj: dict[str, Any], entries: dict[Key, Entry]) -> dict[str, Any]:
    out = _strip(obj)
    encoded = encode(entries)
    if encoded:
        out["metadata"]["managedFields"] = encoded
    return out


# ---- Update ------------------------------------------------------------------------------------------


def record_update(
    rt: ResourceType, live: dict[str, Any] | None, new: dict[str, Any], manager: str, subresource: str = ""
) -> dict[str, Any]:
    """`new` with the managedFields an Update by `manager` leaves (a create when `live` is None)."""
    entries = _incoming(live, new)
    t = fieldtypes.root(rt)
    diff = fieldsets.compare(_strip(live) if live is not None else fieldsets.MISSING, _strip(new), t)
    changed = _ownable(rt, subresource, diff.added | diff.modified)
    removed = _ownable(rt, subresource, diff.removed)
    for entry in entries.values():
        entry.fields -= changed
        entry.fields -= removed
    if changed:
        key = (manager, "Update", subresource)
        mine = entries.get(key) or Entry(manager, "Update", rt.group_version, subresource=subresource)
        mine.fields |= changed
        mine.api_version = rt.group_version
        mine.time = objects.now()
        entries[key] = mine
    _cap_updates(entries, rt.group_version)
    return _with(new, entries)


def _cap_updates(entries: dict[Key, Entry], api_version: str) -> None:
    """At most MAX_UPDATERS Update entries: the oldest are merged into one `ancient-changes` entry,
    as the real field manager's capManagersManager does."""
    updaters = sorted(
        (e for e in entries.values() if e.operation == "Update" and e.manager != ANCIENT),
        key=lambda e: e.time,
    )
    bucket_key = (ANCIENT, "Update", "")
    excess = len(updaters) + (bucket_key in entries) - MAX_UPDATERS
    if excess <= 0:
        return
    bucket = entries.get(bucket_key) or Entry(ANCIENT, "Update", api_version)
    for old in updaters[: excess + (bucket_key not in entries)]:
        bucket.fields |= old.fields
        bucket.time = max(bucket.time, old.time)
        del entries[old.key]
    entries[bucket_key] = bucket


# ---- Apply -------------------------------------------------------------------------------------------


def apply(
    rt: ResourceType,
    live: dict[str, Any] | None,
    config: dict[str, Any],
    manager: str,
    force: bool,
    subresource: str = "",
) -> dict[str, Any]:
    """The object after `manager` applies `config` over `live` (None: the object is new), with its
    managedFields; a 409 conflict when another manager owns a field the apply changes."""
    t = fieldtypes.root(rt)
    try:
        applied = _ownable(rt, subresource, fieldsets.field_set(config, t, strict=True))
    except fieldsets.FieldSetError as exc:
        raise _untyped(rt, config, exc) from exc
    entries = _stored(live)
    key = (manager, "Apply", subresource)
    last = entries.get(key)
    base = _strip(live) if live is not None else {}
    try:
        merged = fieldsets.merge(base, config, t)
    except fieldsets.FieldSetError as exc:
        raise _untyped(rt, config, exc) from exc
    others = {k: e for k, e in entries.items() if k != key}
    if last is not None:
        keep = fieldsets.prefixes(applied.union(*(e.fields for e in others.values())))
        merged = fieldsets.remove(merged, t, last.fields - applied, keep)
    diff = fieldsets.compare(base if live is not None else fieldsets.MISSING, merged, t)
    changed = _ownable(rt, subresource, diff.added | diff.modified)
    removed = _ownable(rt, subresource, diff.removed)
    conflicts = [(e, p) for e in others.values() for p in sorted(e.fields & changed)]
    if conflicts and not force:
        raise conflict_error(conflicts)
    for entry in others.values():
        entry.fields -= changed
        entry.fields -= removed
    mine = Entry(manager, "Apply", rt.group_version, subresource=subresource, fields=applied)
    mine.time = objects.now() if (last is None or merged != base or last.fields != applied) else last.time
    others[key] = mine
    return _with(merged, others)


def _untyped(rt: ResourceType, config: dict[str, Any], exc: Exception) -> ApiError:
    """The real field manager's error for a configuration its schema cannot type (a field the kind
    does not declare, a list item without its keys, duplicate keys). kube-apiserver answers it as
    a 500 with no reason; the simulation answers 422, the code of an invalid request, same text."""
    meta = config.get("metadata") or {}
    where = f"{meta.get('namespace', '')}/{meta.get('name', '')}; {rt.group}/{rt.version}, Kind={rt.kind}"
    return ApiError(422, f"failed to create typed patch object ({where}): {exc}", "Invalid")


def conflict_error(conflicts: list[tuple[Entry, Path]]) -> ApiError:
    """409 Conflict worded as the real field manager's NewConflictError."""
    conflicts = sorted(conflicts, key=lambda c: (c[0].describe(), c[1]))
    causes = [
        {
            "type": "FieldManagerConflict",
            "message": f"conflict with {e.describe()}",
            "field": fieldsets.render(p),
        }
        for e, p in conflicts
    ]
    if len(conflicts) == 1:
        e, p = conflicts[0]
        message = f"Apply failed with 1 conflict: conflict with {e.describe()}: {fieldsets.render(p)}"
    else:
        lines: list[str] = []
        current = ""
        for e, p in conflicts:
            if e.describe() != current:
                current = e.describe()
                lines.append(f"conflicts with {current}:")
            lines.append(f"- {fieldsets.render(p)}")
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    return ApiError(409, message, "Conflict", {"causes": causes})
