"""Where a single-device pod goes after the engine's plan (`mig.placement.adjust`): onto an idle
instance its plugin would hand it, else off a GPU with creates in flight (nodes bound without the
node lock), then off idle instances it would overlap; never onto a GPU nothing holds yet."""

from __future__ import annotations

from base.policyfiles import default_allowlist
from mig.annotations import MigAllocation, PlacementModel
from mig.catalog import find_model
from mig.idle import IdleInstance
from mig.placement import ContainerRequest, GpuState, PlacementIndex, Plan, PodRequest
from mig.placement.adjust import adjust, creates_in_flight, spread
from mig.placement.published import from_catalog
from mig.types import Placement

A100 = find_model("A100-SXM4-40GB")
PROFILES = from_catalog(A100, default_allowlist().profiles_for(A100.nvml_name))
ONE_G = PodRequest.from_annotations([ContainerRequest(1, 4000)])  # a 1g.5gb
TWO_ONE_G = PodRequest.from_annotations([ContainerRequest(2, 4000)])


def gpu(i: int, *occupied: Placement) -> GpuState:
    return GpuState("n1", f"GPU-{i}", A100.nvml_name, PROFILES, occupied, True, i, A100.memory_mib)


def held(uuid: str, start: int, realized: bool) -> tuple[object, MigAllocation]:
    """A reservation of a 1g.5gb at `start`; `realized`: its instance is on the record already."""
    runtime = (
        {"migUUID": f"MIG-{uuid}-{start}", "gpuInstanceID": 1, "computeInstanceID": 0} if realized else {}
    )
    placement = PlacementModel(start=start, size=1)
    a = MigAllocation(
        containerIndex=0, deviceIndex=0, gpuUUID=uuid, profile="1g.5gb", placement=placement, **runtime
    )
    return (object(), a)


def test_a_pod_planned_on_a_gpu_with_creates_in_flight_moves_to_a_touched_gpu_with_fewer_never_to_an_empty_one():
    gpus = [gpu(0, Placement(6, 1), Placement(5, 1)), gpu(1, Placement(6, 1)), gpu(2)]
    holders = {
        "GPU-0": (held("GPU-0", 6, False), held("GPU-0", 5, False)),
        "GPU-1": (held("GPU-1", 6, True),),
    }
    index = PlacementIndex(gpus)
    plan = index.plan(ONE_G)
    assert isinstance(plan, Plan) and plan.devices[0].gpu_uuid == "GPU-0"  # the engine packs the fullest

    moved = spread(ONE_G, plan, index, gpus, holders)

    assert creates_in_flight(holders) == {"GPU-0": 2, "GPU-1": 0}
    assert moved.node == "n1" and moved.devices[0].gpu_uuid == "GPU-1"
    assert moved.devices[0].profile == plan.devices[0].profile


def test_an_idle_instance_the_plugin_would_hand_the_pod_wins_over_spreading_and_many_devices_stay_as_planned():
    gpus = [gpu(0, Placement(6, 1)), gpu(1)]
    holders = {"GPU-0": (held("GPU-0", 6, False),)}
    idle = {"GPU-1": [IdleInstance.of("GPU-1", "1g.5gb", Placement(3, 1), 0)]}
    index = PlacementIndex(gpus)
    plan = index.plan(ONE_G)
    assert isinstance(plan, Plan)

    onto = adjust(ONE_G, plan, index, gpus, holders, idle, "team", {}, lock_free=True)
    assert (onto.devices[0].gpu_uuid, onto.devices[0].placement) == ("GPU-1", Placement(3, 1))

    taken_by_other = {("GPU-1", "1g.5gb", 3, 1): "other-team"}  # its plugin hands it only to that namespace
    kept = adjust(ONE_G, plan, index, gpus, holders, idle, "team", taken_by_other, lock_free=False)
    assert kept == plan

    two = index.plan(TWO_ONE_G)
    assert (
        isinstance(two, Plan) and adjust(TWO_ONE_G, two, index, gpus, holders, idle, "team", {}, True) == two
    )
