"""Codec of `dynmig.io/node-idle-instances`: MIG instances the device plugin keeps after their pod
ended, for a later pod whose reservation names exactly their profile and placement (no create in
its Allocate). Published beside `dynmig.io/node-leftover-instances` (mig/leftovers.py).

An idle instance is free for the scheduler, for every profile: a reservation that overlaps it
without matching it makes the plugin destroy it first (it is the plugin's own, journaled, and runs
no process, so that destroy is no guess), so packing is not worse for it. The annotation says what
the plugin keeps, for `dynmig status`, the page and a future placement preference; it never closes
or occupies anything. So a value that cannot be read is reported and changes nothing.

Format (compact JSON, sorted):
`[{"gpuUUID":"GPU-…","profile":"1g.5gb","placement":{"start":0,"size":1},"idleSince":1767225600}]`
with `idleSince` in whole Unix seconds. No namespace on the wire: the same-namespace rule is the
plugin's, from its own journal. Decoding is strict and bounded; any invalid entry rejects the whole
annotation with an error naming the entry and field.
"""

from __future__ import annotations

import json
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from mig import jsontext
from mig.types import Placement

IDLE = "dynmig.io/node-idle-instances"
MAX_TEXT = 64 * 1024
MAX_ENTRIES = 512  # a node holds a few dozen instances at most
MAX_SINCE = 1 << 34  # Unix seconds, far past any plausible clock


class IdleError(ValueError):
    """The annotation cannot be read; the message names the entry and field."""


class _Placement(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    start: Annotated[StrictInt, Field(ge=0, le=64)]
    size: Annotated[StrictInt, Field(ge=1, le=64)]


class IdleInstance(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    gpuUUID: Annotated[StrictStr, Field(min_length=1, max_length=128)]
    profile: Annotated[StrictStr, Field(min_length=1, max_length=64)]
    placement: _Placement
    idleSince: Annotated[StrictInt, Field(ge=0, le=MAX_SINCE)]

    @classmethod
    def of(cls, gpu_uuid: str, profile: str, placement: Placement, since: float) -> IdleInstance:
        return cls.model_validate(
            {
                "gpuUUID": gpu_uuid,
                "profile": profile,
                "placement": {"start": placement.start, "size": placement.size},
                "idleSince": max(0, int(since)),
            }
        )

    @property
    def placement_value(self) -> Placement:
        return Placement(self.placement.start, self.placement.size)

    def sort_key(self) -> tuple[str, int, int, str]:
        return (self.gpuUUID, self.placement.start, self.placement.size, self.profile)


def encode_idle(instances: list[IdleInstance] | tuple[IdleInstance, ...]) -> str:
    ordered = sorted(set(instances), key=IdleInstance.sort_key)
    return json.dumps([x.model_dump() for x in ordered], separators=(",", ":"))


def decode_idle(text: str | None) -> tuple[IdleInstance, ...]:
    """The idle instances of a node's annotation; IdleError on anything not exactly our format."""
    if not text or not text.strip():
        return ()
    out = jsontext.decode_list(text, IDLE, IdleInstance, IdleError, MAX_TEXT, MAX_ENTRIES)
    keys = [(x.gpuUUID, x.placement.start, x.placement.size) for x in out]
    if len(set(keys)) != len(keys):
        raise IdleError(f"{IDLE}: two idle instances at the same placement of one GPU")
    return tuple(out)


def by_gpu(instances: tuple[IdleInstance, ...]) -> dict[str, tuple[IdleInstance, ...]]:
    """GPU UUID -> its idle instances."""
    out: dict[str, list[IdleInstance]] = {}
    for x in instances:
        out.setdefault(x.gpuUUID, []).append(x)
    return {k: tuple(v) for k, v in out.items()}
