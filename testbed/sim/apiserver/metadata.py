"""Object metadata rules every write passes, as kube-apiserver applies them: the decoder's shape of
`metadata.annotations` (a map of strings, else 400) and the validation of its keys and size (422).

What we checked: apimachinery's ObjectMeta validation (ValidateAnnotations) lower-cases each key
and requires a qualified name (an optional DNS-subdomain prefix and '/', then a name of at most 63
characters of alphanumerics, '-', '_' and '.', starting and ending alphanumeric), and caps the sum
of every key's and value's length at 256 KiB. The JSON decoder refuses an annotation map or value of
any other type before validation runs, with a 400 naming the Go field it could not fill.
"""

from __future__ import annotations

import json
import re
from typing import Any

from sim.apiserver.errors import ApiError, invalid

TOTAL_ANNOTATION_BYTES = 256 * 1024
_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME_RULE = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation "
    "is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
_PREFIX_RULE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


def decode_annotations(kind: str, version: str, meta: Any) -> None:
    """400 when `metadata` or its annotations cannot be decoded into ObjectMeta's types."""
    if meta is None:
        return
    if not isinstance(meta, dict):
        raise _undecodable(kind, version, "metadata", "ObjectMeta", meta)
    annotations = meta.get("annotations")
    if annotations is None:
        return
    if not isinstance(annotations, dict):
        raise _undecodable(kind, version, "metadata.annotations", "map[string]string", annotations)
    for value in annotations.values():
        if value is not None and not isinstance(value, str):
            raise _undecodable(kind, version, "metadata.annotations", "string", value)


def _undecodable(kind: str, version: str, field: str, go_type: str, value: Any) -> ApiError:
    found = {dict: "object", list: "array", bool: "bool", int: "number", float: "number"}.get(
        type(value), "string"
    )
    return ApiError(
        400,
        f'{kind} in version "{version}" cannot be handled as a {kind}: json: cannot unmarshal '
        f"{found} into Go struct field {field} of type {go_type}",
        "BadRequest",
    )


def qualified_name_problem(key: str) -> str | None:
    """Why `key` is not a qualified name (apimachinery's IsQualifiedName), or None."""
    parts = key.split("/")
    if len(parts) == 1:
        prefix, name = None, parts[0]
    elif len(parts) == 2:
        prefix, name = parts
    else:
        return (
            "a qualified name " + _NAME_RULE + " with an optional DNS subdomain prefix and '/' "
            "(e.g. 'example.com/MyName')"
        )
    if prefix is not None:
        problem = _part_problem("prefix", prefix, 253, _DNS_SUBDOMAIN, _PREFIX_RULE)
        if problem:
            return problem
    return _part_problem("name", name, 63, _NAME_PART, _NAME_RULE)


def _part_problem(part: str, value: str, limit: int, pattern: re.Pattern[str], rule: str) -> str | None:
    """One part of a qualified name: non-empty, at most `limit` characters, matching `pattern`."""
    if not value:
        return f"{part} part must be non-empty"
    if len(value) > limit:
        return f"{part} part must be no more than {limit} characters"
    if not pattern.match(value):
        return f"{part} part {rule}"
    return None


def check_annotations(kind: str, group: str, name: str, meta: dict[str, Any]) -> None:
    """422 for an annotation key that is not a qualified name, or for more than 256 KiB of them."""
    annotations = meta.get("annotations") or {}
    total = 0
    for key in sorted(annotations):
        problem = qualified_name_problem(key.lower())
        if problem:
            raise invalid(
                kind,
                group,
                name,
                "metadata.annotations",
                f"Invalid value: {json.dumps(key[:256])}: {problem}",
            )
        total += len(key.encode()) + len((annotations[key] or "").encode())
    if total > TOTAL_ANNOTATION_BYTES:
        raise invalid(
            kind,
            group,
            name,
            "metadata.annotations",
            f"Too long: may not be more than {TOTAL_ANNOTATION_BYTES} bytes",
        )
