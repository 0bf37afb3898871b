"""The mutating webhook's matchConditions, as the chart renders them and a CEL engine evaluates them:
the API server sends `/mutate` exactly the pod creations admission acts on, so with the chart's
`failurePolicy: Fail` a serve outage refuses a GPU pod (its controller creates it again) and blocks
no other pod."""

from __future__ import annotations

import base64
import copy
import json
import socket
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client
from kubernetes.client.rest import ApiException
from sim.apiserver import cel

from mig.allowlist import device_config
from mig.annotations import MIG_ALLOCATIONS
from mig.placement.request import MAX_ANNOTATION_TEXT, SCHEDULING_ANNOTATIONS
from tests.charts.chart_testkit import CHART, NAMESPACE, helm, one, render
from tests.sim.https_testkit import make_pki
from webhooks.admission import AdmissionPolicy, decide
from webhooks.review import Decision, parse_review

FILES_CONFIG = (CHART / "files" / "device-config.yaml").read_text()
# a release that renames the count resource and serves two profiles as DRA extended resources
RENAMED = {
    "deviceConfig": {
        "content": FILES_CONFIG.replace(
            "resourceCountName: nvidia.com/gpu", "resourceCountName: example.com/vgpu"
        )
    },
    "draPlugin": {"enabled": True, "extendedResources": {"profiles": ["1g.5gb", "2g.10gb"]}},
}


def render_values(tmp: Path, values: dict) -> list[dict]:
    path = tmp / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    done = helm(
        "template", "dynmig", str(CHART), "--namespace", NAMESPACE, "--kube-version", "1.31", "-f", str(path)
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


class Release:
    """What one rendered release decides: the webhook's condition, and `/mutate` as serve runs it
    with the rendered device config and arguments."""

    def __init__(self, docs: list[dict]):
        hook = one(docs, "MutatingWebhookConfiguration")["webhooks"][0]
        self.conditions = [c["expression"] for c in hook["matchConditions"]]
        config = device_config(
            one(docs, "ConfigMap", "-device-config")["data"]["device-config.yaml"], "chart"
        )
        server = next(
            c
            for c in one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
            if c["name"] == "server"
        )
        dra = frozenset(
            a.split("=", 1)[1] for a in server.get("args", []) if a.startswith("--dra-extended-resource=")
        )
        self.count = config.resources.count
        self.policy = AdmissionPolicy(device_config=lambda: config, dra_resources=dra)

    def sent(self, pod: dict) -> bool:
        request = cel.request_of({"operation": "CREATE", "userInfo": {"username": "alice"}})
        return all(
            cel.evaluate_bool(e, {"object": pod, "oldObject": None, "request": request})
            for e in self.conditions
        )

    def mutate(self, pod: dict) -> Decision:
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": "team",
                "name": pod["metadata"]["name"],
                "operation": "CREATE",
                "userInfo": {"username": "alice"},
                "object": pod,
            },
        }
        return decide("mutate", parse_review(json.dumps(review).encode()), self.policy)


@pytest.fixture(scope="module")
def default_release() -> Release:
    return Release(render("1.31"))


@pytest.fixture(scope="module")
def renamed_release(tmp_path_factory) -> Release:
    return Release(render_values(tmp_path_factory.mktemp("renamed"), RENAMED))


def make_pod(
    containers: list[dict],
    init: list[dict] | None = None,
    annotations: dict | None = None,
    scheduler: str | None = None,
    **spec: Any,
) -> dict:
    meta: dict[str, Any] = {"name": "p", "namespace": "team"}
    if annotations is not None:
        meta["annotations"] = annotations
    body: dict[str, Any] = {"containers": containers, **spec}
    if init is not None:
        body["initContainers"] = init
    if scheduler is not None:
        body["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body}


def box(limits: dict | None = None, requests: dict | None = None, **extra: Any) -> dict:
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    return {"name": "c", "image": "cuda", "resources": resources, **extra}


# ---- every pod left out is one /mutate would leave as it is

RESOURCE_NAMES = [
    "nvidia.com/gpu",
    "example.com/vgpu",
    "nvidia.com/gpumem",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/gpucores",
    "nvidia.com/mig-1g.5gb",
    "nvidia.com/mig-2g.10gb",
    "nvidia.com/mig-3g.20gb",
    "nvidia.com/mig-9g.1tb",
    "nvidia.com/gpus",
    "amd.com/gpu",
    "cpu",
    "memory",
]
QUANTITIES = st.sampled_from(["0", "1", "2", "4000", "50", "1Gi", "-1", "x"])
RESOURCE_MAPS = st.none() | st.dictionaries(st.sampled_from(RESOURCE_NAMES), QUANTITIES, max_size=3)
CONTAINERS = st.builds(
    box,
    limits=RESOURCE_MAPS,
    requests=RESOURCE_MAPS,
    securityContext=st.sampled_from([{}, {"privileged": True}]),
)
ANNOTATION_KEYS = [
    MIG_ALLOCATIONS,
    *SCHEDULING_ANNOTATIONS,
    "example.com/team",
    "nvidia.com/mig-profile-preferences",
]
ANNOTATION_VALUES = st.sampled_from(
    ["3g", "1g,2g", "binpack", "A100", "", "9z", "x" * (MAX_ANNOTATION_TEXT + 1)]
)
PODS = st.builds(
    make_pod,
    containers=st.lists(CONTAINERS, min_size=1, max_size=2),
    init=st.none() | st.lists(CONTAINERS, max_size=1),
    annotations=st.none() | st.dictionaries(st.sampled_from(ANNOTATION_KEYS), ANNOTATION_VALUES, max_size=2),
    scheduler=st.sampled_from([None, "", "default-scheduler", "dynmig-scheduler", "volcano"]),
    nodeName=st.sampled_from([None, "node-a"]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pod=PODS)
def test_every_pod_the_mutating_webhook_is_not_sent_is_one_mutate_leaves_unchanged(
    default_release, renamed_release, pod
):
    # (spec.nodeName None: the key is present but null, as a client may send it)
    for release in (default_release, renamed_release):
        if not release.sent(pod):
            decision = release.mutate(pod)
            assert (decision.allowed, decision.result, decision.patch) == (True, "skipped", []), (
                pod,
                decision,
            )


ACTED_ON = {
    "a count": make_pod([box(limits={"nvidia.com/gpu": "1"})]),
    "a count at 0": make_pod([box(requests={"nvidia.com/gpu": "0"})]),
    "memory alone (the count defaults)": make_pod([box(limits={"nvidia.com/gpumem": "4000"})]),
    "a memory percentage": make_pod([box(limits={"nvidia.com/gpumem-percentage": "50"})]),
    "a count in an init container": make_pod([box()], init=[box(limits={"nvidia.com/gpu": "1"})]),
    "a MIG Manager profile": make_pod([box(limits={"nvidia.com/mig-1g.5gb": "1"})]),
    "a MIG Manager profile no GPU has": make_pod([box(limits={"nvidia.com/mig-9g.1tb": "1"})]),
    "a count, privileged": make_pod(
        [box(limits={"nvidia.com/gpu": "1"}, securityContext={"privileged": True})]
    ),
    "a count, with nodeName": make_pod([box(limits={"nvidia.com/gpu": "1"})], nodeName="node-a"),
    "memory, dynmig's scheduler named": make_pod(
        [box(limits={"nvidia.com/gpumem": "4000"})], scheduler="dynmig-scheduler"
    ),
    "a forged reservation, no GPU": make_pod([box()], annotations={MIG_ALLOCATIONS: "x"}),
    "a preference no profile matches, no GPU": make_pod(
        [box()], annotations={"nvidia.com/mig-profile-preference": "9z"}
    ),
    "an over-long gpu type, another scheduler": make_pod(
        [box()], annotations={"nvidia.com/use-gputype": "A" * (MAX_ANNOTATION_TEXT + 1)}, scheduler="volcano"
    ),
}


@pytest.mark.parametrize("pod", ACTED_ON.values(), ids=ACTED_ON.keys())
def test_each_pod_mutate_changes_or_refuses_is_sent_to_the_mutating_webhook(default_release, pod):
    decision = default_release.mutate(pod)
    assert decision.result in ("patched", "denied"), decision
    assert default_release.sent(pod)


def test_a_renamed_count_is_sent_and_a_dra_extended_resource_is_left_to_kube_scheduler(renamed_release):
    assert renamed_release.count == "example.com/vgpu"
    renamed = make_pod([box(limits={"example.com/vgpu": "1"})])
    dra = make_pod([box(limits={"nvidia.com/mig-1g.5gb": "1"})])
    translated = make_pod([box(limits={"nvidia.com/mig-3g.20gb": "1"})])
    assert renamed_release.mutate(renamed).result == "patched" and renamed_release.sent(renamed)
    assert renamed_release.mutate(dra).result == "skipped" and not renamed_release.sent(dra)
    assert renamed_release.mutate(translated).result == "patched" and renamed_release.sent(translated)


def test_the_condition_names_every_annotation_mutate_checks_on_any_pod(default_release):
    (condition,) = default_release.conditions
    listed = json.loads(condition[condition.index("k in [") + 5 : condition.index("]") + 1])
    assert sorted(listed) == sorted([MIG_ALLOCATIONS, *SCHEDULING_ANNOTATIONS])


def test_managed_resources_and_the_condition_share_the_device_configs_names(tmp_path):
    docs = render_values(tmp_path, {"deviceConfig": RENAMED["deviceConfig"]})
    config = yaml.safe_load(one(docs, "ConfigMap", "-scheduler-config")["data"]["config.yaml"])
    managed = [m["name"] for m in config["extenders"][0]["managedResources"]]
    assert managed == [
        "example.com/vgpu",
        "nvidia.com/gpumem",
        "nvidia.com/gpumem-percentage",
        "nvidia.com/gpucores",
    ]


# ---- serve stopped: the API server's answer


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def serve_stopped(apiserver, tmp_path) -> client.CoreV1Api:
    """The chart's MutatingWebhookConfiguration (defaults) with its Service routed to a port where no
    serve answers; returns alice's pods API."""
    config = copy.deepcopy(one(render("1.31"), "MutatingWebhookConfiguration"))
    service = config["webhooks"][0]["clientConfig"]["service"]
    ca, _, _ = make_pki(tmp_path, f"{service['name']}.{service['namespace']}.svc")
    apiserver.register_service(service["namespace"], service["name"], "127.0.0.1", closed_port())
    config["webhooks"][0]["clientConfig"]["caBundle"] = base64.b64encode(ca).decode()
    apiserver.create(config)
    return client.CoreV1Api(apiserver.api_client("alice"))


def test_with_serve_stopped_a_pod_without_gpu_resources_is_created_and_a_gpu_pods_create_is_refused(
    serve_stopped,
):
    plain = make_pod([box(limits={"cpu": "1"})])
    other_scheduler = make_pod([box(limits={"nvidia.com/gpu": "1"})], scheduler="volcano")
    for name, pod in (("plain", plain), ("for-volcano", other_scheduler)):
        serve_stopped.create_namespaced_pod("default", {**pod, "metadata": {"name": name}})
    with pytest.raises(ApiException) as refused:
        serve_stopped.create_namespaced_pod(
            "default", {**make_pod([box(limits={"nvidia.com/gpu": "1"})]), "metadata": {"name": "gpu"}}
        )
    assert refused.value.status == 500
    message = json.loads(refused.value.body)["message"]
    assert message.startswith('Internal error occurred: failed calling webhook "pods.mutate.dynmig.io": '), (
        message
    )
    assert [p.metadata.name for p in serve_stopped.list_namespaced_pod("default").items] == [
        "for-volcano",
        "plain",
    ]
