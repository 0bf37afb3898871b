"""Hypothesis strategies for hostile requests to `dynmig serve`: AdmissionReviews, ExtenderArgs,
ExtenderBindingArgs, pods and device configs. Each known field is usually well-formed and sometimes
any JSON at all; a few raw bodies are malformed at the byte level (deep, huge, not UTF-8, not JSON).

Used by the in-process fuzz tests (tests/webhooks/test_fuzz.py) and the long run (bench/fuzz_serve.py).
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from hypothesis import strategies as st

from mig.annotations import MIG_ALLOCATIONS, PROFILE_PREFERENCE

GPU, MEM, PCT, CORES = (
    "nvidia.com/gpu",
    "nvidia.com/gpumem",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/gpucores",
)
ANNOTATIONS = (
    PROFILE_PREFERENCE,
    MIG_ALLOCATIONS,
    "hami.io/node-scheduler-policy",
    "hami.io/gpu-scheduler-policy",
    "nvidia.com/use-gpuuuid",
    "nvidia.com/nouse-gputype",
    "x",
)

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False), st.text(max_size=24)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=16,
)


def _wrong_sometimes(valid: st.SearchStrategy) -> st.SearchStrategy:
    """Mostly `valid`, sometimes any JSON value (a wrong type)."""
    return st.one_of(valid, valid, valid, valid, valid, json_values)


def _as_is(valid: st.SearchStrategy) -> st.SearchStrategy:
    return valid


def _build(maybe):
    """Every strategy, with `maybe` deciding whether a known field may get a wrong type."""
    names = st.one_of(st.sampled_from(["p0", "p1", "web", "n1", "n2", ""]), st.text(max_size=16))
    quantities = st.one_of(
        st.sampled_from(
            [
                "1",
                "2",
                "8k",
                "8000",
                "1e3",
                "30Ki",
                "0",
                "-1",
                "1.5",
                "100000000",
                "8K",
                "",
                " 1",
                "1e4294967297",
                "9Ei",
                "25",
                "150",
                "0.5Gi",
                "1e2147483647",
                ".",
            ]
        ),
        st.integers(-10, 10**9).map(str),
        st.text(max_size=12),
        st.integers(-5, 300),
        st.floats(allow_nan=False),
    )
    resource_lists = st.dictionaries(
        st.sampled_from([GPU, MEM, PCT, CORES, "cpu"]), maybe(quantities), max_size=4
    )
    containers = st.fixed_dictionaries(
        {"name": maybe(names)},
        optional={
            "resources": maybe(
                st.fixed_dictionaries(
                    {}, optional={"limits": maybe(resource_lists), "requests": maybe(resource_lists)}
                )
            ),
            "securityContext": maybe(st.fixed_dictionaries({"privileged": maybe(st.booleans())})),
        },
    )
    annotation_values = st.one_of(
        st.sampled_from(["1g,3g", "3g.20gb", "binpack", "spread", "[[[[", "[]", "", "1g," * 2000]),
        st.text(max_size=40),
    )
    annotations = st.dictionaries(st.sampled_from(ANNOTATIONS), maybe(annotation_values), max_size=4)
    metadata = st.fixed_dictionaries(
        {"name": maybe(names), "namespace": maybe(st.sampled_from(["team", "dynmig", ""]))},
        optional={
            "uid": maybe(st.text(max_size=12)),
            "annotations": maybe(annotations),
            "labels": maybe(
                st.dictionaries(
                    st.sampled_from(["dynmig.io/webhook", "app"]),
                    st.sampled_from(["ignore", "x"]),
                    max_size=2,
                )
            ),
            "deletionTimestamp": maybe(st.just("2026-01-01T00:00:00Z")),
        },
    )
    pod_specs = st.fixed_dictionaries(
        {},
        optional={
            "containers": maybe(st.lists(containers, max_size=3)),
            "initContainers": maybe(st.lists(containers, max_size=2)),
            "nodeName": maybe(names),
            "schedulerName": maybe(st.sampled_from(["", "dynmig-scheduler", "x"])),
        },
    )
    pods = st.fixed_dictionaries(
        {"apiVersion": st.just("v1"), "kind": st.just("Pod"), "metadata": maybe(metadata)},
        optional={"spec": maybe(pod_specs), "status": maybe(st.fixed_dictionaries({"phase": maybe(names)}))},
    )

    device_configs = st.one_of(
        st.sampled_from(
            [
                "- " * 500 + "x",
                "a: " + "[" * 2000,
                "a: &x [1]\nb: *x",
                "nvidia: {}",
                "",
                "nvidia:\n  migProfileAllowlist:\n  - models: [A100]\n    profiles: [1g.5gb, 3g.20gb]\n",
                "nvidia:\n  migProfileAllowlist:\n  - models: [A100]\n    profiles: [4g]\n",
            ]
        ),
        st.text(max_size=80),
        json_values.map(json.dumps),
    )
    configmaps = st.fixed_dictionaries(
        {
            "apiVersion": st.just("v1"),
            "kind": st.just("ConfigMap"),
            "metadata": maybe(
                st.fixed_dictionaries(
                    {
                        "name": st.just("dc"),
                        "namespace": st.just("dynmig"),
                        "labels": st.just({"dynmig.io/device-config": "true"}),
                    }
                )
            ),
            "data": maybe(st.fixed_dictionaries({"device-config.yaml": maybe(device_configs)})),
        }
    )

    def _request(obj: st.SearchStrategy, kind: str, resource: str) -> st.SearchStrategy:
        return st.fixed_dictionaries(
            {
                "uid": maybe(st.text(min_size=1, max_size=12)),
                "operation": maybe(st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT"])),
                "kind": maybe(st.fixed_dictionaries({"kind": maybe(st.just(kind))})),
                "resource": maybe(st.fixed_dictionaries({"resource": maybe(st.just(resource))})),
                "namespace": maybe(st.just("team")),
                "name": maybe(names),
                "userInfo": maybe(
                    st.fixed_dictionaries({"username": maybe(st.sampled_from(["alice", "system:admin"]))})
                ),
                "object": maybe(obj),
                "oldObject": maybe(obj),
                "dryRun": maybe(st.booleans()),
            }
        )

    admission_reviews = st.fixed_dictionaries(
        {
            "apiVersion": maybe(
                st.sampled_from(["admission.k8s.io/v1"] * 4 + ["admission.k8s.io/v1beta1", "v2"])
            ),
            "kind": maybe(st.just("AdmissionReview")),
            "request": maybe(
                st.one_of(_request(pods, "Pod", "pods"), _request(configmaps, "ConfigMap", "configmaps"))
            ),
        }
    )

    node_objects = st.fixed_dictionaries({"metadata": maybe(st.fixed_dictionaries({"name": maybe(names)}))})
    extender_args = st.fixed_dictionaries(
        {
            "Pod": maybe(pods),
            "NodeNames": maybe(st.one_of(st.none(), st.lists(names, max_size=5))),
            "Nodes": maybe(
                st.one_of(
                    st.none(), st.fixed_dictionaries({"items": maybe(st.lists(node_objects, max_size=3))})
                )
            ),
        }
    )
    binding_args = st.fixed_dictionaries(
        {
            "PodName": maybe(names),
            "PodNamespace": maybe(st.just("team")),
            "PodUID": maybe(st.text(max_size=12)),
            "Node": maybe(names),
        }
    )
    return SimpleNamespace(
        pods=pods,
        device_configs=device_configs,
        configmaps=configmaps,
        admission_reviews=admission_reviews,
        extender_args=extender_args,
        binding_args=binding_args,
    )


_typed, _hostile = _build(_as_is), _build(_wrong_sometimes)
pods = st.one_of(_typed.pods, _hostile.pods)
device_configs = _typed.device_configs
configmaps = st.one_of(_typed.configmaps, _hostile.configmaps)
admission_reviews = st.one_of(_typed.admission_reviews, _hostile.admission_reviews)
extender_args = st.one_of(_typed.extender_args, _hostile.extender_args)
binding_args = st.one_of(_typed.binding_args, _hostile.binding_args)
maybe = _wrong_sometimes


# Bodies malformed below the JSON level, and the few that are big on purpose.
raw_bodies = st.one_of(
    st.binary(max_size=64),
    st.sampled_from(
        [
            b"[" * 2000,
            b"{" * 5000,
            b'{"a":' * 3000,
            b"\xff\xfe{}",
            b"",
            b"null",
            b"[]",
            b"1e999999",
            b'"' + b"\\" * 1001,
            b"1" * 5000,
            json.dumps(
                {
                    "Pod": {"metadata": {"name": "p", "uid": "u", "namespace": "team"}},
                    "NodeNames": [f"n{i}" for i in range(20_000)],
                }
            ).encode(),
        ]
    ),
)


def body(doc: Any) -> bytes:
    return json.dumps(doc).encode()
