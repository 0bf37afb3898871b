"""The page as `dynmig serve` wires it: off unless asked for (flag, variable, chart value), and when
on it shows what serve's own cache holds, with bounded work however many pods wait."""

from __future__ import annotations

import subprocess
import warnings
from collections.abc import Iterator
from html.parser import HTMLParser
from typing import Any

import pytest
import yaml
from lab.chart import CHART, ChartError, helm_binary
from registration_testkit import registration
from waiting_testkit import eventually

from base.policyfiles import DEFAULT_POLICY, load_device_config
from mig.annotations import NODE_REGISTER
from webhooks.config import ServeConfig, StaticDeviceConfig, parse_args
from webhooks.main import Service
from webhooks.page.render import MAX_PENDING

with warnings.catch_warnings():  # starlette suggests httpx2; the httpx-based client works the same
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

MODEL = "A100-SXM4-40GB"


def mig_node(name: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "annotations": {NODE_REGISTER: registration(name, MODEL, gpus)}},
    }


def waiting_pod(name: str, memory: int) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(memory)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team"},
        "spec": {
            "schedulerName": "dynmig-scheduler",
            "containers": [{"name": "main", "image": "cuda", "resources": {"limits": limits}}],
        },
    }


class Classes(HTMLParser):
    def __init__(self, text: str):
        super().__init__()
        self.found: list[dict[str, str]] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.found.append({k: v or "" for k, v in attrs})

    def of(self, name: str) -> list[dict[str, str]]:
        return [a for a in self.found if name in a.get("class", "").split()]


@pytest.fixture
def page_service(apiserver) -> Iterator[Service]:
    apiserver.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})
    cfg = ServeConfig(leader_elect=False, page=True)
    config = StaticDeviceConfig(load_device_config(DEFAULT_POLICY))
    service = Service(cfg, api_client=apiserver.api_client("scheduler"), device_config=config).start(wait=10)
    try:
        yield service
    finally:
        service.stop()


def test_the_page_is_off_unless_asked_for_by_flag_or_variable():
    assert parse_args([]).page is False
    assert parse_args(["--page=true"]).page is True
    assert parse_args([], environ={"DYNMIG_PAGE": "true", "DYNMIG_PAGE_PORT": "8080"}).page_port == 8080
    assert parse_args([], environ={"DYNMIG_PAGE": "true"}).page is True
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--page=maybe"])
    assert exit_.value.code == 2


def test_a_serve_without_the_page_has_no_page_app(apiserver):
    config = StaticDeviceConfig(load_device_config(DEFAULT_POLICY))
    service = Service(
        ServeConfig(leader_elect=False), api_client=apiserver.api_client("scheduler"), device_config=config
    )
    assert service.page_app is None


def test_the_page_shows_the_gpus_and_waiting_pods_of_serves_cache_and_lists_a_bounded_number(
    apiserver, page_service
):
    apiserver.create(mig_node("n1", 2))
    for i in range(MAX_PENDING + 30):
        apiserver.create(waiting_pod(f"w{i:03d}", 5000))
    with TestClient(page_service.page_app) as http:

        def page() -> Classes:
            return Classes(http.get("/").text)

        assert eventually(lambda: len(page().of("gpu")) == 2 and len(page().of("pending-pod")) == MAX_PENDING)
        shown = page()
        assert [a["data-gpu"] for a in shown.of("gpu")] == ["GPU-n1-0", "GPU-n1-1"]
        assert len(shown.of("free")) == 16  # two A100s, 8 free slices each
        text = http.get("/").text
        assert "29 more pods wait for a node and are not shown" in text  # 101 diagnosed, 100 listed
        assert "and 1 more" in text


# ---------------------------------------------------------------- the chart


def render(*sets: str) -> list[dict[str, Any]]:
    try:
        helm = helm_binary()
    except ChartError as error:
        pytest.skip(str(error))
    argv = [helm, "template", "dynmig", str(CHART), "--namespace", "dynmig"]
    for s in sets:
        argv += ["--set", s]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def server_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    return next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "server")


def service_ports(docs: list[dict[str, Any]]) -> dict[str, int]:
    svc = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "dynmig")
    return {p["name"]: p["port"] for p in svc["spec"]["ports"]}


def test_the_chart_leaves_the_page_off_by_default_with_no_port_for_it():
    docs = render()
    server = server_container(docs)
    assert not [a for a in server["args"] if a.startswith("--page")]
    assert "page" not in {p["name"] for p in server["ports"]}
    assert "page" not in service_ports(docs)
    assert parse_args(server["args"][1:]).page is False


def test_the_chart_turns_the_page_on_with_its_port_in_the_pod_the_service_and_the_network_policy():
    docs = render("server.page.enabled=true", "server.page.port=9500", "networkPolicy.enabled=true")
    server = server_container(docs)
    cfg = parse_args(server["args"][1:])  # what serve makes of the chart's args
    assert (cfg.page, cfg.page_port) == (True, 9500)
    assert {"name": "page", "containerPort": 9500, "protocol": "TCP"} in server["ports"]
    assert service_ports(docs)["page"] == 9500
    policy = next(d for d in docs if d["kind"] == "NetworkPolicy")
    assert 9500 in [p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]]


def held_pod(name: str, node: str, gpu: str, start: int, realized: bool = False) -> dict[str, Any]:
    """A pod on `node` holding a 1g.5gb at `start` of `gpu`, as the scheduler's annotations record it
    (`realized`: with the MIG instance the device plugin created for it)."""
    from mig.annotations import (
        DEVICES_ALLOCATED,
        MIG_ALLOCATIONS,
        VGPU_NODE,
        ContainerDevice,
        MigAllocation,
        encode_allocations,
        encode_devices,
    )

    allocation = MigAllocation.model_validate(
        {
            "containerIndex": 0,
            "deviceIndex": 0,
            "gpuUUID": gpu,
            "profile": "1g.5gb",
            "placement": {"start": start, "size": 1},
            **({"migUUID": f"MIG-{name}", "gpuInstanceID": 7, "computeInstanceID": 0} if realized else {}),
        }
    )
    pod = waiting_pod(name, 4000)
    pod["metadata"]["uid"] = f"uid-{name}"
    pod["metadata"]["annotations"] = {
        VGPU_NODE: node,
        DEVICES_ALLOCATED: encode_devices([[ContainerDevice(gpu, "NVIDIA", 4000, 0)]]),
        MIG_ALLOCATIONS: encode_allocations([allocation]) or "",
    }
    pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": "Running"}
    return pod


def test_the_page_redraws_only_the_node_whose_pods_changed():
    from mig.allowlist import ResourceNames
    from webhooks.fleet import Fleet
    from webhooks.page.view import FleetPage

    fleet = Fleet()
    fleet.replace_nodes([mig_node("n1", 1), mig_node("n2", 1)])
    pods = [held_pod("a", "n1", "GPU-n1-0", 0, realized=True)]
    fleet.replace_pods(pods)
    page = FleetPage(fleet, lambda: pods, lambda: True, ResourceNames, "dynmig-scheduler")
    first = Classes(page())
    assert [a["data-pod"] for a in first.of("segment")] == ["team/a"]
    assert page.nodes_drawn == 2
    page()
    assert page.nodes_drawn == 2  # nothing changed: both sections reused
    pods.append(held_pod("b", "n2", "GPU-n2-0", 0))
    fleet.set_pod(pods[-1])
    shown = Classes(page())
    assert page.nodes_drawn == 3  # only n2 was drawn again
    assert sorted(a["data-pod"] for a in shown.of("segment")) == ["team/a", "team/b"]
    pods[0] = {**pods[0], "metadata": {**pods[0]["metadata"], "deletionTimestamp": "2026-12-01T00:00:00Z"}}
    shown = Classes(page())
    assert page.nodes_drawn == 4  # a terminating pod's node is drawn again: its phase changes
    phases = {a["data-pod"]: a["data-phase"] for a in shown.of("segment")}
    assert phases == {"team/a": "reclaiming", "team/b": "reserved"}


def test_the_page_tells_a_pod_pinned_to_a_full_node_that_no_node_it_may_run_on_has_room():
    from mig.allowlist import ResourceNames
    from webhooks.fleet import Fleet
    from webhooks.page.view import FleetPage

    full, free = mig_node("n1", 1), mig_node("n2", 1)
    full["metadata"]["labels"] = {"pool": "train"}
    fleet = Fleet()
    fleet.replace_nodes([full, free])
    holder = held_pod("a", "n1", "GPU-n1-0", 0, realized=True)
    pinned, loose = waiting_pod("pinned", 4000), waiting_pod("loose", 4000)
    for whole in (pinned, loose):  # no gpumem: a whole GPU, which n1's 1g.5gb leaves no room for
        del whole["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"]
    pinned["spec"]["nodeSelector"] = {"pool": "train"}
    pods = [holder, pinned, loose]
    fleet.replace_pods([holder])
    page = FleetPage(
        fleet, lambda: pods, lambda: True, ResourceNames, "dynmig-scheduler", nodes=lambda: [full, free]
    )
    fixes = {row["data-pod"]: row for row in Classes(page()).of("pending-pod")}
    assert fixes["team/loose"]["data-code"] == ""  # it fits now on n2
    assert fixes["team/pinned"]["data-code"] != ""
    assert (
        "no node this pod may run on has room for it (1 of 2 nodes refuse it: 1 not matching its nodeSelector"
        in page()
    )


def test_the_page_lists_a_pod_waiting_for_a_dra_claim_with_the_schedulers_reason():
    from mig.allowlist import ResourceNames
    from mig.dra.pending import pending_claim_pods
    from webhooks.fleet import Fleet
    from webhooks.page.view import FleetPage

    why = "0/2 nodes are available: 2 cannot allocate all claims."
    selector = {"cel": {"expression": 'device.attributes["mig.dynmig.io"].profile == "7g.80gb"'}}
    request = {"name": "mig", "exactly": {"deviceClassName": "mig.dynmig.io", "selectors": [selector]}}
    claim = {
        "metadata": {"namespace": "team", "name": "big-mig"},
        "spec": {"devices": {"requests": [request]}},
    }
    pod = {
        "metadata": {"namespace": "team", "name": "big", "uid": "u-big"},
        "spec": {"resourceClaims": [{"name": "mig", "resourceClaimName": "big-mig"}]},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "message": why}],
        },
    }
    page = FleetPage(
        Fleet(),
        lambda: [pod],
        lambda: True,
        ResourceNames,
        "dynmig-scheduler",
        dra_pending=lambda pods: pending_claim_pods(pods, [claim], "mig.dynmig.io"),
    )
    html = page()
    (row,) = Classes(html).of("pending-pod")
    assert row["data-pod"] == "team/big" and "cannot allocate all claims" in html
