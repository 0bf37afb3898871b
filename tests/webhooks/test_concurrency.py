"""Concurrent filters never hand out overlapping placements (stress, checked against the reservations
that bind would record on the pods)."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import pytest
from waiting_testkit import eventually
from webhooks_testkit import gpu_pod, node

from mig.annotations import MIG_ALLOCATIONS, decode_allocations


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_concurrent_filters_never_get_overlapping_placements(apiserver, service, seed):
    rng = random.Random(seed)
    service.fleet.hold_chosen = False  # filters without binds in between: do not hold chosen nodes
    nodes = [node("a", gpus=2), node("b", "H100-SXM5-80GB", gpus=2), node("c", "A30", gpus=2)]
    for n in nodes:
        apiserver.create(n)
    pods = [
        apiserver.create(
            gpu_pod(
                f"p{i}",
                memory=rng.choice([4000, 9000, 18000, 30000, 60000]),
                devices=rng.choice([1, 1, 1, 2]),
            )
        )
        for i in range(40)
    ]
    assert eventually(lambda: all(service.cache.pod("team", p["metadata"]["name"]) for p in pods))
    assert eventually(lambda: all(service.cache.node(n) for n in "abc"))

    def filter_(pod: dict) -> dict:
        return service.server.extender.filter({"Pod": pod, "Nodes": None, "NodeNames": ["a", "b", "c"]})

    with ThreadPoolExecutor(12) as pool:
        results = list(pool.map(filter_, pods * 2))  # every pod filtered twice, racing its own re-filter
    assert all(r["Error"] == "" for r in results), [r["Error"] for r in results if r["Error"]]
    assert any(r["NodeNames"] for r in results) and any(not r["NodeNames"] for r in results)

    recorded: dict[str, list] = {}
    for p in pods:
        reservation = service.fleet.reservation(p["metadata"]["uid"])
        ann = reservation.annotations if reservation else {}
        for a in decode_allocations(ann.get(MIG_ALLOCATIONS)):
            recorded.setdefault(a.gpuUUID, []).append((p["metadata"]["uid"], a.placement_value))
    for uuid, held in recorded.items():
        placements = [pl for _, pl in held]
        assert all(not x.overlaps(y) for i, x in enumerate(placements) for y in placements[i + 1 :]), uuid
    counted = {k: sorted(v) for k, v in service.fleet.placements().items() if v}
    assert counted == {k: sorted(v) for k, v in recorded.items()}
