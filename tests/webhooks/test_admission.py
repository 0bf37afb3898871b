"""Admission over HTTP: every rule of /mutate and /validate, both API versions, malformed bodies."""

from __future__ import annotations

import json

import pytest
from webhooks_testkit import PLUGIN, SCHEDULER, apply_patch, decode_patch, pod, review

from mig.annotations import MIG_ALLOCATIONS, PROFILE_PREFERENCE

RESERVATION = json.dumps(
    [
        {
            "containerIndex": 0,
            "deviceIndex": 0,
            "gpuUUID": "GPU-a",
            "profile": "1g.10gb",
            "placement": {"start": 0, "size": 1},
        }
    ]
)


def post(client, route: str, body: dict) -> dict:
    reply = client.post(f"/{route}", json=body)
    assert reply.status_code == 200, reply.text
    return reply.json()


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_a_gpu_pod_is_routed_to_the_dynmig_scheduler_in_the_callers_api_version(client, version):
    body = review(pod(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"}), version=version)
    out = post(client, "mutate", body)
    assert out["apiVersion"] == f"admission.k8s.io/{version}"
    assert out["kind"] == "AdmissionReview"
    assert out["response"]["uid"] == body["request"]["uid"]
    assert out["response"]["allowed"] is True
    patched = apply_patch(body["request"]["object"], decode_patch(out["response"]))
    assert patched["spec"]["schedulerName"] == "dynmig-scheduler"


def test_a_pod_asking_only_for_memory_gets_one_gpu_in_limits_and_requests(client):
    body = review(pod(limits={"nvidia.com/gpumem": "8000"}, requests={"nvidia.com/gpumem": "8000"}))
    ops = decode_patch(post(client, "mutate", body)["response"])
    assert {"op": "add", "path": "/spec/containers/0/resources/limits/nvidia.com~1gpu", "value": "1"} in ops
    patched = apply_patch(body["request"]["object"], ops)
    resources = patched["spec"]["containers"][0]["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == "1"
    assert resources["requests"]["nvidia.com/gpu"] == "1"


def test_a_memory_only_init_container_gets_its_gpu_count_too(client):
    obj = pod(limits={})
    obj["spec"]["initContainers"] = [
        {"name": "warm", "image": "cuda", "resources": {"limits": {"nvidia.com/gpumem": "4000"}}}
    ]
    ops = decode_patch(post(client, "mutate", review(obj))["response"])
    patched = apply_patch(obj, ops)
    assert patched["spec"]["initContainers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert "nvidia.com/gpu" not in patched["spec"]["containers"][0]["resources"]["limits"]


def test_a_pod_without_gpu_requests_is_allowed_untouched(client):
    out = post(client, "mutate", review(pod(limits={"cpu": "1"})))["response"]
    assert out["allowed"] is True and "patch" not in out


def test_a_pod_that_names_another_scheduler_is_left_alone(client):
    out = post(client, "mutate", review(pod(limits={"nvidia.com/gpu": "1"}, schedulerName="volcano")))
    assert out["response"]["allowed"] is True and "patch" not in out["response"]


def test_a_gpu_pod_with_a_node_already_assigned_is_denied_with_what_to_change(client):
    out = post(client, "mutate", review(pod(limits={"nvidia.com/gpu": "1"}, nodeName="n1")))["response"]
    assert out["allowed"] is False
    assert out["status"]["code"] == 403
    assert "remove spec.nodeName" in out["status"]["message"]


def test_a_privileged_container_in_a_gpu_pod_is_denied_by_name(client):
    obj = pod(limits={"nvidia.com/gpu": "1"})
    obj["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    out = post(client, "mutate", review(obj))["response"]
    assert out["allowed"] is False and out["status"]["code"] == 403
    assert "container main is privileged" in out["status"]["message"]


def test_a_pod_labelled_webhook_ignore_is_not_mutated(client):
    obj = pod(limits={"nvidia.com/gpu": "1"}, labels={"hami.io/webhook": "ignore"})
    out = post(client, "mutate", review(obj))["response"]
    assert out["allowed"] is True and "patch" not in out


def test_gpucores_on_a_mig_pod_is_allowed_with_a_warning(client):
    out = post(client, "mutate", review(pod(limits={"nvidia.com/gpu": "1", "nvidia.com/gpucores": "30"})))
    assert out["response"]["allowed"] is True
    assert any("nvidia.com/gpucores" in w and "profile" in w for w in out["response"]["warnings"])


def test_a_pod_with_no_containers_is_denied(client):
    obj = pod()
    obj["spec"]["containers"] = []
    out = post(client, "mutate", review(obj))["response"]
    assert out["allowed"] is False and "no containers" in out["status"]["message"]


@pytest.mark.parametrize("route", ["mutate", "validate"])
@pytest.mark.parametrize(
    "value,allowed",
    [
        ("3g.40gb", True),
        ("3g,1g", True),
        ("1g.10gb, 7g", True),
        ("", False),
        (" , ", False),
        ("5g", False),
        ("3g.40gb,9g.1tb", False),
    ],
)
def test_the_profile_preference_must_name_allowlisted_profiles(client, route, value, allowed):
    obj = pod(limits={"nvidia.com/gpu": "1"}, annotations={PROFILE_PREFERENCE: value})
    out = post(client, route, review(obj))["response"]
    assert out["allowed"] is allowed
    if not allowed:
        message = out["status"]["message"]
        assert PROFILE_PREFERENCE in message and "Allowed values:" in message and "3g.40gb" in message


@pytest.mark.parametrize("route", ["mutate", "validate"])
@pytest.mark.parametrize(
    "user,allowed",
    [
        ("alice", False),
        (SCHEDULER, True),
        (PLUGIN, True),
        ("system:serviceaccount:kube-system:replicaset-controller", False),
    ],
)
def test_only_dynmig_identities_may_create_a_pod_with_a_reservation(client, route, user, allowed):
    obj = pod(limits={"nvidia.com/gpu": "1"}, annotations={MIG_ALLOCATIONS: RESERVATION})
    out = post(client, route, review(obj, user=user))["response"]
    assert out["allowed"] is allowed
    if not allowed:
        assert "controller-owned" in out["status"]["message"] and user in out["status"]["message"]


@pytest.mark.parametrize("route", ["mutate", "validate"])
@pytest.mark.parametrize(
    "old_value,new_value,verb",
    [
        (None, RESERVATION, "set"),
        (RESERVATION, None, "remove"),
        (RESERVATION, "[]", "change"),
    ],
)
def test_a_user_update_that_touches_the_reservation_is_denied(client, route, old_value, new_value, verb):
    old = pod(annotations={} if old_value is None else {MIG_ALLOCATIONS: old_value})
    new = pod(annotations={} if new_value is None else {MIG_ALLOCATIONS: new_value})
    out = post(client, route, review(new, old=old, op="UPDATE"))["response"]
    assert out["allowed"] is False
    assert f"tried to {verb} it" in out["status"]["message"]
    assert post(client, route, review(new, old=old, op="UPDATE", user=PLUGIN))["response"]["allowed"] is True


def test_a_user_update_that_leaves_the_reservation_alone_is_allowed(client):
    old = pod(annotations={MIG_ALLOCATIONS: RESERVATION})
    new = pod(annotations={MIG_ALLOCATIONS: RESERVATION, "team": "ml"})
    assert post(client, "validate", review(new, old=old, op="UPDATE"))["response"]["allowed"] is True


def configmap(text: str | None, label: str | None = "true") -> dict:
    meta = {"name": "dynmig-device-config", "namespace": "dynmig"}
    if label is not None:
        meta["labels"] = {"dynmig.io/device-config": label}
    data = {} if text is None else {"device-config.yaml": text}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def cm_review(obj, **kw):
    return review(obj, kind="ConfigMap", resource="configmaps", **kw)


REST_OFF = "    - {models: [NVIDIA], migOff: true}\n"


def test_a_valid_device_config_configmap_is_accepted(client):
    text = (
        "nvidia:\n  migProfileAllowlist:\n    - models: [A30]\n      profiles: [1g.6gb, 2g.12gb]\n" + REST_OFF
    )
    out = post(client, "validate", cm_review(configmap(text)))["response"]
    assert out["allowed"] is True


@pytest.mark.parametrize("op", ["CREATE", "UPDATE"])
def test_a_device_config_with_a_typo_is_denied_field_by_field(client, op):
    text = "nvidia:\n  migProfileAllowlist:\n    - models: [A30]\n      profiles: [1g6gb]\n"
    old = configmap("nvidia: {}\n") if op == "UPDATE" else None
    out = post(client, "validate", cm_review(configmap(text), old=old, op=op))["response"]
    assert out["allowed"] is False
    message = out["status"]["message"]
    assert "nvidia.migProfileAllowlist[0].profiles[0]" in message and "'1g6gb'" in message
    assert message.startswith("configmap team/dynmig-device-config data.device-config.yaml: ")


def test_a_device_config_configmap_without_its_key_is_denied(client):
    out = post(client, "validate", cm_review(configmap(None)))["response"]
    assert out["allowed"] is False and "data.device-config.yaml is missing" in out["status"]["message"]


def test_an_unlabelled_configmap_is_not_checked(client):
    out = post(client, "validate", cm_review(configmap("not: [valid", label=None)))["response"]
    assert out["allowed"] is True


def test_a_device_config_with_catalog_warnings_is_allowed_with_warnings(client):
    text = "nvidia:\n  migProfileAllowlist:\n    - models: [A30X]\n      profiles: [1g.6gb]\n" + REST_OFF
    out = post(client, "validate", cm_review(configmap(text)))["response"]
    assert out["allowed"] is True
    assert any("'A30X' is not part of any known GPU's NVML name" in w for w in out["warnings"])


def test_a_device_config_matching_no_gpu_is_denied_as_serve_would_refuse_it(client):
    text = "nvidia:\n  migProfileAllowlist:\n    - models: [B300]\n      profiles: [1g.34gb]\n"
    out = post(client, "validate", cm_review(configmap(text)))["response"]
    assert out["allowed"] is False and "matches no GPU model" in out["status"]["message"]


def test_a_one_model_device_config_is_allowed_with_another_models_profile_as_a_warning(client):
    text = "nvidia:\n  migProfileAllowlist:\n    - models: [A30]\n      profiles: [1g.6gb, 3g.20gb]\n"
    out = post(client, "validate", cm_review(configmap(text)))["response"]
    assert out["allowed"] is True
    assert any("'3g.20gb' is omitted: A30 has no base 3g profile" in w for w in out["warnings"])
    assert not any("no entry names" in w for w in out["warnings"])  # information is not a warning


@pytest.mark.parametrize(
    "headers,content,expected",
    [
        ({"content-type": "text/plain"}, b"{}", "Content-Type must be application/json"),
        ({"content-type": "application/json"}, b"{not json", "not JSON"),
        ({"content-type": "application/json"}, b"[]", "must be a JSON object"),
        (
            {"content-type": "application/json"},
            b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}',
            "request is missing",
        ),
        (
            {"content-type": "application/json"},
            b'{"apiVersion":"admission.k8s.io/v2","kind":"AdmissionReview","request":{"uid":"x"}}',
            "apiVersion must be one of",
        ),
        (
            {"content-type": "application/json"},
            b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"object":{}}}',
            "request.uid is missing",
        ),
    ],
)
@pytest.mark.parametrize("route", ["mutate", "validate"])
def test_a_malformed_body_gets_http_400_with_a_message(client, route, headers, content, expected):
    reply = client.post(f"/{route}", content=content, headers=headers)
    assert reply.status_code == 400
    assert expected in reply.text


def test_a_body_over_the_size_cap_gets_http_400(client):
    big = json.dumps(review(pod(annotations={"x": "y" * (4 * 1024 * 1024)})))
    reply = client.post("/mutate", content=big, headers={"content-type": "application/json"})
    assert reply.status_code == 400 and "limit" in reply.text


def test_admission_decisions_are_counted_by_result(client, metrics_client):
    post(client, "mutate", review(pod(limits={"nvidia.com/gpu": "1"})))
    post(client, "mutate", review(pod(limits={"nvidia.com/gpu": "1"}, nodeName="n1")))
    client.post("/mutate", content=b"nope", headers={"content-type": "application/json"})
    text = metrics_client.get("/metrics").text
    assert 'dynmig_admission_decisions_total{result="patched",route="mutate"} 1.0' in text
    assert 'dynmig_admission_decisions_total{result="denied",route="mutate"} 1.0' in text
    assert 'dynmig_admission_decisions_total{result="bad-request",route="mutate"} 1.0' in text


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        (
            {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8K"},
            "container main: nvidia.com/gpumem: '8K' has an unknown",
        ),
        ({"nvidia.com/gpu": "0.5"}, "container main: nvidia.com/gpu '0.5' is not a whole number"),
        (
            {"nvidia.com/gpumem-percentage": "150"},
            ("container main: nvidia.com/gpumem-percentage 150 must be an integer between 0 and 100"),
        ),
    ],
)
def test_a_gpu_pod_with_a_bad_quantity_is_denied_naming_container_and_resource(client, limits, message):
    response = post(client, "mutate", review(pod(limits=limits)))["response"]
    assert response["allowed"] is False
    assert response["status"]["message"].startswith(message)


@pytest.mark.parametrize("memory", ["8k", "1e4", "30Ki"])
def test_a_gpu_pod_with_quantities_in_canonical_form_is_routed(client, memory):
    body = review(pod(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": memory}))
    out = post(client, "mutate", body)["response"]
    assert out["allowed"] is True
    assert (
        apply_patch(body["request"]["object"], decode_patch(out))["spec"]["schedulerName"]
        == "dynmig-scheduler"
    )
