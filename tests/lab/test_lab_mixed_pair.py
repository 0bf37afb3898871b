"""examples/mixed-pair.yaml on the lab's A100 node (two empty A100-SXM4-40GB): the 1g.5gb and the
3g.20gb share one GPU and the other stays whole, through the real scheduler extender, kube-scheduler
and device plugins, as the example says they can."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from lab.cluster import Lab
from lab.kit import Kit

from tests import lab_testkit

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mixed-pair.yaml"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    yield from lab_testkit.started(tmp_path_factory, "pair-lab", "gpu-a100=2xA100-SXM4-40GB")


@pytest.fixture
def kit(lab: Lab) -> Iterator[Kit]:
    yield from lab_testkit.emptied(lab)


def test_the_mixed_pair_shares_one_a100_and_leaves_the_other_whole(lab, kit):
    pods = list(yaml.safe_load_all(EXAMPLE.read_text()))
    for pod in pods:  # quantities as the API writes them (kubectl sends YAML's numbers as strings too)
        for c in pod["spec"]["containers"]:
            c["resources"]["limits"] = {k: str(v) for k, v in c["resources"]["limits"].items()}
    for pod in pods:  # in the file's order: the 1g.5gb first, then the 3g.20gb
        kit.create(pod)
        kit.wait_phase(pod["metadata"]["name"], "Running", 60)
    small, large = (kit.allocations(p["metadata"]["name"]) for p in pods)
    assert [a.profile for a in small] == ["1g.5gb"]
    assert [a.profile for a in large] == ["3g.20gb"]
    assert small[0].gpuUUID == large[0].gpuUUID
    gpus = {g.uuid for _, g in kit.gpus_of_model("A100")}
    assert len(gpus) == 2
    (other,) = gpus - {small[0].gpuUUID}
    holders = [a for p in pods for a in kit.allocations(p["metadata"]["name"]) if a.gpuUUID == other]
    assert holders == []  # the other A100 holds nothing: a whole-GPU pod still fits there


def test_pods_asking_a_memory_percentage_or_gpucores_run_through_kube_schedulers_resource_fit(lab, kit):
    """No node advertises nvidia.com/gpumem-percentage or nvidia.com/gpucores: kube-scheduler's
    NodeResourcesFit leaves them to the extender only because the chart lists them ignoredByScheduler."""
    for name, limits in (
        ("tenth", {"nvidia.com/gpumem-percentage": "10"}),
        ("cored", {"nvidia.com/gpumem": "4000", "nvidia.com/gpucores": "30"}),
    ):
        kit.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}]},
            }
        )
        kit.wait_phase(name, "Running", 60)
        assert [a.profile for a in kit.allocations(name)] == ["1g.5gb"]
