"""Fuzzing the real app in-process: hostile AdmissionReviews, ExtenderArgs and binding args never get
a 5xx or an internal error, and a valid pod still schedules afterwards. (The long run over TLS
against a real `dynmig serve` is bench/fuzz_serve.py.)"""

from __future__ import annotations

import os

import hostile_strategies as hs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_extender import filter_args, seed
from webhooks_testkit import gpu_pod, node

FUZZ = settings(
    max_examples=int(os.environ.get("DYNMIG_FUZZ_EXAMPLES", "120")),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
JSON = {"content-type": "application/json"}


def assert_admission_reply_is_sound(reply) -> None:
    assert reply.status_code in (200, 400), (reply.status_code, reply.text[:300])
    if reply.status_code == 200:
        response = reply.json()["response"]
        assert isinstance(response["allowed"], bool)
        if not response["allowed"]:
            assert 400 <= response["status"]["code"] < 500, response
            assert "internal error" not in response["status"]["message"]


def assert_extender_reply_is_sound(reply) -> None:
    assert reply.status_code in (200, 400), (reply.status_code, reply.text[:300])
    if reply.status_code == 200:
        error = reply.json()["Error"]
        assert "internal error" not in error, error


@FUZZ
@given(review=hs.admission_reviews, route=st.sampled_from(["mutate", "validate"]))
def test_no_admission_review_gets_a_5xx_or_an_internal_error(client, review, route):
    assert_admission_reply_is_sound(client.post(f"/{route}", content=hs.body(review), headers=JSON))


@FUZZ
@given(raw=hs.raw_bodies, route=st.sampled_from(["mutate", "validate", "filter", "bind"]))
def test_no_malformed_body_gets_a_5xx(client, extender, raw, route):
    target = client if route in ("mutate", "validate") else extender
    reply = target.post(f"/{route}", content=raw, headers=JSON)
    assert reply.status_code in (200, 400), (reply.status_code, reply.text[:300])


@FUZZ
@given(data=st.data())
def test_no_extender_call_gets_a_5xx_or_an_internal_error_and_scheduling_still_works(
    apiserver, service, extender, data
):
    if not service.cache.node("n1"):
        seed(apiserver, service, node("n1"), node("n2", "A100-SXM4-40GB"))
    real = [p for p in (service.cache.pod("team", f"real-{i}") for i in range(3)) if p]
    if not real:
        hostile = [gpu_pod("real-0", memory=None), gpu_pod("real-1", devices=2), gpu_pod("real-2")]
        hostile[0]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem-percentage"] = "150"
        hostile[1]["metadata"]["annotations"]["nvidia.com/mig-profile-preference"] = "1g," * 1500
        real = seed(apiserver, service, *hostile)
    args = data.draw(hs.extender_args)
    if data.draw(st.booleans()) and isinstance(args.get("Pod"), dict):
        args["Pod"]["metadata"] = data.draw(st.sampled_from(real))["metadata"]  # a pod the cluster has
    assert_extender_reply_is_sound(extender.post("/filter", content=hs.body(args), headers=JSON))
    assert_extender_reply_is_sound(
        extender.post("/bind", content=hs.body(data.draw(hs.binding_args)), headers=JSON)
    )


def test_a_valid_pod_schedules_after_a_storm(apiserver, service, extender):
    _, _, valid = seed(apiserver, service, node("n1"), node("n2"), gpu_pod("valid"))

    @FUZZ
    @given(args=hs.extender_args)
    def storm(args):
        assert_extender_reply_is_sound(extender.post("/filter", content=hs.body(args), headers=JSON))

    storm()
    out = extender.post("/filter", json=filter_args(valid, ["n1", "n2"])).json()
    assert out["Error"] == "" and out["NodeNames"] in (["n1"], ["n2"])
