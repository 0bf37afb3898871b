"""A watch cache's objects of one kind: by (namespace, name), fed by a reflector's list and events,
with a counter of changes so what is derived from it is recomputed only after one. Pure: the
caller holds whatever lock its threads need."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class Mirror:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.version = 0

    def replace(self, items: list[dict[str, Any]]) -> None:
        """A fresh list: everything it holds now."""
        self.objects = {object_key(o): o for o in items if isinstance(o, dict)}
        self.version += 1

    def event(self, kind: str, obj: dict[str, Any]) -> None:
        """One watch event (ADDED, MODIFIED, DELETED); what is not an object changes nothing."""
        if not isinstance(obj, dict):
            return
        if kind == "DELETED":
            self.objects.pop(object_key(obj), None)
        else:
            self.objects[object_key(obj)] = obj
        self.version += 1

    def items(self) -> list[dict[str, Any]]:
        return list(self.objects.values())


def object_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, name) of an object, each "" when absent or unreadable."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
