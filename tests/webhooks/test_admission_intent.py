"""Intent never ignored in silence: admission warns about what would otherwise be dropped without a
word (look-alike annotation keys, preferences no allowed profile can meet, gpumem 0) and names the
unit when gpumem is written in bytes."""

from __future__ import annotations

import json

import pytest
from webhooks_testkit import PLUGIN, SCHEDULER, pod, review

from base.policyfiles import DEFAULT_POLICY, load_device_config
from mig.annotations import PROFILE_PREFERENCE
from webhooks.admission import AdmissionPolicy, decide
from webhooks.intent import MAX_WARNING_CHARS, MAX_WARNINGS
from webhooks.review import Decision, parse_review

A100_40GB_FLEET = ("NVIDIA A100-SXM4-40GB",)


def mutate(obj: dict, fleet: tuple[str, ...] = ()) -> Decision:
    config = load_device_config(DEFAULT_POLICY)
    policy = AdmissionPolicy(
        device_config=lambda: config,
        privileged_users=frozenset({SCHEDULER, PLUGIN}),
        fleet_models=lambda: fleet,
    )
    return decide("mutate", parse_review(json.dumps(review(obj)).encode()), policy)


def test_a_misspelt_preference_key_is_a_warning_naming_the_key_it_meant():
    decision = mutate(
        pod(
            limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"},
            annotations={"nvidia.com/mig-profile-preferences": "3g"},
        )
    )
    assert decision.allowed
    assert any(
        "'nvidia.com/mig-profile-preferences' is not one dynmig or HAMi reads" in w
        and "did you mean 'nvidia.com/mig-profile-preference'?" in w
        for w in decision.warnings
    ), decision.warnings


def test_a_misspelt_hami_key_is_a_warning_too():
    decision = mutate(pod(limits={"nvidia.com/gpu": "1"}, annotations={"nvidia.com/use-gpu-type": "A100"}))
    assert any("did you mean 'nvidia.com/use-gputype'?" in w for w in decision.warnings)


def test_a_preference_no_model_in_the_fleet_offers_is_allowed_with_a_warning_not_denied():
    obj = pod(
        limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"},
        annotations={PROFILE_PREFERENCE: "3g.40gb"},
    )
    decision = mutate(obj, fleet=A100_40GB_FLEET)
    assert decision.allowed, decision.message
    (warning,) = decision.warnings
    assert warning.startswith(
        f"annotation {PROFILE_PREFERENCE}: 3g.40gb is allowed on no profile of the fleet's"
    )
    assert "the pod gets the smallest allowed profile that fits" in warning and "3g.20gb" in warning
    assert mutate(obj).warnings == ()  # with no fleet known, some model (A100 80GB) offers it


def test_gpumem_zero_is_a_warning_that_it_means_a_whole_gpu():
    decision = mutate(pod(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "0"}))
    assert decision.allowed
    assert any('nvidia.com/gpumem: "0" means a whole GPU' in w for w in decision.warnings)


@pytest.mark.parametrize(("written", "mib"), [("8Gi", 8192), ("16G", 15259), ("1Ti", 1048576)])
def test_gpumem_written_in_bytes_is_refused_naming_the_unit_and_what_to_write(written, mib):
    decision = mutate(pod(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": written}))
    assert not decision.allowed
    assert (
        f'nvidia.com/gpumem counts MiB: {written} is {mib} (write nvidia.com/gpumem: "{mib}"'
        in decision.message
    )


def test_warnings_stay_bounded_for_a_pod_with_thousands_of_look_alike_keys():
    annotations = {f"nvidia.com/mig-profile-preferenc{i}": "1g" for i in range(400)}
    decision = mutate(pod(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "0"}, annotations=annotations))
    assert decision.allowed and 0 < len(decision.warnings) <= MAX_WARNINGS
    assert all(len(w) <= MAX_WARNING_CHARS for w in decision.warnings)
