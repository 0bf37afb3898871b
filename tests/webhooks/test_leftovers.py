"""The scheduler never reserves slices a node cannot realize: placements its device plugin publishes
in `dynmig.io/node-leftover-instances` count as occupied until the plugin says they are gone."""

from __future__ import annotations

from mig.leftovers import LEFTOVERS, Leftover, encode_leftovers
from mig.placement.request import ContainerRequest, PodRequest
from mig.types import Placement
from tests.webhooks.webhooks_testkit import node
from webhooks.fleet import Fleet

GPU = "GPU-n1-0"


def with_leftovers(*placements: tuple[str, int, int]) -> dict:
    doc = node("n1", "A100-SXM4-40GB")
    text = encode_leftovers([Leftover.of(GPU, p, Placement(s, z), "unowned") for p, s, z in placements])
    doc["metadata"]["annotations"][LEFTOVERS] = text
    return doc


def plan_1g(fleet: Fleet):
    return fleet.index.plan(PodRequest.from_annotations([ContainerRequest(1, 4000)]))


def test_a_placement_published_as_left_over_is_never_reserved_until_it_is_gone():
    fleet = Fleet()
    every_1g_but_the_last = [("1g.5gb", s, 1) for s in range(6)]
    fleet.set_node(with_leftovers(*every_1g_but_the_last))

    plan = plan_1g(fleet)

    assert [(d.profile, d.placement) for d in plan.devices] == [("1g.5gb", Placement(6, 1))]
    [gpu] = fleet.occupancy("n1").gpus
    assert set(gpu.occupied) == {Placement(s, 1) for s in range(6)}

    fleet.set_node(node("n1", "A100-SXM4-40GB"))  # the plugin removed the annotation: all destroyed
    [gpu] = fleet.occupancy("n1").gpus
    assert gpu.occupied == ()


def test_an_unreadable_leftover_list_fails_the_nodes_gpus_closed():
    fleet = Fleet()
    doc = node("n1", "A100-SXM4-40GB")
    doc["metadata"]["annotations"][LEFTOVERS] = '[{"gpuUUID":"GPU-n1-0","profile":"1g.5gb"}]'
    fleet.set_node(doc)

    [gpu] = fleet.occupancy("n1").gpus

    assert not gpu.healthy
    assert LEFTOVERS in fleet.occupancy("n1").closed[GPU]
    assert plan_1g(fleet).fits is False
