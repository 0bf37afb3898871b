"""JSON text from outside: how deep it nests, measured without recursion (so before `json.loads`
recurses into it), and a decoder that turns lone surrogate escapes into U+FFFD as kube-apiserver does.

Depth, on the UTF-8 bytes: escape pairs and every byte but brackets and quotes are dropped, then what lies
between quotes (strings), and innermost pairs are removed one level per pass (each step runs at C
speed); anything left after `limit` passes is deeper than `limit`. Text with fewer brackets than
`limit` is not scanned at all.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

_ESCAPE = re.compile(rb"\\.", re.DOTALL)  # inside a string an escape pair means nothing structural
_KEEP = b'[]{}"'
_DROP = bytes(b for b in range(256) if b not in _KEEP)  # UTF-8 never hides these bytes in a character
_OPEN_CLOSE = bytes.maketrans(b"[{]}", b"(())")


def nesting_depth_exceeds(text: str | bytes, limit: int) -> bool:
    """True if brackets (outside strings) nest deeper than `limit`.

    Unbalanced text that stays shallow is left to the decoder to refuse with its own message.
    """
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if data.count(b"[") + data.count(b"{") <= limit:  # fewer brackets than levels: cannot be deeper
        return False
    skeleton = _ESCAPE.sub(b"", data).translate(None, _DROP)  # only brackets and quotes are left
    skeleton = skeleton.replace(b'""', b"")  # most strings hold no bracket: they are gone now
    if b'"' in skeleton:  # the rest: keep what lies outside quotes
        skeleton = b"".join(skeleton.split(b'"')[::2])
    brackets = skeleton.translate(_OPEN_CLOSE)  # brackets outside strings, as ( and )
    for depth in range(limit):
        if not brackets:
            return False
        shorter = brackets.replace(b"()", b"")
        if len(shorter) == len(brackets):  # unbalanced: only unmatched brackets are left
            return depth + brackets.count(b"(") > limit
        brackets = shorter
    return bool(brackets)


# ---------------------------------------------------------------- lone surrogates

# `\ud800` alone is valid JSON but no Unicode character: Python decodes it to a lone surrogate, which
# then fails the first time the text is encoded (a reply, a log line, an Event). kube-apiserver's
# decoder (Go's encoding/json) turns each one into U+FFFD; so do these.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def replace_lone_surrogates(text: str) -> str:
    """The text with each lone surrogate code point replaced by U+FFFD (a pair decodes to one code
    point before this runs, so every surrogate left is a lone one)."""
    return _LONE_SURROGATE.sub(REPLACEMENT, text)


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return replace_lone_surrogates(value)
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, dict):
        return {replace_lone_surrogates(k): _clean(v) for k, v in value.items()}
    return value


def may_hold_surrogates(text: str | bytes) -> bool:
    """True if the JSON text has a surrogate escape (`\\ud800`-`\\udfff`) or a surrogate itself."""
    if isinstance(text, bytes):
        return _SURROGATE_ESCAPE_BYTES.search(text) is not None
    return _SURROGATE_ESCAPE.search(text) is not None or _LONE_SURROGATE.search(text) is not None


def loads(text: str | bytes) -> Any:
    """`json.loads`, with every lone surrogate (from an escape or in the text) decoded as U+FFFD.

    The walk over the decoded value runs only when the text holds a surrogate escape; callers bound
    the nesting depth first (`nesting_depth_exceeds`), which bounds the walk's recursion too.
    """
    value = json.loads(text)
    return _clean(value) if may_hold_surrogates(text) else value


M = TypeVar("M", bound=BaseModel)


def decode_list(
    text: str, key: str, model: type[M], error: type[Exception], max_text: int, max_entries: int
) -> list[M]:
    """A node annotation holding a JSON array of `model` objects (`key` names it in every error):
    bounded in length and entries, every entry validated; `error` names the first bad field."""
    if len(text) > max_text:
        raise error(f"{key}: longer than {max_text} characters")
    try:
        raw = loads(text)
    except (json.JSONDecodeError, RecursionError) as problem:
        raise error(f"{key}: not JSON ({problem})") from None
    if not isinstance(raw, list) or len(raw) > max_entries:
        raise error(f"{key}: must be a JSON array of at most {max_entries} instances")
    out = []
    for i, item in enumerate(raw):
        try:
            out.append(model.model_validate(item))
        except ValidationError as problem:
            first = problem.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise error(f"{key}[{i}]{'.' + where if where else ''}: {first['msg']}") from None
    return out


def at(obj: object, *path: str) -> Any:
    """The value at `path` in nested JSON objects, or None where any step is not an object (hostile
    or partial objects read without a KeyError or TypeError)."""
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj
