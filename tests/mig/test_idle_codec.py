"""The idle-instance annotation: a strict, bounded codec; hostile values get a clear error and
change nothing in what the scheduler sees (idle instances are free whatever the annotation says)."""

from __future__ import annotations

import json

import pytest

from mig.idle import IDLE, MAX_ENTRIES, IdleError, IdleInstance, decode_idle, encode_idle
from mig.types import Placement


def test_round_trip_sorted_and_compact():
    items = [
        IdleInstance.of("GPU-b", "1g.5gb", Placement(3, 1), 1_767_225_600.7),
        IdleInstance.of("GPU-a", "2g.10gb", Placement(0, 2), 5),
    ]
    text = encode_idle(items)
    assert " " not in text and json.loads(text)[0]["gpuUUID"] == "GPU-a"
    assert decode_idle(text) == tuple(sorted(items, key=IdleInstance.sort_key))
    assert decode_idle(None) == decode_idle("") == ()


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("{", "not JSON"),
        ('{"gpuUUID": "x"}', "JSON array"),
        ("[" + ",".join(["{}"] * (MAX_ENTRIES + 1)) + "]", "at most"),
        ('[{"gpuUUID":"g","profile":"1g","placement":{"start":0,"size":1},"idleSince":-1}]', "[0].idleSince"),
        (
            '[{"gpuUUID":"g","profile":"1g","placement":{"start":0,"size":1},"idleSince":1.5}]',
            "[0].idleSince",
        ),
        ('[{"gpuUUID":"g","profile":"1g","placement":{"start":0,"size":0},"idleSince":1}]', "placement.size"),
        ('[{"gpuUUID":"g","profile":"1g","placement":{"start":0,"size":1},"idleSince":1,"x":1}]', "[0].x"),
        ('[{"gpuUUID":"","profile":"1g","placement":{"start":0,"size":1},"idleSince":1}]', "[0].gpuUUID"),
        ("[" + "[" * 5000 + "]" * 5000 + "]", "not JSON"),
        ("x" * 70_000, "longer than"),
    ],
)
def test_hostile_values_are_refused_with_an_error_naming_the_entry(text, where):
    with pytest.raises(IdleError, match=IDLE) as raised:
        decode_idle(text)
    assert where in str(raised.value)


def test_two_entries_at_one_placement_are_refused():
    one = IdleInstance.of("GPU-a", "1g.5gb", Placement(0, 1), 1)
    other = IdleInstance.of("GPU-a", "1g.10gb", Placement(0, 1), 1)
    with pytest.raises(IdleError, match="same placement"):
        decode_idle(json.dumps([one.model_dump(), other.model_dump()]))
