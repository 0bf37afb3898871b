"""A profile HAMi's allowlist names by slice key (`7g.79gb` on an A100-SXM4-80GB) is published under that
name, so a pod preferring it is admitted without a warning and the scheduler reserves it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_extender import post_bind, post_filter, seed, stored_pod
from webhooks_testkit import PLUGIN, SCHEDULER, gpu_pod, node, review

from base.policyfiles import load_device_config
from mig.annotations import MIG_ALLOCATIONS, PROFILE_PREFERENCE, decode_allocations
from webhooks.admission import AdmissionPolicy, decide
from webhooks.config import StaticDeviceConfig
from webhooks.review import parse_review

HAMI_CHART_DEFAULT = Path(__file__).parents[1] / "fixtures" / "hami-v2.10-chart-device-config.yaml"
HAMI_A100_80 = ("1g.10gb", "2g.20gb", "3g.40gb", "7g.79gb")  # what a node publishes under it


@pytest.fixture
def device_config():  # serve runs with HAMi's own device config (overrides the conftest's)
    return StaticDeviceConfig(load_device_config(HAMI_CHART_DEFAULT))


def test_a_pod_preferring_7g_79gb_is_admitted_without_a_warning_on_a_fleet_of_a100_80gb(device_config):
    obj = gpu_pod("whole", memory=8000, annotations={PROFILE_PREFERENCE: "7g.79gb"})
    policy = AdmissionPolicy(
        device_config=device_config.get,
        privileged_users=frozenset({SCHEDULER, PLUGIN}),
        fleet_models=lambda: ("NVIDIA A100-SXM4-80GB",),
    )
    for kind in ("mutate", "validate"):
        decision = decide(kind, parse_review(json.dumps(review(obj)).encode()), policy)
        assert decision.allowed and decision.warnings == (), (kind, decision)


def test_a_pod_preferring_7g_79gb_gets_the_whole_gpu_under_that_name(apiserver, service, extender):
    a100 = node("n1", "A100-SXM4-80GB", names=HAMI_A100_80)
    _, pod = seed(
        apiserver, service, a100, gpu_pod("whole", memory=8000, annotations={PROFILE_PREFERENCE: "7g.79gb"})
    )

    assert post_filter(extender, service, pod, ["n1"])["NodeNames"] == ["n1"]
    assert post_bind(extender, pod, "n1") == {"Error": ""}

    (alloc,) = decode_allocations(stored_pod(apiserver, "whole")["metadata"]["annotations"][MIG_ALLOCATIONS])
    assert (alloc.profile, alloc.placement_value.start, alloc.placement_value.size) == ("7g.79gb", 0, 8)
