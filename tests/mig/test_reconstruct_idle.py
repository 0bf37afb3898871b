"""The scheduler's view of a node's idle instances (mig/reconstruct.py): free for every profile; an
unreadable idle list is reported and changes nothing."""

from __future__ import annotations

import json

import pytest

from mig.idle import IDLE, IdleInstance, encode_idle
from mig.reconstruct import node_gpus
from mig.types import Placement

REGISTER = json.dumps(
    [
        {
            "id": "GPU-a",
            "count": 7,
            "devmem": 40960,
            "devcore": 100,
            "type": "NVIDIA-NVIDIA A100-SXM4-40GB",
            "numa": 0,
            "mode": "mig",
            "health": True,
            "index": 0,
            "migProfiles": [],
        }
    ]
)


@pytest.mark.parametrize("idle", ["{", "[1]", "x" * 70_000])
def test_an_unreadable_idle_list_changes_nothing_for_the_scheduler(idle):
    plain = node_gpus("n", REGISTER)
    hostile = node_gpus("n", REGISTER, idle=idle)
    assert hostile.idle_error and IDLE in hostile.idle_error
    assert hostile.gpus == plain.gpus and hostile.blocked == plain.blocked and not hostile.leftover_error


def test_idle_instances_are_free_for_the_scheduler():
    text = encode_idle([IdleInstance.of("GPU-a", "1g.5gb", Placement(0, 1), 1)])
    published = node_gpus("n", REGISTER, idle=text)
    assert published.gpus == node_gpus("n", REGISTER).gpus  # nothing occupied
    assert [x.profile for x in published.idle["GPU-a"]] == ["1g.5gb"]
