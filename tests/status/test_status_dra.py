"""`dynmig status` draws DRA nodes as it draws extender nodes: each MIG device kube-scheduler allocated
from dynmig's ResourceSlices shows under the pod its claim is reserved for, read from a simulated API
server over HTTP (resource.k8s.io/v1)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from kubernetes import client, config
from sim.apiserver import ApiServer

from base.policyfiles import default_allowlist
from dynmig.status.main import main
from mig.catalog import find_model
from mig.dra.devices import Gpu, Instance
from mig.dra.slices import steered_slices
from mig.types import Placement

DRIVER = "mig.dynmig.io"


def gpus() -> list[Gpu]:
    m = find_model("A100-SXM4-40GB")
    names = default_allowlist().profiles_for(m.nvml_name)
    return [
        Gpu(0, "GPU-dra-0", m, names, (Instance("3g.20gb", Placement(4, 4)),)),
        Gpu(1, "GPU-dra-1", m, names),
    ]


def allocated_device(slices: list[dict]) -> str:
    return next(
        d["name"]
        for s in slices
        for d in s["spec"].get("devices", [])
        if d["attributes"]["parentUUID"]["string"] == "GPU-dra-0"
        and d["attributes"]["placementStart"]["int"] == 4
        and d["attributes"]["profile"]["string"] == "3g.20gb"
    )


@pytest.fixture
def api() -> Iterator[ApiServer]:
    server = ApiServer().start()
    server.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})
    server.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "dra-1"}})
    slices = steered_slices("dra-1", DRIVER, gpus(), generation=1)
    for s in slices:
        server.create(s)
    claim = server.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "train-mig", "namespace": "ml"},
            "spec": {"devices": {"requests": [{"name": "mig", "exactly": {"deviceClassName": DRIVER}}]}},
        }
    )
    status = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "mig", "driver": DRIVER, "pool": "dra-1", "device": allocated_device(slices)}
                ]
            }
        },
        "reservedFor": [{"resource": "pods", "name": "train", "uid": "uid-train"}],
    }
    resource = client.ResourceV1Api(config.new_client_from_config(config_file=str(server.kubeconfig())))
    resource.patch_namespaced_resource_claim_status(claim["metadata"]["name"], "ml", {"status": status})
    try:
        yield server
    finally:
        server.stop()


def status(api: ApiServer, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["--kubeconfig", str(api.kubeconfig()), *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_dra_node_is_drawn_with_its_allocated_instance_under_the_reserving_pod(api, capsys):
    code, out, err = status(api, capsys)
    assert code == 0, err
    assert "NODE dra-1  2 MIG GPUs  DRA (mig.dynmig.io)  still fits:" in out
    assert "4:4   3g.20gb" in out and "ml/train" in out


def test_json_says_the_node_is_allocated_by_kube_scheduler_for_the_driver(api, capsys):
    _, text, _ = status(api, capsys, "-o", "json")
    (node,) = json.loads(text)["nodes"]
    assert node["allocator"] == "dra:mig.dynmig.io"
    assert [(s["start"], s["profile"], s["pod"]) for s in node["gpus"][0]["segments"]] == [
        (4, "3g.20gb", "ml/train")
    ]
    assert json.loads(text)["fits"] == {}  # the fleet's totals are the extender's: no extender node here


def test_another_driver_name_draws_no_dra_node(api, capsys):
    _, text, _ = status(api, capsys, "-o", "json", "--dra-driver", "gpu.nvidia.com")
    assert [(n["allocator"], n["gpus"]) for n in json.loads(text)["nodes"]] == [("extender", [])]


def test_a_driver_name_that_is_not_a_dns_subdomain_is_a_usage_error_naming_the_flag(api, capsys):
    with pytest.raises(SystemExit) as exited:
        status(api, capsys, "--dra-driver", "Not A Driver" * 20)
    assert exited.value.code == 2
    assert "--dra-driver" in capsys.readouterr().err
