"""dynmig's GPU catalog against the simulated driver's own facts (sim/nvml/drivers/*.yaml).

The two are written separately, from NVIDIA's documents and real `nvidia-smi` output; a wrong fact
on either side shows up here by name instead of passing silently in every other test.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from sim.nvml import hardware

from mig import catalog


def disagreements(cat: catalog.GpuModel) -> list[str]:
    """Every fact of `cat` the simulated driver (at the release the catalog pins) reports otherwise."""
    if cat.key not in hardware.model_keys():
        return [f"{cat.key}: the simulated driver does not know this model"]
    try:
        sim = hardware.model(cat.key, cat.driver or None)
    except hardware.UnknownRelease as error:
        return [f"{cat.key}: catalog pins driver {cat.driver!r}: {error}"]
    out = [
        f"{cat.key}.{field}: catalog {mine!r}, driver {theirs!r}"
        for field, mine, theirs in (
            ("nvml_names", cat.nvml_names, sim.nvml_names),
            ("pci_device_id", cat.pci_device_id, sim.pci_device_id),
            ("memory_mib", cat.memory_mib, sim.memory_mib),
            ("axis_length", cat.axis_length, sim.axis_length),
            ("max_mig_devices", cat.max_mig_devices, sim.max_mig_devices),
        )
        if mine != theirs
    ]
    missing = sorted({p.name for p in sim.profiles} - set(cat.profile_names))
    out += [
        f"{cat.key} {name}: the driver ({sim.release.key}) offers it, the catalog does not"
        for name in missing
    ]
    for profile in cat.profiles:
        out += _profile_disagreements(cat.key, sim, profile)
    out += _driver_name_disagreements(cat)
    return out


def _profile_disagreements(key: str, sim: hardware.GpuModel, mine: catalog.ProfileSpec) -> list[str]:
    theirs = sim.profile(mine.name)
    where = f"{key} {mine.name} ({sim.release.key})"
    if theirs is None:
        return [f"{where}: the driver does not offer this profile"]
    pairs = (
        ("enum", mine.enum, theirs.enum),
        ("id", mine.profile_id, theirs.profile_id),
        ("memory MiB", mine.memory_mib, theirs.memory_mib),
        ("SMs", mine.sm_count, theirs.sm_count),
        ("slices", mine.slice_count, theirs.slice_count),
        ("instances", mine.instance_count, theirs.instance_count),
        (
            "placements",
            [(p.start, p.size) for p in mine.placements],
            [(p.start, p.size) for p in theirs.placements],
        ),
        ("engines CE/DEC/ENC/JPEG/OFA", _engines(mine.engines), _engines(theirs.engines)),
    )
    return [f"{where} {field}: catalog {a}, driver {b}" for field, a, b in pairs if a != b]


def _driver_name_disagreements(cat: catalog.GpuModel) -> list[str]:
    printed = {
        p.name
        for release in hardware.model(cat.key).releases
        for p in hardware.model(cat.key, release).profiles
    }
    return [
        f"{cat.key} {p.name}: catalog says a driver prints {alias!r}; no known release does"
        for p in cat.profiles
        for alias in p.driver_names
        if alias not in printed
    ]


def _engines(engines) -> tuple[int, ...]:
    return (engines.copy, engines.decoder, engines.encoder, engines.jpeg, engines.ofa)


@pytest.mark.parametrize("model", catalog.MODELS, ids=lambda m: m.key)
def test_the_catalog_agrees_with_the_simulated_driver_on_every_fact(model):
    assert disagreements(model) == []


def test_every_simulated_gpu_model_is_in_the_catalog():
    assert sorted(hardware.model_keys()) == sorted(m.key for m in catalog.MODELS)


def test_a_wrong_catalog_fact_is_named_with_both_values():
    h100 = catalog.find_model("H100-SXM5-80GB")
    wrong = replace(
        h100, profiles=tuple(replace(p, memory_mib=4096) if p.name == "3g.40gb" else p for p in h100.profiles)
    )
    assert disagreements(wrong) == ["H100-SXM5-80GB 3g.40gb (R580) memory MiB: catalog 4096, driver 40448"]


def test_a_catalog_missing_a_profile_the_driver_offers_is_named():
    a30 = catalog.find_model("A30")
    wrong = replace(a30, profiles=tuple(p for p in a30.profiles if p.name != "2g.12gb+me"))
    assert disagreements(wrong) == ["A30 2g.12gb+me: the driver (R535) offers it, the catalog does not"]


@pytest.mark.parametrize(
    "key, release, profile, mib",
    [
        ("H100-NVL-94GB", "R550", "3g.47gb", 47488),
        ("H100-NVL-94GB", "R570", "3g.47gb", 47232),
        ("B200", "R570", "1g.23gb", 20992),
        ("B200", "R570-early", "1g.23gb", 22528),
        ("H200", "R550", "7g.141gb", 143104),
        ("H20", "R550", "1g.12gb", 12032),
        ("A30", "R535", "4g.24gb", 24000),
    ],
)
def test_memory_is_reported_per_driver_release(key, release, profile, mib):
    assert hardware.model(key, release).profile(profile).memory_mib == mib


def test_an_early_gb200_driver_prints_its_1g_profile_as_1g_24gb():
    early = hardware.model("GB200", "R570")
    assert early.profile("1g.24gb").profile_id == 19 and early.profile("1g.23gb") is None
    assert catalog.find_model("GB200").profile("1g.24gb").name == "1g.23gb"


def test_the_b200_driver_before_4g_90gb_does_not_offer_it():
    assert hardware.model("B200", "R570-early").profile("4g.90gb") is None
    assert hardware.model("B200").profile("4g.90gb") is not None
