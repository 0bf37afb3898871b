"""Allowlists people bring, on the whole default lab (gpu-a100: 2 × A100-SXM4-40GB, gpu-rtx: 8 × RTX
PRO 6000 Blackwell Server Edition): HAMi v2.10's chart default device config (rendered from HAMi's
chart, other vendors' sections included) and the two-entry example of HAMi's Dynamic MIG docs run a
pod on each node; a one-model policy runs one on its model's node, and the other node publishes no
MIG profile, which serve says in an Event and a metric instead of refusing anything."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from lab.chart import ChartError, helm_binary
from lab.cluster import Lab
from lab.kit import Kit, gpu_pod
from lab.nodes import DEFAULT_NODES, parse_nodes

from mig.annotations import USE_GPU_TYPE

FIXTURES = Path(__file__).parents[1] / "fixtures"


@pytest.fixture(
    scope="module",
    params=["hami-v2.10-chart-device-config.yaml", "hami-docs-two-entry.yaml", "one-model.yaml"],
)
def policy_lab(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    try:
        helm_binary()
    except ChartError as error:
        pytest.skip(str(error))
    lines: list[str] = []
    lab = Lab(
        parse_nodes(DEFAULT_NODES),
        tmp_path_factory.mktemp("lab"),
        policy=FIXTURES / request.param,
        echo=lines.append,
    ).start()
    lab.progress = lines  # type: ignore[attr-defined]
    lab.policy_name = request.param  # type: ignore[attr-defined]
    try:
        yield lab
    finally:
        lab.stop()


def test_a_lab_started_with_an_allowlist_people_bring_runs_a_pod_where_it_offers_mig_and_says_where_not(
    policy_lab,
):
    kit = Kit(policy_lab)
    one_model = policy_lab.policy_name == "one-model.yaml"
    wanted = {"on-a100": ("A100", "gpu-a100", "1g.5gb")}
    if not one_model:
        wanted["on-rtx"] = ("RTX", "gpu-rtx", "1g.24gb")
    for name, (kind, _, _) in wanted.items():
        kit.create(gpu_pod(name, 4000, annotations={USE_GPU_TYPE: kind}))

    for name, (_, node, profile) in wanted.items():
        pod = kit.wait_phase(name, timeout=60)
        assert pod["spec"]["nodeName"] == node
        assert [a.profile for a in kit.allocations(name)] == [profile]
    bare = [line for line in policy_lab.progress if "the policy offers no MIG profile" in line]
    assert [("gpu-rtx:" in line) for line in bare] == ([True] if one_model else [])
    if one_model:
        said_by_serve(policy_lab, kit)
    kit.delete_all()


def said_by_serve(lab: Lab, kit: Kit) -> None:
    """serve checks a policy against the fleet at load, at each reload and when a node registers
    later (here the nodes registered after serve started): it says which node publishes no MIG
    profile, and refuses nothing for it."""
    kit.create(gpu_pod("after-edit", 4000, annotations={USE_GPU_TYPE: "A100"}))
    serve = Kit(lab, namespace="dynmig")

    event = serve.wait(
        lambda: next((e for e in serve.events() if e["reason"] == "DeviceConfigFleetFindings"), None),
        30,
        "serve's DeviceConfigFleetFindings event",
    )
    assert event["type"] == "Warning" and "node gpu-rtx publishes no MIG profile" in event["message"]
    kit.wait_phase("after-edit", timeout=60)
