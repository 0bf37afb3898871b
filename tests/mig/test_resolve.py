"""Which profile an allowlisted name gives a GPU: its own name, else its slice key (HAMi v2.10)."""

from mig import catalog
from mig.resolve import on_model

A100_80 = catalog.find_model("A100-SXM4-80GB")
A100_40 = catalog.find_model("A100-SXM4-40GB")
RTX = catalog.find_model("RTX PRO 6000 Blackwell Server Edition")


def resolved(model, names):
    return [(r.label, r.profile.name) for r in on_model(model, names)]


def test_hamis_7g_79gb_on_an_a100_80gb_is_the_7_slice_profile_under_hamis_name():
    assert resolved(A100_80, ["1g.10gb", "7g.79gb"]) == [("1g.10gb", "1g.10gb"), ("7g.79gb", "7g.80gb")]


def test_a_name_the_driver_reports_is_that_profile_not_the_base_profile_of_its_slice_key():
    assert resolved(A100_40, ["1g.10gb", "1g.5gb+me"]) == [("1g.10gb", "1g.10gb"), ("1g.5gb+me", "1g.5gb+me")]


def test_a_slice_key_the_gpu_lacks_is_omitted_and_another_models_name_takes_the_base_profile():
    assert resolved(RTX, ["3g.40gb", "1g.10gb"]) == [("1g.10gb", "1g.24gb")]


def test_a_profile_is_published_once_and_an_exact_name_keeps_it_from_a_slice_key_name():
    assert resolved(A100_80, ["7g.79gb", "7g.80gb"]) == [("7g.80gb", "7g.80gb")]
    assert resolved(A100_80, ["1g.5gb", "1g.9gb"]) == [("1g.5gb", "1g.10gb")]
