"""Copies of decoded JSON documents (dicts, lists and scalars only).

Stored objects are never mutated, so a write copies what it changes. A JSON tree holds no cycles,
no shared mutable parts that must stay shared, and no objects other than dict, list, str, int,
float, bool and None, so a plain recursive copy gives what copy.deepcopy gives at about a quarter
of its cost (deepcopy keeps a memo of every node to handle the cases a JSON tree cannot have).
"""

from __future__ import annotations

from typing import Any


def clone(value: Any) -> Any:
    """A copy of a JSON tree that shares no dict or list with it."""
    kind = type(value)
    if kind is dict:
        return {k: clone(v) for k, v in value.items()}
    if kind is list:
        return [clone(v) for v in value]
    return value
