"""A newcomer's trips, each said at admission: a `gpumem-percentage` just above a smaller profile's
MiB (50 % gets a whole GPU on every lab model), a resource name one letter from dynmig's
(`nvidia.com/gpumemory`), and a gpumem written in bytes below the int32 bound (`1Gi`), which gets
the same message as `8Gi` from the one memory reading `dynmig policy explain` uses too."""

from __future__ import annotations

import json

import pytest
from webhooks_testkit import PLUGIN, SCHEDULER, pod, review

from base.policyfiles import DEFAULT_POLICY, load_device_config
from mig import catalog
from mig.offers import catalog_offers
from mig.placement.request import RequestError, memory_mib
from webhooks.admission import AdmissionPolicy, decide
from webhooks.review import Decision, parse_review

ALLOWLIST = load_device_config(DEFAULT_POLICY).allowlist


def lab_fleet(*keys: str) -> tuple:
    """The offers of these catalog models, as the fleet's nodes would publish them."""
    names = {catalog.find_model(k).nvml_name for k in keys}
    return tuple(o for o in catalog_offers(ALLOWLIST) if o.model in names)


def mutate(obj: dict, fleet: tuple = ()) -> Decision:
    config = load_device_config(DEFAULT_POLICY)
    policy = AdmissionPolicy(
        device_config=lambda: config,
        privileged_users=frozenset({SCHEDULER, PLUGIN}),
        fleet_offers=lambda: fleet,
    )
    return decide("mutate", parse_review(json.dumps(review(obj)).encode()), policy)


def test_a_percentage_of_50_warns_that_it_gets_a_whole_gpu_on_each_lab_model():
    fleet = lab_fleet("A100-SXM4-40GB", "RTX-PRO-6000")
    decision = mutate(pod(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"}), fleet)
    assert decision.allowed
    assert decision.warnings == (
        "container main: nvidia.com/gpumem-percentage 50 is 20480 MiB on A100-SXM4-40GB, just above a "
        "3g.20gb (20096 MiB), so it gets a whole GPU, a 7g.40gb; write 49 for a 3g.20gb; the same on "
        "RTX-PRO-6000",
    )


def test_a_percentage_that_fits_a_smaller_profile_gets_no_warning():
    fleet = lab_fleet("A100-SXM4-40GB", "RTX-PRO-6000")
    decision = mutate(pod(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "49"}), fleet)
    assert decision.allowed and decision.warnings == ()


def test_with_no_fleet_known_the_percentage_is_checked_against_every_allowed_model():
    decision = mutate(pod(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"}))
    (warning,) = decision.warnings
    assert "nvidia.com/gpumem-percentage 50 is" in warning and "gets a whole GPU" in warning


def test_a_misspelt_resource_name_is_a_warning_naming_the_one_it_meant():
    decision = mutate(pod(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumemory": "8000"}))
    assert decision.allowed
    assert (
        "container main: resource 'nvidia.com/gpumemory' is not one dynmig or HAMi reads, so no node offers "
        "it and no GPU is reserved for it; did you mean 'nvidia.com/gpumem'?"
    ) in decision.warnings


def test_a_pod_asking_only_a_misspelt_resource_is_warned_too():
    decision = mutate(pod(limits={"nvidia.com/gpus": "1"}))
    assert decision.allowed
    assert any("did you mean 'nvidia.com/gpu'?" in w for w in decision.warnings), decision.warnings


def test_resource_names_far_from_dynmigs_get_no_warning():
    decision = mutate(pod(limits={"nvidia.com/gpu": "1", "cpu": "2", "memory": "1Gi", "amd.com/gpu": "1"}))
    assert not any("resource" in w for w in decision.warnings)


@pytest.mark.parametrize(("written", "mib"), [("1Gi", 1024), ("512Mi", 512), ("2G", 1908)])
def test_gpumem_in_bytes_below_the_int32_bound_is_refused_naming_the_mib(written, mib):
    decision = mutate(pod(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": written}))
    assert not decision.allowed
    assert (
        f'nvidia.com/gpumem counts MiB: {written} is {mib} (write nvidia.com/gpumem: "{mib}"'
        in decision.message
    )


def test_the_one_memory_reading_says_what_admission_says_for_8gi():
    decision = mutate(pod(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8Gi"}))
    with pytest.raises(RequestError) as caught:
        memory_mib("8Gi")
    assert (
        str(caught.value)
        == 'nvidia.com/gpumem counts MiB: 8Gi is 8192 (write nvidia.com/gpumem: "8192"; at most 2147483647)'
    )
    assert f"container main: {caught.value}" in decision.message
    assert memory_mib("8k") == 8000 and memory_mib("30Ki") == 30720
