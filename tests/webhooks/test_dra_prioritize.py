"""The extender's prioritize verb for DRA pods, over HTTP, with serve's DRA cache fed by the simulated
API server's watches of ResourceSlices and ResourceClaims."""

from __future__ import annotations

import pytest
from kubernetes import client
from starlette.testclient import TestClient
from waiting_testkit import eventually

from base.policyfiles import default_allowlist
from mig.catalog import find_model
from mig.dra import Gpu, Instance, steered_slices
from mig.dra.devices import mig_device
from mig.types import Placement
from webhooks.extender import MAX_BODY_BYTES

DRIVER = "mig.dynmig.io"
A100 = find_model("A100-SXM4-40GB")
ALLOWED = default_allowlist().profiles_for(A100.nvml_name)
SMALL = f'device.attributes["{DRIVER}"].profile == "1g.5gb"'


def gpu(node: str, minor: int, *instances: Instance) -> Gpu:
    return Gpu(minor, f"GPU-{node}-{minor}", A100, ALLOWED, instances)


def claim(name: str, expression: str = SMALL, count: int = 1, device_class: str = DRIVER) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "team"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": device_class,
                            "count": count,
                            "selectors": [{"cel": {"expression": expression}}],
                        },
                    }
                ]
            }
        },
    }


def pod(*claims: str, templated: dict[str, str] | None = None) -> dict:
    refs = [{"name": f"r{i}", "resourceClaimName": c} for i, c in enumerate(claims)]
    refs += [{"name": ref, "resourceClaimTemplateName": "small"} for ref in templated or {}]
    statuses = [{"name": ref, "resourceClaimName": c} for ref, c in (templated or {}).items()]
    return {
        "metadata": {"name": "p", "namespace": "team", "uid": "u1"},
        "spec": {"containers": [{"name": "c", "image": "x"}], "resourceClaims": refs},
        "status": {"resourceClaimStatuses": statuses},
    }


def args(p: dict, nodes: list[str]) -> dict:
    return {"Pod": p, "Nodes": None, "NodeNames": nodes}


@pytest.fixture
def dra(apiserver, start_service):
    """serve with --dra-driver and no page; three A100 nodes: node-a half used (by claim `held`),
    node-b empty, node-c full (by claim `whole`)."""
    service = start_service(dra_driver=DRIVER)
    half = Instance("3g.20gb", Placement(4, 4))
    full = Instance("7g.40gb", Placement(0, 8))
    layout = {
        "node-a": [gpu("node-a", 0, half)],
        "node-b": [gpu("node-b", 0)],
        "node-c": [gpu("node-c", 0, full)],
    }
    for node, gpus in layout.items():
        for s in steered_slices(node, DRIVER, gpus, 1):
            apiserver.create(s)
    resource = client.ResourceV1Api(apiserver.api_client("admin"))
    for name, node, inst in (("held", "node-a", half), ("whole", "node-c", full)):
        created = apiserver.create(claim(name))
        spec = A100.profile(inst.profile)
        device = mig_device(layout[node][0], spec, inst.placement).name
        created["status"] = {
            "allocation": {
                "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": node, "device": device}]}
            }
        }
        resource.replace_namespaced_resource_claim_status(name, "team", created)
    assert eventually(lambda: service.dra.claim("team", "whole") is not None)
    assert eventually(lambda: (service.dra.claim("team", "whole") or {}).get("status"))
    with TestClient(service.extender_app) as c:
        yield apiserver, service, c


def scores(c: TestClient, p: dict, nodes: list[str]) -> dict[str, int]:
    response = c.post("/prioritize", json=args(p, nodes))
    assert response.status_code == 200, response.text
    return {h["Host"]: h["Score"] for h in response.json()}


def test_a_small_claim_is_scored_highest_on_the_partly_used_node_and_zero_where_it_cannot_fit(dra):
    apiserver, service, c = dra
    apiserver.create(claim("mine"))
    assert eventually(lambda: service.dra.claim("team", "mine") is not None)
    points = scores(c, pod("mine"), ["node-a", "node-b", "node-c"])
    assert points["node-a"] == 10 and 0 < points["node-b"] < 10 and points["node-c"] == 0


def test_a_claim_from_a_template_is_found_through_the_pods_status(dra):
    apiserver, service, c = dra
    apiserver.create(claim("p-r0-abc"))
    assert eventually(lambda: service.dra.claim("team", "p-r0-abc") is not None)
    points = scores(c, pod(templated={"gpu": "p-r0-abc"}), ["node-b", "node-a"])
    assert points == {"node-a": 10, "node-b": 9}


def test_a_pod_without_claims_gets_no_scores(dra):
    _, _, c = dra
    assert scores(c, pod(), ["node-a", "node-b"]) == {}


@pytest.mark.parametrize(
    "why",
    [
        "a selector dynmig does not read",
        "a claim not mirrored yet",
        "a claim already allocated",
        "a node it does not know",
    ],
)
def test_what_cannot_be_read_exactly_scores_every_node_zero(dra, why):
    apiserver, service, c = dra
    nodes = ["node-a", "node-b"]
    if why == "a selector dynmig does not read":
        apiserver.create(claim("odd", f'device.attributes["{DRIVER}"].profile.startsWith("1g")'))
        assert eventually(lambda: service.dra.claim("team", "odd") is not None)
        p = pod("odd")
    elif why == "a claim not mirrored yet":
        p = pod("nowhere")
    elif why == "a claim already allocated":
        p = pod("held")
    else:
        apiserver.create(claim("mine"))
        assert eventually(lambda: service.dra.claim("team", "mine") is not None)
        assert scores(c, pod("mine"), ["node-x"]) == {"node-x": 0}
        return
    assert scores(c, p, nodes) == {"node-a": 0, "node-b": 0}


def test_a_claim_of_another_driver_is_not_ours_to_score(dra):
    apiserver, service, c = dra
    apiserver.create(claim("nic", 'device.attributes["nic.example.com"].speed == "100G"', device_class="nic"))
    assert eventually(lambda: service.dra.claim("team", "nic") is not None)
    assert scores(c, pod("nic"), ["node-a"]) == {}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ([], "JSON object"),
        ({"Pod": None, "NodeNames": ["a"]}, "Pod"),
        ({"Pod": {"metadata": {"name": "p"}}, "NodeNames": [1]}, "NodeNames[0]"),
        (
            {"Pod": {"metadata": {"name": "p"}, "spec": {"resourceClaims": [{"name": 3}]}}, "NodeNames": []},
            "resourceClaims[0].name",
        ),
        (
            {
                "Pod": {"metadata": {"name": "p"}, "spec": {"resourceClaims": [{"name": "x"}] * 129}},
                "NodeNames": [],
            },
            "resourceClaims",
        ),
    ],
)
def test_a_malformed_body_is_refused_with_a_400_naming_the_field(dra, body, field):
    _, _, c = dra
    response = c.post("/prioritize", json=body)
    assert response.status_code == 400 and field in response.text


def test_garbage_in_a_pods_claim_statuses_scores_every_node_zero(dra):
    _, _, c = dra
    p = pod(templated={"gpu": "p-r0-abc"})
    p["status"]["resourceClaimStatuses"] = [
        {"name": ["x"], "resourceClaimName": 5},
        "junk",
        {"name": "gpu", "resourceClaimName": 7},
    ]
    assert scores(c, p, ["node-a", "node-b"]) == {"node-a": 0, "node-b": 0}


def test_a_body_over_the_extender_limit_is_refused(dra):
    _, _, c = dra
    response = c.post("/prioritize", content=b"{" + b" " * (MAX_BODY_BYTES + 1) + b"}")
    assert response.status_code == 400 and "limit" in response.text


def test_without_a_dra_driver_prioritize_scores_nothing(service):
    with TestClient(service.extender_app) as c:
        assert c.post("/prioritize", json=args(pod("mine"), ["node-a"])).json() == []


@pytest.fixture
def scheduled(dra, tmp_path):
    """The simulated kube-scheduler with the chart's two extender entries' prioritize one pointing
    at serve's extender listener over TLS; schedule(claim_name) -> the node its pod was bound to."""
    import base64
    import datetime as dt

    from sim.scheduler import Scheduler, parse

    from certs.authority import ServiceIdentity, make_ca, make_serving
    from certs.reload import FileSource, TLSReloader
    from webhooks.runner import Extender, Listeners

    apiserver, service, _ = dra
    for name in ("node-a", "node-b", "node-c"):
        apiserver.create(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            }
        )
    apiserver.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": DRIVER},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        }
    )
    now = dt.datetime.now(dt.UTC)
    ca = make_ca(now)
    pair = make_serving(ca, ServiceIdentity("dynmig", "dynmig"), now)
    crt, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    crt.write_bytes(pair.cert_pem())
    key.write_bytes(pair.key_pem())
    tls = TLSReloader(FileSource(crt, key), registry=service.metrics.registry)
    tls.start()
    listeners = Listeners(
        service.app, service.metrics_app, tls=tls, extender=Extender(service.extender_app, tls=tls)
    ).start()
    entry = {
        "urlPrefix": listeners.extender_url,
        "prioritizeVerb": "prioritize",
        "weight": 5,
        "nodeCacheCapable": True,
        "enableHTTPS": True,
        "tlsConfig": {"caData": base64.b64encode(ca.cert_pem()).decode()},
        "ignorable": True,
    }
    doc = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": "dynmig-scheduler"}],
        "extenders": [entry],
    }
    scheduler = Scheduler(parse(doc), apiserver.api_client("kube-scheduler"), seed=3).start()
    assert scheduler.wait_synced()

    def schedule(claim_name: str) -> str:
        apiserver.create(claim(claim_name))
        assert eventually(lambda: service.dra.claim("team", claim_name) is not None)
        p = pod(claim_name)
        p.update({"apiVersion": "v1", "kind": "Pod"})
        p["metadata"] = {"name": claim_name, "namespace": "team"}
        p["spec"]["schedulerName"] = "dynmig-scheduler"
        p["spec"]["containers"][0]["resources"] = {"claims": [{"name": "r0"}]}
        del p["status"]
        apiserver.create(p)
        return wait_for_node(apiserver, claim_name)

    try:
        yield schedule
    finally:
        scheduler.stop()
        listeners.stop()
        tls.stop()


def wait_for_node(apiserver, name: str) -> str:
    from waiting_testkit import wait_for

    return wait_for(
        lambda: ((apiserver.get("pods", name, "team") or {}).get("spec") or {}).get("nodeName"), name
    )


def test_kube_scheduler_puts_a_dra_pod_on_the_node_dynmig_scores_highest(scheduled):
    # node-a's GPU is half used, node-b's empty, node-c's full: without scores the pick is a coin toss.
    # Two pods: node-a's slices list the two best 1g.5gb placements and nothing republishes them here.
    assert [scheduled(f"small-{i}") for i in range(2)] == ["node-a"] * 2
