"""The GPU catalog holds the facts the simulator and `dynmig policy` build on."""

import pytest

from mig import catalog
from mig.types import Placement

AXIS = {"A30": 4, "A100-SXM4-40GB": 8, "H100-SXM5-80GB": 8, "B200": 8, "RTX-PRO-6000": 12}


@pytest.mark.parametrize("model", catalog.MODELS, ids=lambda m: m.key)
def test_every_placement_of_every_profile_lies_on_the_models_axis(model):
    for profile in model.profiles:
        assert profile.placements, profile.name
        for placement in profile.placements:
            assert placement.start >= 0 and placement.end <= model.axis_length, (profile.name, placement)
        assert len({p.size for p in profile.placements}) == 1, profile.name


@pytest.mark.parametrize("model", catalog.MODELS, ids=lambda m: m.key)
def test_no_profile_offers_more_memory_than_the_gpu_has(model):
    for profile in model.profiles:
        assert profile.memory_mib <= model.memory_mib, profile.name


@pytest.mark.parametrize("model", catalog.MODELS, ids=lambda m: m.key)
def test_profile_ids_and_names_are_unique_within_a_model(model):
    assert len({p.profile_id for p in model.profiles}) == len(model.profiles)
    assert len({p.enum for p in model.profiles}) == len(model.profiles)
    assert len(set(model.profile_names)) == len(model.profiles)


@pytest.mark.parametrize("key,axis", AXIS.items())
def test_the_placement_axis_is_as_long_as_the_largest_placement_reaches(key, axis):
    model = catalog.find_model(key)
    assert model.axis_length == axis
    assert max(p.end for prof in model.profiles for p in prof.placements) == axis


@pytest.mark.parametrize(
    "key,profile,placements,slices",
    [
        ("A100-SXM4-40GB", "3g.20gb", [(0, 4), (4, 4)], 3),
        ("A100-SXM4-40GB", "1g.10gb", [(0, 2), (2, 2), (4, 2), (6, 2)], 1),
        ("A100-SXM4-40GB", "7g.40gb", [(0, 8)], 7),
        ("RTX-PRO-6000", "1g.24gb", [(0, 3), (3, 3), (6, 3), (9, 3)], 1),
        ("RTX-PRO-6000", "2g.48gb", [(0, 6), (6, 6)], 2),
        ("A30", "2g.12gb", [(0, 2), (2, 2)], 2),
        ("H100-SXM5-80GB", "1g.20gb", [(0, 2), (2, 2), (4, 2), (6, 2)], 1),
    ],
)
def test_placement_size_differs_from_slice_count_as_nvidia_smi_shows(key, profile, placements, slices):
    spec = catalog.find_model(key).profile(profile)
    assert spec.placements == tuple(Placement(*p) for p in placements)
    assert spec.slice_count == slices


@pytest.mark.parametrize(
    "key,profile,core",
    [
        ("A100-SXM4-40GB", "1g.5gb", 15),
        ("A100-SXM4-40GB", "2g.10gb", 29),
        ("A100-SXM4-40GB", "3g.20gb", 43),
        ("A100-SXM4-40GB", "4g.20gb", 58),
        ("A100-SXM4-40GB", "7g.40gb", 100),
        ("RTX-PRO-6000", "1g.24gb", 25),
        ("RTX-PRO-6000", "2g.48gb", 50),
        ("RTX-PRO-6000", "4g.96gb", 100),
    ],
)
def test_core_share_is_computed_like_hami(key, profile, core):
    model = catalog.find_model(key)
    assert catalog.core_percent(model, model.profile(profile)) == core


def test_profile_ids_are_the_real_ids_not_the_enum_values():
    a100 = catalog.find_model("A100-SXM4-40GB")
    assert (a100.profile("1g.5gb").enum, a100.profile("1g.5gb").profile_id) == (0, 19)
    assert (a100.profile("1g.10gb").enum, a100.profile("1g.10gb").profile_id) == (9, 15)
    rtx = catalog.find_model("RTX PRO 6000")
    assert (rtx.profile("1g.24gb+gfx").enum, rtx.profile("1g.24gb+gfx").profile_id) == (0xA, 47)


def test_models_are_found_by_key_nvml_name_or_a_unique_part_of_it():
    assert catalog.find_model("NVIDIA H100 80GB HBM3").key == "H100-SXM5-80GB"
    assert catalog.find_model("RTX PRO 6000 Blackwell Server Edition").key == "RTX-PRO-6000"
    assert catalog.find_model("a30").key == "A30"


def test_an_unknown_or_ambiguous_model_name_says_what_is_known():
    with pytest.raises(catalog.UnknownModel, match="known models: A30"):
        catalog.find_model("V100")
    with pytest.raises(catalog.UnknownModel, match="ambiguous"):
        catalog.find_model("A100")


def test_facts_without_a_source_are_marked_unknown():
    h20 = catalog.find_model("H20")
    assert all(p.confidence == catalog.UNKNOWN for p in h20.profiles)
    b200 = catalog.find_model("B200")
    assert b200.profile("7g.180gb").confidence == catalog.UNKNOWN
    assert b200.profile("1g.23gb").confidence == catalog.INFERRED


@pytest.mark.parametrize(
    "key, profile, engines",
    [
        ("H100-SXM5-80GB", "7g.80gb", (8, 7, 0, 7, 1)),
        ("H100-SXM5-80GB", "1g.10gb", (1, 1, 0, 1, 0)),
        ("H200", "3g.71gb", (3, 3, 0, 3, 0)),
        ("A100-SXM4-40GB", "7g.40gb", (7, 5, 0, 1, 1)),
        ("A100-SXM4-40GB", "1g.5gb+me", (1, 1, 0, 1, 1)),
        ("B200", "2g.45gb", (4, 2, 0, 2, 0)),
        ("GB200", "1g.23gb", (2, 1, 0, 1, 0)),
    ],
)
def test_engine_counts_on_8_slice_gpus_are_what_lgip_shows(key, profile, engines):
    e = catalog.find_model(key).profile(profile).engines
    assert (e.copy, e.decoder, e.encoder, e.jpeg, e.ofa) == engines


def test_a_name_an_early_driver_prints_finds_the_same_gb200_profile():
    gb200 = catalog.find_model("GB200")
    assert gb200.profile("1g.24gb") is gb200.profile("1g.23gb")
    assert gb200.profile("1g.24gb+me").name == "1g.23gb+me"
    assert "1g.24gb" in catalog.all_profile_names() and "1g.24gb" not in gb200.profile_names


@pytest.mark.parametrize(
    "name, key",
    [
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "RTX-PRO-6000-WS"),
        ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "RTX-PRO-6000-MAXQ"),
        ("RTX PRO 6000", "RTX-PRO-6000"),
    ],
)
def test_every_rtx_pro_6000_blackwell_edition_is_known_with_the_12_slice_profiles(name, key):
    model = catalog.find_model(name)
    assert model.key == key and model.axis_length == 12
    assert model.profile_names == catalog.RTX_PRO_6000.profile_names


def test_each_model_pins_the_driver_release_its_memory_set_comes_from():
    assert all(m.driver for m in catalog.MODELS)
    assert catalog.find_model("B200").profile("1g.23gb").memory_mib == 20992  # with 4g.90gb (R570)
