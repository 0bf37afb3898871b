"""A node registered by HAMi's Go device plugin schedules as HAMi would, even where Go writes `null`."""

from __future__ import annotations

from mig.annotations import NODE_REGISTER
from mig.placement.request import ContainerRequest, PodRequest
from tests.mig.test_annotations import HAMI_REGISTRATION
from webhooks.fleet import Fleet


def plan(fleet: Fleet, mib: int):
    return fleet.index.plan(PodRequest.from_annotations([ContainerRequest(1, mib)]))


def test_a_node_whose_registration_has_null_placements_still_schedules_its_other_gpus_and_profiles():
    fleet = Fleet()
    fleet.set_node({"metadata": {"name": "n1", "annotations": {NODE_REGISTER: HAMI_REGISTRATION}}})

    assert fleet.occupancy("n1") is not None and len(fleet.occupancy("n1").gpus) == 2  # the MIG GPUs
    [small] = plan(fleet, 4000).devices
    [medium] = plan(fleet, 16000).devices
    whole = plan(fleet, 40000)

    assert small.profile == "1g.5gb" and medium.profile == "3g.20gb"
    assert whole.fits is False  # 7g.40gb published no placement, so it is never offered
