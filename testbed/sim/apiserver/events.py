"""Events: one stored object served as core/v1 `Event` and as events.k8s.io/v1 `Event`.

What we checked (kube-apiserver): both APIs share one storage (`/registry/events`) holding the
internal core Event, so an event written through either reads back through the other, converted
field by field (pkg/apis/events/v1/conversion.go): note <-> message, regarding <-> involvedObject,
reportingController <-> reportingComponent, deprecatedSource <-> source, deprecatedFirstTimestamp
<-> firstTimestamp, deprecatedLastTimestamp <-> lastTimestamp, deprecatedCount <-> count; eventTime,
series, action, reason, type, related and reportingInstance keep their names. Go's encoder always
writes the struct-valued fields, so a core read carries `eventTime`, `firstTimestamp` and
`lastTimestamp` (null when unset), `source` and `involvedObject` (objects, maybe empty), and the
two non-omitempty strings `reportingComponent`/`reportingInstance`; an events.k8s.io read carries
`eventTime`, `deprecatedFirstTimestamp`/`deprecatedLastTimestamp` (null when unset), `regarding`
and `deprecatedSource`.

Field selectors on events.k8s.io/v1 take its own names (regarding.*, reportingController) and map
them onto the core labels; the core spellings are refused there, as the real server does.

Validation (pkg/apis/core/validation/events.go, ValidateEventCreate/Update): every write passes the
legacy rules (an event without eventTime must be in its object's namespace; one with eventTime
needs reportingController, reportingInstance <= 128, action <= 128, reason <= 128, and a note of at
most 1024 bytes); a create through events.k8s.io/v1 also needs eventTime, type Normal or Warning,
a series of count >= 2 with lastObservedTime, and none of the deprecated fields; an update there
may change only the series (and metadata).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from sim.apiserver.errors import ApiError, Problem, invalid_fields
from sim.apiserver.metadata import qualified_name_problem

CORE = ("", "events")
EVENTS_V1 = ("events.k8s.io", "events")

REPORTING_INSTANCE_LIMIT = 128
ACTION_LIMIT = 128
REASON_LIMIT = 128
NOTE_LIMIT = 1024  # bytes, as Go's len() counts

# events.k8s.io/v1 name -> core/v1 (storage) name
RENAMED = {
    "note": "message",
    "regarding": "involvedObject",
    "reportingController": "reportingComponent",
    "deprecatedSource": "source",
    "deprecatedFirstTimestamp": "firstTimestamp",
    "deprecatedLastTimestamp": "lastTimestamp",
    "deprecatedCount": "count",
}
TO_V1 = {core: v1 for v1, core in RENAMED.items()}
# Written even when unset: struct-valued fields (null for an unset time) and non-omitempty strings.
CORE_ALWAYS: dict[str, Any] = {
    "eventTime": None,
    "firstTimestamp": None,
    "lastTimestamp": None,
    "involvedObject": {},
    "source": {},
    "reportingComponent": "",
    "reportingInstance": "",
}
V1_ALWAYS = (
    "eventTime",
    "deprecatedFirstTimestamp",
    "deprecatedLastTimestamp",
    "regarding",
    "deprecatedSource",
)
V1_OMIT_EMPTY = (
    "reportingController",
    "reportingInstance",
    "action",
    "reason",
    "note",
    "type",
    "deprecatedCount",
)

V1_FIELD_LABELS = {
    "regarding.kind": "involvedObject.kind",
    "regarding.namespace": "involvedObject.namespace",
    "regarding.name": "involvedObject.name",
    "regarding.uid": "involvedObject.uid",
    "regarding.apiVersion": "involvedObject.apiVersion",
    "regarding.resourceVersion": "involvedObject.resourceVersion",
    "regarding.fieldPath": "involvedObject.fieldPath",
    "reportingController": "reportingComponent",
    "reason": "reason",
    "source": "source",
    "type": "type",
}

_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$")
_TIME_FIELDS = ("eventTime", "firstTimestamp", "lastTimestamp")
_STRING_FIELDS = ("action", "reason", "message", "type", "reportingComponent", "reportingInstance")


def to_core(obj: dict[str, Any]) -> dict[str, Any]:
    """An events.k8s.io/v1 Event as the stored core/v1 Event."""
    out = {RENAMED.get(k, k): v for k, v in obj.items()}
    out["apiVersion"], out["kind"] = "v1", "Event"
    return complete(out)


def from_core(obj: dict[str, Any]) -> dict[str, Any]:
    """The stored core/v1 Event as events.k8s.io/v1 serves it."""
    out = {TO_V1.get(k, k): v for k, v in obj.items()}
    out["apiVersion"], out["kind"] = "events.k8s.io/v1", "Event"
    for key in V1_ALWAYS:
        out.setdefault(key, {} if key in ("regarding", "deprecatedSource") else None)
    for key in V1_OMIT_EMPTY:
        if key in out and not out[key]:
            del out[key]
    return out


def complete(obj: dict[str, Any]) -> dict[str, Any]:
    """The core Event as stored: the fields Go always writes (see the module docstring), and its
    times as the decoder re-writes them, in UTC (eventTime and series.lastObservedTime are
    MicroTime, six fractional digits; firstTimestamp and lastTimestamp whole seconds)."""
    for key, empty in CORE_ALWAYS.items():
        if obj.get(key) is None:
            obj[key] = {} if isinstance(empty, dict) else empty
    for key in _TIME_FIELDS:
        obj[key] = _canonical_time(obj[key], micro=key == "eventTime")
    series = obj.get("series")
    if isinstance(series, dict) and "lastObservedTime" in series:
        obj["series"] = {
            **series,
            "lastObservedTime": _canonical_time(series["lastObservedTime"], micro=True),
        }
    return obj


def _canonical_time(value: Any, micro: bool) -> Any:
    """An RFC 3339 time as metav1.Time (micro=False) or MicroTime writes it; anything else as it is
    (decode refuses it)."""
    when = _parse_time(value)
    if when is None:
        return value
    if micro:
        return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_time(value: Any) -> datetime | None:
    """An RFC 3339 time in UTC, or None when `value` is not one (a 2026-13-45 included)."""
    if not (isinstance(value, str) and _TIME.match(value)):
        return None
    whole, _, rest = value.partition(".")
    if rest:  # at most microseconds: Python's parser takes six fractional digits
        digits = len(rest) - len(rest.lstrip("0123456789"))
        value = f"{whole}.{rest[: min(digits, 6)]}{rest[digits:]}"
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return None


def field_label(label: str) -> str | None:
    """The core label an events.k8s.io/v1 field selector label stands for (None: not supported)."""
    if label in ("metadata.name", "metadata.namespace"):
        return label
    return V1_FIELD_LABELS.get(label)


def decode(group: str, obj: dict[str, Any]) -> None:
    """400 for what the JSON decoder cannot put into an Event; `obj` is the stored (core) form, the
    message names the field as the request's API (`group`) spells it."""
    version = "events.k8s.io/v1" if group == EVENTS_V1[0] else "v1"

    def _undecodable(field: str, value: Any) -> ApiError:
        top, dot, rest = field.partition(".")
        named = (TO_V1.get(top, top) if group == EVENTS_V1[0] else top) + dot + rest
        return _refusal(version, named, value)

    for key in _TIME_FIELDS:
        value = obj.get(key)
        if value is not None and _parse_time(value) is None:
            raise _undecodable(key, value)
    for key in _STRING_FIELDS:
        if obj.get(key) is not None and not isinstance(obj[key], str):
            raise _undecodable(key, obj[key])
    for key in ("involvedObject", "source", "related", "series"):
        if obj.get(key) is not None and not isinstance(obj[key], dict):
            raise _undecodable(key, obj[key])
    series = obj.get("series") or {}
    if "count" in series and type(series["count"]) is not int:
        raise _undecodable("series.count", series["count"])
    observed = series.get("lastObservedTime")
    if observed is not None and _parse_time(observed) is None:
        raise _undecodable("series.lastObservedTime", observed)
    if obj.get("count") is not None and type(obj["count"]) is not int:
        raise _undecodable("count", obj["count"])


def _refusal(version: str, field: str, value: Any) -> ApiError:
    shown = json.dumps(value)[:64] if not isinstance(value, str) else json.dumps(value[:64])
    expected = "an RFC 3339 time" if field.endswith(("Time", "Timestamp")) else "a value of its type"
    return ApiError(
        400,
        f'Event in version "{version}" cannot be handled as a Event: {field}: cannot decode {shown}: '
        f"expected {expected}",
        "BadRequest",
    )


def validate_create(group: str, event: dict[str, Any]) -> None:
    """ValidateEventCreate on the stored (core) form; `group` is the API the request came through."""
    problems = _legacy(event)
    if group == EVENTS_V1[0]:
        problems += _series(event)
        if not event.get("eventTime"):
            problems.append(("eventTime", "FieldValueRequired", "Required value"))
        if event.get("type") not in ("Normal", "Warning"):
            problems.append(_invalid("type", f"has invalid value: {event.get('type') or ''}"))
        for key in ("firstTimestamp", "lastTimestamp"):
            if event.get(key):
                problems.append(_invalid(key, "needs to be unset"))
        if event.get("count"):
            problems.append(_invalid("count", "needs to be unset"))
        source = event.get("source") or {}
        if source.get("component") or source.get("host"):
            problems.append(_invalid("source", "needs to be unset"))
    _raise(group, event, problems)


def validate_update(group: str, new: dict[str, Any], old: dict[str, Any]) -> None:
    """ValidateEventUpdate on the stored (core) forms."""
    problems = _legacy(new)
    if group == EVENTS_V1[0]:
        if new.get("series") != old.get("series"):
            problems += _series(new)
        for key in (
            "involvedObject",
            "reason",
            "message",
            "source",
            "firstTimestamp",
            "lastTimestamp",
            "count",
            "type",
            "eventTime",
            "action",
            "related",
            "reportingComponent",
            "reportingInstance",
        ):
            if new.get(key) != old.get(key):
                field = "reportingController" if key == "reportingComponent" else key
                problems.append((field, "FieldValueInvalid", _immutable(new.get(key))))
    _raise(group, new, problems)


def _legacy(event: dict[str, Any]) -> list[Problem]:
    problems: list[Problem] = []
    ns = event["metadata"].get("namespace", "")
    regarding = event.get("involvedObject") or {}
    object_ns = str(regarding.get("namespace") or "")
    if not event.get("eventTime"):
        if (object_ns and ns != object_ns) or (not object_ns and ns not in ("", "default")):
            problems.append(_invalid("involvedObject.namespace", "does not match event.namespace", object_ns))
        return problems
    if not object_ns and ns not in ("default", "kube-system"):
        problems.append(_invalid("involvedObject.namespace", "does not match event.namespace", object_ns))
    controller = str(event.get("reportingComponent") or "")
    if not controller:
        problems.append(("reportingController", "FieldValueRequired", "Required value"))
    else:
        why = qualified_name_problem(controller)
        if why:
            problems.append(_invalid("reportingController", why, controller))
    for field, key, limit in (
        ("reportingInstance", "reportingInstance", REPORTING_INSTANCE_LIMIT),
        ("action", "action", ACTION_LIMIT),
        ("reason", "reason", REASON_LIMIT),
    ):
        value = str(event.get(key) or "")
        if not value:
            problems.append((field, "FieldValueRequired", "Required value"))
        elif len(value.encode()) > limit:
            problems.append(_invalid(field, f"can have at most {limit} characters"))
    if len(str(event.get("message") or "").encode()) > NOTE_LIMIT:
        problems.append(_invalid("message", f"can have at most {NOTE_LIMIT} characters"))
    return problems


def _series(event: dict[str, Any]) -> list[Problem]:
    series = event.get("series")
    if series is None:
        return []
    problems: list[Problem] = []
    if (series.get("count") or 0) < 2:
        problems.append(_invalid("series.count", "should be at least 2"))
    if not series.get("lastObservedTime"):
        problems.append(("series.lastObservedTime", "FieldValueRequired", "Required value"))
    return problems


def _invalid(field: str, why: str, value: str = "") -> Problem:
    return (field, "FieldValueInvalid", f"Invalid value: {json.dumps(value[:256])}: {why}")


def _immutable(value: Any) -> str:
    shown = json.dumps(value)[:256]
    return f"Invalid value: {shown}: field is immutable"


def _raise(group: str, event: dict[str, Any], problems: list[Problem]) -> None:
    if problems:
        raise invalid_fields("Event", group, event["metadata"].get("name", ""), problems)
