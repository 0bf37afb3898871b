"""The stored form of an object and the form each API serves it in.

Most resources are stored as they are served. Events are the exception (sim.apiserver.events): the
core/v1 and events.k8s.io/v1 APIs share one storage, so a write through events.k8s.io/v1 is stored
as the core Event and every read converts the stored object to the API it comes through.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sim.apiserver import events
from sim.apiserver.resources import ResourceType

Convert = Callable[[dict[str, Any]], dict[str, Any]]

# resource key -> (served -> stored, stored -> served)
_CONVERTERS: dict[tuple[str, str], tuple[Convert, Convert]] = {
    events.CORE: (events.complete, lambda obj: obj),
    events.EVENTS_V1: (events.to_core, events.from_core),
}


def to_storage(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` (as `rt`'s API serves it, a copy the caller owns) in its stored form."""
    pair = _CONVERTERS.get(rt.key)
    return pair[0](obj) if pair else obj


def server(rt: ResourceType) -> Convert | None:
    """How a stored object becomes what `rt`'s API serves (None: as stored)."""
    pair = _CONVERTERS.get(rt.key)
    return pair[1] if pair and rt.stored_as else None


def served(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    convert = server(rt)
    return convert(obj) if convert else obj


def is_event(rt: ResourceType) -> bool:
    return rt.storage_key == events.CORE
