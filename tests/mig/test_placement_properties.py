"""Properties of the placement engine over random fleets and pods (hypothesis)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from base.policyfiles import default_allowlist
from mig.catalog import find_model
from mig.placement import ContainerRequest, GpuState, PlacementIndex, Plan, PodRequest, Refusal, plan_pod
from mig.placement.published import from_catalog
from mig.types import Placement

ALLOW = default_allowlist()
MODELS = ("A30", "A100-SXM4-40GB", "H100-SXM5-80GB", "RTX-PRO-6000")
PROFILES = {k: from_catalog(find_model(k), ALLOW.profiles_for(find_model(k).nvml_name)) for k in MODELS}
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def fleets(draw) -> list[GpuState]:
    out = []
    for n in range(draw(st.integers(1, 3))):
        for i in range(draw(st.integers(1, 3))):
            model = draw(st.sampled_from(MODELS))
            profiles = PROFILES[model]
            occupied: list[Placement] = []
            mask = 0
            for _ in range(draw(st.integers(0, 4))):
                prof = draw(st.sampled_from(profiles))
                p = draw(st.sampled_from(prof.placements))
                if not p.mask & mask:
                    occupied.append(p)
                    mask |= p.mask
            out.append(
                GpuState(
                    f"node-{n}",
                    f"GPU-{n}-{i}",
                    find_model(model).nvml_name,
                    profiles,
                    tuple(occupied),
                    draw(st.booleans()) or draw(st.booleans()),
                    i,
                )
            )
    return out


memories = st.one_of(st.none(), st.integers(1, 100000))
annotations = st.fixed_dictionaries(
    {},
    optional={
        "nvidia.com/mig-profile-preference": st.sampled_from(["4g", "1g,3g", "2g.10gb", "7g", "9g"]),
        "hami.io/gpu-scheduler-policy": st.sampled_from(["binpack", "spread"]),
        "hami.io/node-scheduler-policy": st.sampled_from(["binpack", "spread"]),
        "nvidia.com/nouse-gpuuuid": st.sampled_from(["GPU-0-0", "GPU-1-0,GPU-0-1"]),
        "nvidia.com/use-gputype": st.sampled_from(["a100", "H100,RTX"]),
    },
)


@st.composite
def pods(draw) -> PodRequest:
    containers = draw(st.lists(st.tuples(st.integers(0, 2), memories), min_size=1, max_size=3))
    return PodRequest.from_annotations([ContainerRequest(n, m) for n, m in containers], draw(annotations))


def check_plan(plan: Plan, pod: PodRequest, gpus: dict[str, GpuState], masks: dict[str, int]) -> None:
    assert len(plan.devices) == pod.device_count
    assert len({d.node for d in plan.devices}) <= 1
    for d in plan.devices:
        g = gpus[d.gpu_uuid]
        assert g.healthy
        assert pod.type_exclusion(g.type) is None and pod.uuid_exclusion(g.uuid) is None
        prof = next(p for p in g.profiles if p.name == d.profile)
        assert d.placement in prof.placements
        request = pod.containers[d.container_index].memory_mib
        assert prof.memory_mb >= (request if request is not None else max(p.memory_mb for p in g.profiles))
        assert not masks[g.uuid] & d.placement.mask, "overlaps an occupied or already planned placement"
        masks[g.uuid] |= d.placement.mask


@SETTINGS
@given(fleets(), pods())
def test_a_plan_is_legal_never_overlaps_never_too_small_and_avoids_excluded_gpus(fleet, pod):
    result = plan_pod(pod, fleet)
    if isinstance(result, Plan):
        check_plan(result, pod, {g.uuid: g for g in fleet}, {g.uuid: g.occupied_mask for g in fleet})
    else:
        assert isinstance(result, Refusal) and result.reasons


@SETTINGS
@given(fleets(), pods())
def test_the_same_input_gives_the_same_plan_whatever_the_order_of_the_gpus(fleet, pod):
    first = plan_pod(pod, fleet)
    again = plan_pod(pod, list(reversed(fleet)))
    if isinstance(first, Plan):
        assert first == again
    else:
        assert [str(r) for r in first.reasons] == [str(r) for r in again.reasons]


@SETTINGS
@given(fleets(), st.lists(pods(), min_size=1, max_size=12), st.data())
def test_planning_and_applying_repeatedly_never_overlaps(fleet, stream, data):
    index = PlacementIndex(fleet)
    gpus = {g.uuid: g for g in fleet}
    masks = {g.uuid: g.occupied_mask for g in fleet}
    live: list[Plan] = []
    for pod in stream:
        if live and data.draw(st.booleans()):
            gone = live.pop(data.draw(st.integers(0, len(live) - 1)))
            for d in gone.devices:
                index.release(d.gpu_uuid, d.placement)
                masks[d.gpu_uuid] &= ~d.placement.mask
        result = index.plan(pod)
        if isinstance(result, Plan):
            check_plan(result, pod, gpus, masks)
            index.apply(result)
            live.append(result)
        for uuid, mask in masks.items():
            assert index.occupied_mask(uuid) == mask
