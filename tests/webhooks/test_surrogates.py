"""A lone surrogate escape (`"\\ud800"`: valid JSON, not valid Unicode) decodes as U+FFFD, as
kube-apiserver's decoder reads it, at every entry point of outside JSON or YAML text: never a 5xx."""

from __future__ import annotations

import json

import pytest
from test_extender import filter_args
from webhooks_testkit import gpu_pod, pod, review

from mig import jsontext
from mig.allowlist import check_text
from mig.annotations import PROFILE_PREFERENCE, AnnotationError, decode_allocations

LONE = "\ud800"  # json.dumps writes it as the escape \ud800
JSON = {"content-type": "application/json"}


def raw(body: dict) -> bytes:
    text = json.dumps(body)
    assert "\\ud800" in text
    return text.encode()


def device_config(text: str) -> dict:
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "dc", "namespace": "dynmig", "labels": {"dynmig.io/device-config": "true"}},
        "data": {"device-config.yaml": text},
    }
    return review(cm, kind="ConfigMap", resource="configmaps")


def test_a_device_config_whose_data_is_a_lone_surrogate_is_denied_in_band_not_a_500(client):
    reply = client.post("/validate", content=raw(device_config(LONE)), headers=JSON)
    assert reply.status_code == 200, reply.text
    response = reply.json()["response"]
    assert response["allowed"] is False and "internal error" not in response["status"]["message"]


def test_a_lone_surrogate_inside_device_config_yaml_is_answered_in_band(client):
    text = '{"nvidia": {"migProfileAllowlist": [{"models": ["A30' + LONE + '"], "profiles": ["1g.6gb"]}]}}'
    reply = client.post("/validate", content=raw(device_config(text)), headers=JSON)
    assert reply.status_code == 200, reply.text
    assert reply.json()["response"]["allowed"] is False  # it leaves the catalog's models without profiles


@pytest.mark.parametrize("route", ["mutate", "validate"])
def test_a_pod_with_a_lone_surrogate_preference_gets_an_answer_not_a_500(client, route):
    obj = pod(limits={"nvidia.com/gpu": "1"}, annotations={PROFILE_PREFERENCE: "1g" + LONE})
    reply = client.post(f"/{route}", content=raw(review(obj)), headers=JSON)
    assert reply.status_code == 200, reply.text
    response = reply.json()["response"]
    assert response["allowed"] is False and "1g\ufffd" in response["status"]["message"]


@pytest.mark.parametrize("verb", ["filter", "bind"])
def test_the_extender_answers_a_body_with_a_lone_surrogate_without_a_5xx(extender, verb):
    if verb == "filter":
        body = filter_args(gpu_pod("p" + LONE), ["n1" + LONE])
    else:
        body = {"PodName": "p" + LONE, "PodNamespace": "team", "PodUID": "u", "Node": "n1"}
    reply = extender.post(f"/{verb}", content=raw(body), headers=JSON)
    assert reply.status_code < 500, reply.text
    reply.text.encode("utf-8")  # the reply is valid UTF-8


def test_a_lone_surrogate_in_a_reservation_annotation_decodes_as_u_fffd():
    text = '[{"containerIndex": 0, "deviceIndex": 0, "gpuUUID": "GPU-\\ud800", "profile": "1g.5gb"}]'
    try:
        found = repr(decode_allocations(text))
    except AnnotationError as error:
        found = str(error)
    assert "\ud800" not in found
    found.encode("utf-8")


def test_yaml_text_holding_a_lone_surrogate_is_checked_not_a_crash():
    _, issues = check_text(
        "nvidia:\n  migProfileAllowlist:\n    - {models: [A30" + LONE + "], profiles: [1g.6gb]}\n"
    )
    assert any("A30\ufffd" in i.problem for i in issues)


def test_the_decoder_keeps_pairs_and_escaped_backslashes_and_replaces_only_lone_surrogates():
    assert jsontext.loads('"\\ud83d\\ude00"') == "\U0001f600"
    assert jsontext.loads('"\\\\ud800"') == "\\ud800"
    assert jsontext.loads('{"\\udc00": ["\\ud800x"]}') == {"\ufffd": ["\ufffdx"]}


def test_a_node_config_file_with_a_lone_surrogate_escape_reads_it_as_u_fffd(tmp_path):
    from plugin.config import ConfigError, load_node_config

    path = tmp_path / "config.json"
    path.write_text(
        json.dumps(
            {"nodeconfig": [{"name": "n1", "operatingmode": "mig", "filterdevices": {"uuid": [LONE]}}]}
        )
    )
    assert load_node_config(path, "n1").filter.uuids == frozenset({"\ufffd"})
    path.write_text(json.dumps({"nodeconfig": [{"name": LONE, "operatingmode": LONE}]}))
    with pytest.raises(ConfigError, match="operatingmode"):
        load_node_config(path, "\ufffd")
    path.write_text("[" * 100_000)
    with pytest.raises(ConfigError, match=r"nested too deeply|not valid JSON"):
        load_node_config(path, "n1")


@pytest.mark.parametrize("codec", ["leftovers", "idle"])
def test_a_node_annotation_with_a_lone_surrogate_escape_decodes_it_as_u_fffd(codec):
    from mig.idle import decode_idle
    from mig.leftovers import decode_leftovers

    entry = {"gpuUUID": "GPU-" + LONE, "profile": "1g.5gb", "placement": {"start": 0, "size": 1}}
    entry.update({"idleSince": 1} if codec == "idle" else {"reason": "unowned"})
    (decoded,) = (decode_idle if codec == "idle" else decode_leftovers)(json.dumps([entry]))
    assert decoded.gpuUUID == "GPU-\ufffd"
