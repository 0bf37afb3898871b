"""The index picks exactly what the stated ranking rule picks when applied to every GPU and placement.

`mig.placement.reference` ranks every legal (GPU, profile, placement) of the fleet directly; the index
ranks buckets of GPUs. Any criterion the index evaluates per bucket but that varies per GPU or node
would show up here as a different choice.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from base.policyfiles import default_allowlist
from mig.catalog import find_model
from mig.placement import ContainerRequest, GpuState, PlacementIndex, Plan, PodRequest
from mig.placement.published import from_catalog
from mig.placement.reference import reference_plan
from mig.types import Placement

ALLOW = default_allowlist()
MODELS = ("A100-SXM4-40GB", "H100-SXM5-80GB", "A30", "RTX-PRO-6000")
PROFILES = {k: from_catalog(find_model(k), ALLOW.profiles_for(find_model(k).nvml_name)) for k in MODELS}
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def gpu_states(draw: st.DrawFn, node: str, i: int) -> GpuState:
    model = draw(st.sampled_from(MODELS))
    profiles = PROFILES[model]
    occupied: list[Placement] = []
    mask = 0
    for _ in range(draw(st.integers(0, 5))):
        p = draw(st.sampled_from(draw(st.sampled_from(profiles)).placements))
        if not p.mask & mask:
            occupied.append(p)
            mask |= p.mask
    healthy = draw(st.integers(0, 9)) > 0
    cordoned = "cordoned by the operator" if draw(st.integers(0, 9)) == 0 else ""
    m = find_model(model)
    return GpuState(
        node, f"GPU-{node}-{i}", m.nvml_name, profiles, tuple(occupied), healthy, i, m.memory_mib, cordoned
    )


@st.composite
def fleets(draw: st.DrawFn) -> list[GpuState]:
    out = []
    for n in range(draw(st.integers(1, 4))):
        out += [draw(gpu_states(f"node-{n}", i)) for i in range(draw(st.integers(1, 3)))]
    return out


ANNOTATIONS = st.fixed_dictionaries(
    {},
    optional={
        "nvidia.com/mig-profile-preference": st.sampled_from(["4g", "1g,3g", "2g.10gb", "7g", "3g.40gb"]),
        "hami.io/gpu-scheduler-policy": st.sampled_from(["binpack", "spread"]),
        "hami.io/node-scheduler-policy": st.sampled_from(["binpack", "spread"]),
        "nvidia.com/nouse-gpuuuid": st.sampled_from(["GPU-node-0-0", "GPU-node-1-0,GPU-node-0-1"]),
        "nvidia.com/use-gputype": st.sampled_from(["a100", "H100,A30"]),
    },
)
CONTAINERS = st.one_of(
    st.builds(ContainerRequest, st.integers(1, 2), st.sampled_from([None, 5000, 10240, 20000, 40000, 80000])),
    st.builds(ContainerRequest, st.integers(1, 2), st.none(), st.integers(1, 99)),
    st.builds(ContainerRequest, st.integers(1, 2), st.integers(1, 100000)),
)


@st.composite
def pods(draw: st.DrawFn, multi: bool = True) -> PodRequest:
    containers = draw(st.lists(CONTAINERS, min_size=1, max_size=2 if multi else 1))
    if not multi:
        containers = [ContainerRequest(1, containers[0].memory_mib, containers[0].memory_percent)]
    return PodRequest.from_annotations(containers, draw(ANNOTATIONS))


def _as_plan(result: object) -> Plan | None:
    return result if isinstance(result, Plan) else None


@SETTINGS
@given(fleets(), pods(multi=False))
def test_a_one_device_pod_lands_where_ranking_every_gpu_and_placement_says(fleet, pod):
    assert _as_plan(PlacementIndex(fleet).plan(pod)) == reference_plan(pod, fleet)


@SETTINGS
@given(fleets(), pods())
def test_a_multi_device_pod_lands_where_the_stated_greedy_rule_says(fleet, pod):
    assert _as_plan(PlacementIndex(fleet).plan(pod)) == reference_plan(pod, fleet)


@SETTINGS
@given(fleets(), pods(), st.data())
def test_a_pod_restricted_to_some_nodes_lands_where_the_rule_says_on_those_nodes(fleet, pod, data):
    names = sorted({g.node for g in fleet})
    allowed = data.draw(st.lists(st.sampled_from(names), unique=True))
    assert _as_plan(PlacementIndex(fleet).plan(pod, allowed)) == reference_plan(pod, fleet, allowed)


@SETTINGS
@given(fleets(), pods(), st.data())
def test_a_pod_planned_on_one_node_lands_where_the_rule_says_on_that_node(fleet, pod, data):
    node = data.draw(st.sampled_from(sorted({g.node for g in fleet})))
    assert PlacementIndex(fleet).plan_on(pod, node) == reference_plan(pod, fleet, [node])


@SETTINGS
@given(fleets(), st.lists(pods(), min_size=1, max_size=10), st.data())
def test_after_reservations_and_releases_the_index_still_picks_what_the_rule_says(fleet, stream, data):
    """The index moves GPUs between buckets on every change; the reference sees only the current state."""
    index = PlacementIndex(fleet)
    held = {g.uuid: list(g.occupied) for g in fleet}
    live: list[Plan] = []
    for pod in stream:
        if live and data.draw(st.booleans()):
            gone = live.pop(data.draw(st.integers(0, len(live) - 1)))
            for d in gone.devices:
                index.release(d.gpu_uuid, d.placement)
                held[d.gpu_uuid].remove(d.placement)
        now = [
            GpuState(
                g.node,
                g.uuid,
                g.type,
                g.profiles,
                tuple(held[g.uuid]),
                g.healthy,
                g.index,
                g.memory_mb,
                g.cordoned,
            )
            for g in fleet
        ]
        chosen = _as_plan(index.plan(pod))
        assert chosen == reference_plan(pod, now)
        if chosen is not None:
            index.apply(chosen)
            live.append(chosen)
            for d in chosen.devices:
                held[d.gpu_uuid].append(d.placement)


# ---- nodes of up to 8 GPUs, pods of 2, 4 or 8 whole GPUs, and demand for them ------------------
@st.composite
def eight_gpu_fleets(draw: st.DrawFn) -> list[GpuState]:
    """One to three nodes of two to eight GPUs, many of them empty (room for multi-GPU pods)."""
    out = []
    for n in range(draw(st.integers(1, 3))):
        for i in range(draw(st.integers(2, 8))):
            g = draw(gpu_states(f"node-{n}", i))
            if draw(st.integers(0, 2)) > 0:  # two in three GPUs hold nothing
                g = GpuState(
                    g.node, g.uuid, g.type, g.profiles, (), g.healthy, g.index, g.memory_mb, g.cordoned
                )
            out.append(g)
    return out


WHOLE_GPU_PODS = st.builds(
    lambda n, annotations: PodRequest.from_annotations([ContainerRequest(n, None)], annotations),
    st.sampled_from([2, 4, 8]),
    ANNOTATIONS,
)
MIXES = st.lists(
    st.tuples(st.sampled_from([None, 5000, 10240, 20000]), st.floats(0.01, 100.0)),
    max_size=3,
    unique_by=lambda t: t[0],
).map(tuple)
NODE_MIXES = st.lists(
    st.tuples(st.sampled_from([2, 4, 8]), st.floats(0.01, 100.0)), max_size=3, unique_by=lambda t: t[0]
).map(tuple)


@SETTINGS
@given(eight_gpu_fleets(), st.one_of(WHOLE_GPU_PODS, pods()), MIXES, NODE_MIXES, st.booleans())
def test_under_demand_for_multi_gpu_pods_a_pod_lands_where_the_rule_says(fleet, pod, mix, node_mix, whole):
    """`whole`: empty nodes kept whole (the opt-in `keep_nodes_whole`) or not."""
    index = PlacementIndex(fleet, keep_nodes_whole=whole)
    index.set_demand(mix, node_mix)
    expected = reference_plan(pod, fleet, mix=mix, node_mix=node_mix, keep_nodes_whole=whole)
    assert _as_plan(index.plan(pod)) == expected


@SETTINGS
@given(eight_gpu_fleets(), st.one_of(WHOLE_GPU_PODS, pods()), MIXES, NODE_MIXES, st.booleans(), st.data())
def test_under_demand_for_multi_gpu_pods_a_pod_planned_on_one_node_lands_where_the_rule_says(
    fleet, pod, mix, node_mix, whole, data
):
    node = data.draw(st.sampled_from(sorted({g.node for g in fleet})))
    index = PlacementIndex(fleet, keep_nodes_whole=whole)
    index.set_demand(mix, node_mix)
    assert index.plan_on(pod, node) == reference_plan(pod, fleet, [node], mix, node_mix, whole)


def test_kept_whole_a_two_device_pod_on_an_empty_node_takes_the_same_gpus_as_without_the_term():
    """The pod's first device opens the node; its second device is not ranked as opening it again,
    so it takes the other GPU's half as it would without the term (not GPU 0's other half)."""
    model = find_model("A100-SXM4-40GB")
    fleet = [
        GpuState(
            "node-0",
            f"GPU-node-0-{i}",
            model.nvml_name,
            PROFILES["A100-SXM4-40GB"],
            (),
            True,
            i,
            model.memory_mib,
        )
        for i in range(2)
    ]
    pod = PodRequest.from_annotations([ContainerRequest(2, 10240)], {})
    mix = ((5000, 1.0),)
    plain = reference_plan(pod, fleet, ["node-0"], mix)
    assert plain is not None
    assert [(d.gpu_uuid, d.profile, d.placement.start) for d in plain.devices] == [
        ("GPU-node-0-0", "3g.20gb", 4),
        ("GPU-node-0-1", "3g.20gb", 4),
    ]
    assert reference_plan(pod, fleet, ["node-0"], mix, (), keep_nodes_whole=True) == plain
    index = PlacementIndex(fleet, keep_nodes_whole=True)
    index.set_demand(mix)
    assert index.plan_on(pod, "node-0") == plain
    assert index.plan(pod) == plain


@SETTINGS
@given(
    eight_gpu_fleets(),
    st.lists(st.one_of(WHOLE_GPU_PODS, pods(multi=False)), min_size=1, max_size=10),
    NODE_MIXES,
    st.booleans(),
    st.data(),
)
def test_as_multi_gpu_pods_come_and_go_the_index_still_picks_what_the_rule_says(
    fleet, stream, node_mix, whole, data
):
    """Each reservation and release moves a node's count of empty GPUs, which prices its node slots
    and (with `keep_nodes_whole`) says whether the node is empty."""
    index = PlacementIndex(fleet, keep_nodes_whole=whole)
    index.set_demand((), node_mix)
    held = {g.uuid: list(g.occupied) for g in fleet}
    live: list[Plan] = []
    for pod in stream:
        if live and data.draw(st.booleans()):
            gone = live.pop(data.draw(st.integers(0, len(live) - 1)))
            for d in gone.devices:
                index.release(d.gpu_uuid, d.placement)
                held[d.gpu_uuid].remove(d.placement)
        now = [
            GpuState(
                g.node,
                g.uuid,
                g.type,
                g.profiles,
                tuple(held[g.uuid]),
                g.healthy,
                g.index,
                g.memory_mb,
                g.cordoned,
            )
            for g in fleet
        ]
        chosen = _as_plan(index.plan(pod))
        assert chosen == reference_plan(pod, now, node_mix=node_mix, keep_nodes_whole=whole)
        if chosen is not None:
            index.apply(chosen)
            live.append(chosen)
            for d in chosen.devices:
                held[d.gpu_uuid].append(d.placement)
