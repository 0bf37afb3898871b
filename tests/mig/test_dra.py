"""mig/dra: the devices NVIDIA's DRA driver would publish for a MIG GPU, and dynmig's steered order."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from base.policyfiles import default_allowlist
from mig.catalog import find_model
from mig.dra import Gpu, Instance, natural_devices, natural_slices, steer, steered_slices, validate_slice
from mig.dra.devices import counter_set, device_name, fits
from mig.dra.steer import _pset
from mig.types import Placement

BENCH_MODELS = ("A100-SXM4-40GB", "H100-SXM5-80GB", "RTX-PRO-6000")


def gpu(model: str, minor: int = 0, instances: tuple[Instance, ...] = ()) -> Gpu:
    m = find_model(model)
    return Gpu(minor, f"GPU-{minor}", m, default_allowlist().profiles_for(m.nvml_name), instances)


def test_device_names_follow_nvidias_canonical_form():
    assert device_name(0, "1g.5gb", 19, 0) == "gpu-0-mig-1g5gb-19-0"
    assert device_name(3, "1g.5gb+me", 20, 6) == "gpu-3-mig-1g5gb-me-20-6"
    assert device_name(1, "1g.24gb+me.all", 65, 9) == "gpu-1-mig-1g24gb-meall-65-9"  # dots dropped first


def test_natural_order_is_name_order_over_every_allowed_profile_and_placement():
    g = gpu("A100-SXM4-40GB")
    names = [d.name for d in natural_devices(g)]
    assert names == sorted(names)
    pairs = {(d.profile, d.placement) for d in natural_devices(g)}
    expected = {(s.name, p) for s in g.specs() for p in s.placements}
    assert pairs == expected and len(names) == 13


def test_each_device_consumes_its_placements_memory_slices_from_its_gpus_counter_set():
    g = gpu("A100-SXM4-40GB", minor=2)
    d = next(d for d in natural_devices(g) if d.profile == "3g.20gb" and d.placement.start == 4)
    used = d.consumes()
    assert d.counter_set == "gpu-2-counter-set"
    assert [k for k in used if k.startswith("memory-slice-")] == [f"memory-slice-{i}" for i in range(4, 8)]
    assert used["memory"] == d.memory_mib * 1024 * 1024 and used["multiprocessors"] == 42


@pytest.mark.parametrize("model", BENCH_MODELS)
def test_the_capacity_counters_refuse_no_legal_packing_of_the_allowed_profiles(model):
    g = gpu(model)
    devices, counters = natural_devices(g), counter_set(g)
    refused = []

    def walk(i: int, chosen: list, mask: int) -> None:
        if not fits(chosen, counters, []):
            refused.append([d.name for d in chosen])
            return
        for j in range(i, len(devices)):
            if not devices[j].placement.mask & mask:
                walk(j + 1, [*chosen, devices[j]], mask | devices[j].placement.mask)

    walk(0, [], 0)
    assert refused == []


@pytest.mark.parametrize("model", BENCH_MODELS)
def test_the_first_steered_device_of_each_profile_is_the_engines_own_choice(model):
    occupied = (Instance(gpu(model).specs()[0].name, gpu(model).specs()[0].placements[-1]),)
    g = gpu(model, instances=occupied)
    ps = _pset(g)
    steered = dict(steer([g]).candidates)
    for idx, profile in enumerate(ps.profiles):
        best = ps.best(g.mask, idx)
        first = steered.get(profile.name, ())
        assert (first[0].placement if first else None) == (best.placement if best else None)


def _occupancies(model: str):
    specs = gpu(model).specs()
    options = [(s.name, p) for s in specs for p in s.placements]

    @st.composite
    def build(draw):
        out, mask = [], 0
        for name, p in draw(st.permutations(options))[: draw(st.integers(0, 6))]:
            if not p.mask & mask:
                out.append(Instance(name, p))
                mask |= p.mask
        return tuple(out)

    return build()


@settings(max_examples=60, deadline=None)
@given(a=_occupancies("A100-SXM4-40GB"), b=_occupancies("A100-SXM4-40GB"))
def test_every_free_placement_is_listed_once_so_any_request_that_fits_finds_its_devices(a, b):
    gpus = [gpu("A100-SXM4-40GB", 0, a), gpu("A100-SXM4-40GB", 1, b)]
    candidates = dict(steer(gpus).candidates)
    for g in gpus:
        for spec in g.specs():
            free = sorted(p.start for p in spec.placements if not p.mask & g.mask)
            listed = [d.placement.start for d in candidates.get(spec.name, ()) if d.gpu_minor == g.minor]
            assert sorted(listed) == free


def test_allocated_devices_stay_listed_but_never_as_candidates():
    inst = Instance("1g.5gb", Placement(6, 1))
    st_ = steer([gpu("A100-SXM4-40GB", 0, (inst,))])
    assert [d.name for d in st_.allocated] == ["gpu-0-mig-1g5gb-19-6"]
    assert all(d.name != "gpu-0-mig-1g5gb-19-6" for _, group in st_.candidates for d in group)


def test_natural_slices_are_nvidias_layout_and_valid():
    gpus = [gpu("A100-SXM4-40GB", i) for i in range(8)]
    slices = natural_slices("node-a", "gpu.nvidia.com", gpus, generation=3)
    assert "sharedCounters" in slices[0]["spec"] and len(slices[0]["spec"]["sharedCounters"]) == 8
    assert [len(s["spec"]["devices"]) for s in slices[1:]] == [13] * 8
    sets = {c["name"] for c in slices[0]["spec"]["sharedCounters"]}
    for s in slices:
        assert s["spec"]["pool"] == {"name": "node-a", "generation": 3, "resourceSliceCount": 9}
        assert validate_slice(s, sets) == []


def test_steered_slices_keep_a_profiles_candidates_in_one_slice_within_the_api_limits():
    gpus = [gpu("H100-SXM5-80GB", i, (Instance("1g.10gb", Placement(i % 7, 1)),)) for i in range(8)]
    slices = steered_slices("node-b", "gpu.dynmig.io", gpus, generation=1)
    homes: dict[str, set[str]] = {}
    for s in slices:
        assert validate_slice(s) == []
        for d in s["spec"].get("devices", []):
            if d["name"] not in {f"gpu-{i}-mig-1g10gb-19-{i % 7}" for i in range(8)}:
                homes.setdefault(d["attributes"]["profile"]["string"], set()).add(s["metadata"]["name"])
    assert homes and all(len(v) == 1 for v in homes.values())


def test_validation_rejects_what_the_api_server_would():
    good = steered_slices("n", "gpu.dynmig.io", [gpu("A100-SXM4-40GB")], generation=1)[1]
    assert validate_slice(good) == []
    both = copy.deepcopy(good)
    both["spec"]["sharedCounters"] = [{"name": "x", "counters": {"a": {"value": "1"}}}]
    assert any("exactly one of" in p for p in validate_slice(both))
    many = copy.deepcopy(good)
    many["spec"]["devices"] = [dict(many["spec"]["devices"][0], name=f"d{i}") for i in range(65)]
    assert any("more than 64" in p for p in validate_slice(many))
    long = copy.deepcopy(good)
    long["spec"]["devices"][0]["attributes"]["profile"] = {"string": "x" * 65}
    assert any("at most 64" in p for p in validate_slice(long))
    bad_name = copy.deepcopy(good)
    bad_name["spec"]["devices"][0]["name"] = "Not_A_Label"
    assert any("DNS label" in p for p in validate_slice(bad_name))
    assert validate_slice({"kind": "Pod"}) == ["not a resource.k8s.io/v1 ResourceSlice"]


def test_a_dra_gpu_offers_the_profile_hamis_7g_79gb_resolves_to_under_the_drivers_name():
    gpu = Gpu(0, "GPU-0", find_model("A100-SXM4-80GB"), ("1g.10gb", "7g.79gb", "3g.30gb"))

    assert [s.name for s in gpu.specs()] == ["1g.10gb", "7g.80gb", "3g.40gb"]
