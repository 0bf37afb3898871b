"""Codec of `dynmig.io/node-leftover-instances`: MIG instances on a node that no active reservation
covers, published by the device plugin so the scheduler treats their placements as occupied.

An instance can outlive its reservation: an unowned leftover the plugin may not destroy (no proof
of who created it, and its GPU is busy), or one being reclaimed (its destroy is still failing, e.g.
IN_USE). Until it is gone, a reservation overlapping it would make the device plugin's create fail
with "insufficient resources", so the scheduler must not hand those slices out. The node keeps
HAMi's `hami.io/node-nvidia-register` unchanged; this is a separate annotation of ours.

Format (compact JSON, sorted):
`[{"gpuUUID":"GPU-…","profile":"1g.24gb","placement":{"start":0,"size":3},"reason":"unowned"}]`
with reason `unowned` or `reclaiming`. An empty list (or no annotation) means nothing is left over.
Decoding is strict and bounded: any invalid entry rejects the whole annotation.
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from mig import jsontext
from mig.annotations import LEFTOVERS
from mig.types import Placement

MAX_TEXT = 256 * 1024
MAX_ENTRIES = 1024
UNOWNED, RECLAIMING = "unowned", "reclaiming"


class LeftoverError(ValueError):
    """The annotation cannot be trusted; the message names the entry and field."""


class _Placement(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    start: Annotated[StrictInt, Field(ge=0, le=64)]
    size: Annotated[StrictInt, Field(ge=1, le=64)]


class Leftover(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    gpuUUID: Annotated[StrictStr, Field(min_length=1, max_length=128)]
    profile: Annotated[StrictStr, Field(min_length=1, max_length=64)]
    placement: _Placement
    reason: Literal["unowned", "reclaiming"]

    @classmethod
    def of(cls, gpu_uuid: str, profile: str, placement: Placement, reason: str) -> Leftover:
        return cls.model_validate(
            {
                "gpuUUID": gpu_uuid,
                "profile": profile,
                "reason": reason,
                "placement": {"start": placement.start, "size": placement.size},
            }
        )

    @property
    def placement_value(self) -> Placement:
        return Placement(self.placement.start, self.placement.size)

    def sort_key(self) -> tuple[str, int, int, str]:
        return (self.gpuUUID, self.placement.start, self.placement.size, self.profile)


def encode_leftovers(leftovers: list[Leftover] | tuple[Leftover, ...]) -> str:
    ordered = sorted(set(leftovers), key=Leftover.sort_key)
    return json.dumps([x.model_dump() for x in ordered], separators=(",", ":"))


def decode_leftovers(text: str | None) -> tuple[Leftover, ...]:
    if not text or not text.strip():
        return ()
    out = jsontext.decode_list(text, LEFTOVERS, Leftover, LeftoverError, MAX_TEXT, MAX_ENTRIES)
    return tuple(out)


def by_gpu(leftovers: tuple[Leftover, ...]) -> dict[str, tuple[Placement, ...]]:
    """GPU UUID -> the placements its leftovers occupy."""
    out: dict[str, list[Placement]] = {}
    for x in leftovers:
        out.setdefault(x.gpuUUID, []).append(x.placement_value)
    return {k: tuple(v) for k, v in out.items()}
