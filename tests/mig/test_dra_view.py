"""DRA nodes on the slice map (`mig.dra.view`): what `dynmig status` and the live page show for a node
where kube-scheduler allocated MIG devices from dynmig's ResourceSlices."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from base.policyfiles import default_allowlist
from mig.catalog import find_model
from mig.dra.devices import Gpu, Instance
from mig.dra.slices import natural_slices, steered_slices
from mig.dra.view import dra_view
from mig.types import Placement

DRIVER = "mig.dynmig.io"


def gpu(model: str, minor: int, instances: tuple[Instance, ...] = ()) -> Gpu:
    m = find_model(model)
    return Gpu(minor, f"GPU-{model}-{minor}", m, default_allowlist().profiles_for(m.nvml_name), instances)


def device_of(slices: list[dict], gpu_uuid: str, profile: str, start: int) -> str:
    for s in slices:
        for d in s["spec"].get("devices", []):
            a = d["attributes"]
            if (a["parentUUID"]["string"], a["profile"]["string"], a["placementStart"]["int"]) == (
                gpu_uuid,
                profile,
                start,
            ):
                return d["name"]
    raise AssertionError(f"no device {profile}@{start} on {gpu_uuid}")


def claim(name: str, node: str, device: str, pods: tuple[str, ...] = (), driver: str = DRIVER) -> dict:
    return {
        "metadata": {"namespace": "team-a", "name": name, "uid": f"uid-{name}"},
        "status": {
            "allocation": {
                "devices": {"results": [{"request": "mig", "driver": driver, "pool": node, "device": device}]}
            },
            "reservedFor": [{"resource": "pods", "name": p, "uid": f"uid-{p}"} for p in pods],
        },
    }


def test_an_allocated_claim_shows_as_its_pod_on_the_gpu_and_slices_it_was_given():
    gpus = [gpu("A100-SXM4-40GB", 0, (Instance("3g.20gb", Placement(4, 4)),)), gpu("A100-SXM4-40GB", 1)]
    slices = steered_slices("node-a", DRIVER, gpus, generation=3)
    name = device_of(slices, "GPU-A100-SXM4-40GB-0", "3g.20gb", 4)
    view = dra_view(slices, [claim("train-mig-x1", "node-a", name, ("train",))], DRIVER)
    assert view.problems == 0
    (node,) = view.nodes
    assert node.name == "node-a" and [g.uuid for g in node.gpus] == [
        "GPU-A100-SXM4-40GB-0",
        "GPU-A100-SXM4-40GB-1",
    ]
    (segment,) = node.gpus[0].segments
    assert (segment.pod, segment.profile, segment.placement) == ("team-a/train", "3g.20gb", Placement(4, 4))
    assert node.gpus[0].free == (0, 1, 2, 3) and not node.gpus[1].segments
    assert node.gpus[0].fits["3g.20gb"] == 1 and node.gpus[1].fits["7g.40gb"] == 1


def test_only_the_pools_newest_generation_counts():
    old = natural_slices("node-a", DRIVER, [gpu("H100-SXM5-80GB", 0)], generation=1)
    new = natural_slices("node-a", DRIVER, [gpu("H100-SXM5-80GB", 0), gpu("H100-SXM5-80GB", 1)], generation=2)
    view = dra_view(old + new, [], DRIVER)
    assert [len(n.gpus) for n in view.nodes] == [2]


def test_other_drivers_slices_and_results_are_not_ours_to_draw():
    slices = natural_slices("node-a", "gpu.nvidia.com", [gpu("A100-SXM4-40GB", 0)], generation=1)
    ours = natural_slices("node-b", DRIVER, [gpu("A100-SXM4-40GB", 0)], generation=1)
    name = device_of(ours, "GPU-A100-SXM4-40GB-0", "1g.5gb", 0)
    view = dra_view(slices + ours, [claim("c", "node-b", name, ("p",), driver="gpu.nvidia.com")], DRIVER)
    assert [n.name for n in view.nodes] == ["node-b"] and not view.nodes[0].gpus[0].segments


def test_an_allocation_naming_a_device_no_slice_lists_is_reported_not_drawn():
    slices = natural_slices("node-a", DRIVER, [gpu("A100-SXM4-40GB", 0)], generation=1)
    view = dra_view(slices, [claim("lost", "node-a", "gpu-9-mig-1g5gb-19-0", ("p",))], DRIVER)
    assert (
        view.problems == 1
        and "team-a/lost" in view.unreadable[0]
        and "gpu-9-mig-1g5gb-19-0" in view.unreadable[0]
    )


def test_a_claim_not_yet_reserved_by_a_pod_shows_under_its_own_name():
    slices = natural_slices("node-a", DRIVER, [gpu("A100-SXM4-40GB", 0)], generation=1)
    name = device_of(slices, "GPU-A100-SXM4-40GB-0", "2g.10gb", 2)
    view = dra_view(slices, [claim("solo", "node-a", name)], DRIVER)
    assert view.nodes[0].gpus[0].segments[0].pod == "team-a/solo"


def _mangle(draw, value):
    """Replace one nested value of a JSON object by something hostile."""
    if isinstance(value, dict) and value and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(value)))
        value[key] = _mangle(draw, value[key])
        return value
    if isinstance(value, list) and value and draw(st.booleans()):
        i = draw(st.integers(0, len(value) - 1))
        value[i] = _mangle(draw, value[i])
        return value
    return draw(
        st.one_of(
            st.none(),
            st.booleans(),
            st.integers(-(2**70), 2**70),
            st.text(max_size=300),
            st.just([]),
            st.just({}),
        )
    )


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_hostile_slices_and_claims_never_raise(data):
    gpus = [gpu("A100-SXM4-40GB", 0, (Instance("1g.5gb", Placement(0, 1)),))]
    slices = steered_slices("node-a", DRIVER, gpus, generation=1)
    name = device_of(slices, "GPU-A100-SXM4-40GB-0", "1g.5gb", 0)
    objects = copy.deepcopy([*slices, claim("c", "node-a", name, ("p",))])
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(objects) - 1))
        objects[i] = _mangle(data.draw, objects[i])
    view = dra_view(objects[:-1], objects[-1:], DRIVER)
    for node in view.nodes:
        for g in node.gpus:
            assert all(0 <= s.placement.start < g.slices for s in g.segments)


def test_a_prepared_device_shows_running_with_the_mig_uuid_the_plugin_reported():
    gpus = [gpu("A100-SXM4-40GB", 0, (Instance("1g.5gb", Placement(6, 1)),))]
    slices = steered_slices("node-a", DRIVER, gpus, generation=2)
    name = device_of(slices, "GPU-A100-SXM4-40GB-0", "1g.5gb", 6)
    prepared = claim("infer-mig-x1", "node-a", name, ("infer",))
    prepared["status"]["devices"] = [
        {
            "driver": DRIVER,
            "pool": "node-a",
            "device": name,
            "data": {
                "migUUID": "MIG-1234",
                "gpuUUID": "GPU-A100-SXM4-40GB-0",
                "gpuInstanceID": 13,
                "computeInstanceID": 0,
            },
        }
    ]
    waiting = copy.deepcopy(prepared)
    del waiting["status"]["devices"]
    (seg,) = dra_view(slices, [prepared], DRIVER).nodes[0].gpus[0].segments
    assert (seg.phase, seg.mig_uuid, seg.pod) == ("realized", "MIG-1234", "team-a/infer")
    (seg,) = dra_view(slices, [waiting], DRIVER).nodes[0].gpus[0].segments
    assert (seg.phase, seg.mig_uuid) == ("reserved", None)


def test_an_a100_40gb_has_8_slices_on_the_map_whatever_its_free_placements_are():
    held = (Instance("1g.5gb", Placement(0, 1)), Instance("1g.5gb", Placement(6, 1)))
    gpus = [gpu("A100-SXM4-40GB", 0, held)]
    slices = steered_slices("node-a", DRIVER, gpus, generation=2)
    claims = [
        claim(f"c{s}", "node-a", device_of(slices, "GPU-A100-SXM4-40GB-0", "1g.5gb", s), (f"p{s}",))
        for s in (0, 6)
    ]
    (g,) = dra_view(slices, claims, DRIVER).nodes[0].gpus
    assert g.slices == 8
    assert "3g.20gb" not in g.fits or not g.fits["3g.20gb"]  # it names the axis; it fits nowhere
