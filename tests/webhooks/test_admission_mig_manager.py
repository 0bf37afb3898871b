"""MIG Manager workloads move unchanged: a pod asking `nvidia.com/mig-<profile>: N` (GPU Operator's
`mixed` strategy names) is admitted as N devices of at least that profile's memory, that profile
preferred, in the same container, with a warning saying so; what cannot mean anything is refused
with the fix. The translated pod is then read by the placement engine exactly as the scheduler
reads it, on each model's published profiles, to show which profile it gets."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from webhooks_testkit import PLUGIN, SCHEDULER, apply_patch, pod, review

from base.policyfiles import DEFAULT_POLICY, load_device_config
from mig import catalog
from mig.allowlist import check_text
from mig.annotations import PROFILE_PREFERENCE
from mig.offers import offer
from mig.placement.preference import candidate_order, default_sort_key
from mig.placement.request import PublishedProfile
from mig.pods import gpu_request
from webhooks.admission import AdmissionPolicy, decide
from webhooks.review import Decision, parse_review

A100_40GB_ONLY = """\
nvidia:
  migProfileAllowlist:
    - models: ["A100-SXM4-40GB"]
      profiles: ["1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb"]
"""


def admit(
    obj: dict, text: str | None = None, fleet: tuple = (), dra: frozenset[str] = frozenset()
) -> Decision:
    config = check_text(text)[0] if text else load_device_config(DEFAULT_POLICY)
    policy = AdmissionPolicy(
        device_config=lambda: config,
        privileged_users=frozenset({SCHEDULER, PLUGIN}),
        fleet_offers=lambda: fleet,
        dra_resources=dra,
    )
    return decide("mutate", parse_review(json.dumps(review(obj)).encode()), policy)


def admitted(obj: dict, **kw) -> dict:
    decision = admit(obj, **kw)
    assert decision.allowed, decision.message
    return apply_patch(obj, decision.patch)


def profile_on(model_key: str, admitted_pod: dict) -> list[str]:
    """The profile each device of the admitted pod gets on an empty GPU of this model, as the
    scheduler ranks the published profiles (default allowlist, catalog MiB)."""
    model = catalog.find_model(model_key)
    allowlist = load_device_config(DEFAULT_POLICY).allowlist
    published = sorted(
        (
            PublishedProfile(s.name, s.memory_mib, 0, s.slice_count, s.placements)
            for n in allowlist.profiles_for(model.nvml_name)
            if (s := model.profile(n))
        ),
        key=default_sort_key,
    )
    request = gpu_request(admitted_pod, load_device_config(DEFAULT_POLICY).resources)
    assert request is not None
    out = []
    for _, _, memory in request.devices():
        (_, best), *_ = candidate_order(published, memory, request.preference)
        out.append(published[best].name)
    return out


def mig_pod(limits: dict, **kw) -> dict:
    return pod(limits=limits, requests=dict(limits), **kw)


def test_a_mig_1g_10gb_pod_gets_a_1g_10gb_on_an_h100_and_on_an_a100_80gb_whose_1g_10gb_differ():
    out = admitted(mig_pod({"nvidia.com/mig-1g.10gb": "1"}))
    assert profile_on("H100-SXM5-80GB", out) == ["1g.10gb"]  # 9,984 MiB there
    assert profile_on("A100-SXM4-80GB", out) == ["1g.10gb"]  # 9,728 MiB there
    limits = out["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "9728"}
    assert out["spec"]["containers"][0]["resources"]["requests"] == limits
    assert out["metadata"]["annotations"][PROFILE_PREFERENCE] == "1g.10gb"
    assert out["spec"]["schedulerName"] == "dynmig-scheduler"


def test_a_mig_resource_a_dra_device_class_maps_is_left_for_kube_scheduler_to_allocate():
    asked = mig_pod({"nvidia.com/mig-1g.10gb": "1"})
    out = admitted(asked, dra=frozenset({"nvidia.com/mig-1g.10gb"}))
    assert out["spec"]["containers"][0]["resources"] == asked["spec"]["containers"][0]["resources"]
    assert PROFILE_PREFERENCE not in (out["metadata"].get("annotations") or {})
    # a name no DeviceClass maps is still translated beside it
    out = admitted(mig_pod({"nvidia.com/mig-3g.40gb": "1"}), dra=frozenset({"nvidia.com/mig-1g.10gb"}))
    assert out["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_a_mig_3g_40gb_pod_asking_two_gets_two_3g_40gb_not_4g_40gb_of_equal_memory():
    out = admitted(mig_pod({"nvidia.com/mig-3g.40gb": "2"}))
    assert profile_on("H100-SXM5-80GB", out) == ["3g.40gb", "3g.40gb"]
    assert profile_on("A100-SXM4-80GB", out) == ["3g.40gb", "3g.40gb"]


def test_the_translation_is_said_in_an_admission_warning():
    decision = admit(mig_pod({"nvidia.com/mig-1g.10gb": "1"}))
    assert decision.warnings[0] == (
        "container main: nvidia.com/mig-1g.10gb: 1 (MIG Manager's name) became nvidia.com/gpu: 1, "
        "nvidia.com/gpumem: 9728 (the least MiB of a 1g.10gb) preferring 1g.10gb"
    )


def test_the_media_extension_spelling_of_the_device_plugin_is_read_back():
    # `1g.10gb+me` is advertised as `nvidia.com/mig-1g.10gb.me`: not allowed by default, so no preference
    decision = admit(mig_pod({"nvidia.com/mig-1g.10gb.me": "1"}))
    assert decision.allowed, decision.message
    assert "1g.10gb+me is not allowed" in decision.warnings[0]
    out = apply_patch(mig_pod({"nvidia.com/mig-1g.10gb.me": "1"}), decision.patch)
    assert PROFILE_PREFERENCE not in out["metadata"].get("annotations", {})
    assert profile_on("H100-SXM5-80GB", out) == ["1g.10gb"]


def test_an_init_container_and_an_app_container_each_keep_their_own_request():
    obj = mig_pod({"nvidia.com/mig-3g.40gb": "1"})
    obj["spec"]["initContainers"] = [
        {"name": "warm", "image": "cuda", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}
    ]
    out = admitted(obj)
    assert out["spec"]["initContainers"][0]["resources"]["limits"]["nvidia.com/gpumem"] == "9728"
    assert out["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] == "40192"
    assert out["metadata"]["annotations"][PROFILE_PREFERENCE] == "1g.10gb,3g.40gb"
    assert profile_on("H100-SXM5-80GB", out) == ["1g.10gb", "3g.40gb"]


def test_the_fleets_published_memory_is_used_where_it_is_smaller_than_the_catalogs():
    h100 = catalog.find_model("H100-SXM5-80GB")
    fleet = (offer(h100.nvml_name, 81559, [("1g.10gb", 9856), ("2g.20gb", 20096), ("7g.80gb", 81152)]),)
    out = admitted(mig_pod({"nvidia.com/mig-1g.10gb": "1"}), fleet=fleet)
    assert out["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] == "9728"
    only = admitted(mig_pod({"nvidia.com/mig-2g.20gb": "1"}), fleet=fleet)
    assert only["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] == "19968"


def test_a_name_no_model_has_is_refused_naming_the_nearest_allowed_profiles():
    decision = admit(mig_pod({"nvidia.com/mig-1g.11gb": "1"}))
    assert not decision.allowed
    assert "nvidia.com/mig-1g.11gb names no MIG profile of any GPU dynmig knows" in decision.message
    assert "nearest allowed profiles: 1g.10gb" in decision.message


def test_a_profile_no_allowed_profile_can_hold_is_refused_naming_the_largest_allowed():
    decision = admit(mig_pod({"nvidia.com/mig-7g.80gb": "1"}), text=A100_40GB_ONLY)
    assert not decision.allowed
    assert "needs 80896 MiB (a 7g.80gb), more than any allowed profile holds" in decision.message
    assert "nearest allowed profiles: 7g.40gb (40448 MiB on A100-SXM4-40GB)" in decision.message


def test_a_malformed_name_is_refused_saying_how_gpu_operator_names_them():
    decision = admit(mig_pod({"nvidia.com/mig-large": "1"}))
    assert not decision.allowed
    assert "'nvidia.com/mig-large' is not a MIG profile resource" in decision.message
    assert "nvidia.com/mig-<profile>" in decision.message


@pytest.mark.parametrize(
    ("limits", "words"),
    [
        ({"nvidia.com/mig-1g.10gb": "1", "nvidia.com/gpumem": "4000"}, "ask one way"),
        (
            {"nvidia.com/mig-1g.10gb": "1", "nvidia.com/mig-2g.20gb": "1"},
            "put each profile in its own container",
        ),
        ({"nvidia.com/mig-1g.10gb": "1000000000"}, "more than 128 devices"),
        ({"nvidia.com/mig-1g.10gb": "1.5"}, "is not a whole number"),
    ],
)
def test_a_container_request_that_cannot_mean_one_thing_is_refused(limits, words):
    decision = admit(mig_pod(limits))
    assert not decision.allowed
    assert words in decision.message


def test_a_pod_mixing_mig_resources_with_nvidia_com_gpu_is_refused_naming_the_other_container():
    obj = mig_pod({"nvidia.com/mig-1g.10gb": "1"})
    obj["spec"]["containers"].append(
        {"name": "side", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    )
    decision = admit(obj)
    assert not decision.allowed
    assert "mixes nvidia.com/mig-* resources with nvidia.com/gpu" in decision.message
    assert "container side" in decision.message


def test_two_containers_whose_profiles_one_preference_cannot_tell_apart_are_refused():
    obj = mig_pod({"nvidia.com/mig-3g.40gb": "1"})
    obj["spec"]["containers"].append(
        {"name": "b", "image": "cuda", "resources": {"limits": {"nvidia.com/mig-4g.40gb": "1"}}}
    )
    decision = admit(
        obj,
        text=DEFAULT_POLICY.read_text().replace('"3g.40gb", "7g.80gb"', '"3g.40gb", "4g.40gb", "7g.80gb"'),
    )
    assert not decision.allowed
    assert "one pod-wide preference cannot give each container its own" in decision.message


def test_many_mig_resources_are_refused_without_reading_each():
    limits = {f"nvidia.com/mig-{n}g.{n}gb": "1" for n in range(1, 60)}
    decision = admit(mig_pod(limits))
    assert not decision.allowed
    assert "at most 16 are read" in decision.message


def test_a_pod_for_another_scheduler_keeps_its_mig_resources():
    obj = mig_pod({"nvidia.com/mig-1g.10gb": "1"}, schedulerName="hami-scheduler")
    decision = admit(obj)
    assert decision.allowed and decision.patch == []


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    asks=st.lists(
        st.tuples(
            st.one_of(
                st.sampled_from(["1g.10gb", "3g.40gb", "1g.10gb.me", "7g.80gb"]), st.text(max_size=300)
            ),
            st.one_of(
                st.sampled_from(["1", "2", "0", "1e9", "-1", "8Gi"]), st.text(max_size=40), st.integers()
            ),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_any_mig_resource_names_and_counts_get_an_answer_never_an_error(asks):
    obj = pod(limits={})
    obj["spec"]["containers"] = [
        {"name": f"c{n}", "image": "cuda", "resources": {"limits": {f"nvidia.com/mig-{name}": count}}}
        for n, (name, count) in enumerate(asks)
    ]
    decision = admit(obj)
    assert decision.allowed or (decision.message and len(decision.message) < 2000)


def test_a_count_of_zero_asks_for_nothing_and_is_left_as_written():
    decision = admit(mig_pod({"nvidia.com/mig-1g.10gb": "0"}))
    assert decision.allowed and decision.patch == []
    assert decision.warnings == (
        "container main: nvidia.com/mig-1g.10gb: 0 (MIG Manager's name) asks for no device, so dynmig "
        "leaves it as written",
    )
