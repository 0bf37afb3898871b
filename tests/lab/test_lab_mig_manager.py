"""MIG Manager workloads on the lab, through the official client: pods asking GPU Operator's `mixed`
strategy names (`nvidia.com/mig-1g.10gb: 1`, `nvidia.com/mig-3g.40gb: 2`) run with those profiles,
on an H100 and an A100-80GB (whose 1g.10gb differ in MiB), through the real admission webhook,
scheduler extender, kube-scheduler and device plugins; a name no allowed profile can meet is refused
at creation with a message."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client
from lab.cluster import Lab
from lab.kit import Kit

from tests import lab_testkit

NODES = "gpu-h100=1xH100-SXM5-80GB;gpu-a100=1xA100-SXM4-80GB"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    yield from lab_testkit.started(tmp_path_factory, "mig-manager-lab", NODES)


@pytest.fixture
def kit(lab: Lab) -> Iterator[Kit]:
    yield from lab_testkit.emptied(lab)


def mig_manager_pod(name: str, resource: str, count: int, gpu_type: str = "") -> dict:
    """A pod as a GPU Operator user writes it; `gpu_type` only pins the model for the test."""
    meta: dict = {"name": name}
    if gpu_type:
        meta["annotations"] = {"nvidia.com/use-gputype": gpu_type}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "containers": [{"name": "main", "image": "cuda", "resources": {"limits": {resource: str(count)}}}]
        },
    }


def placed(kit: Kit, name: str) -> list[tuple[str, str]]:
    kit.wait_phase(name, "Running", 60)
    return [(a.profile, kit.gpu(a.gpuUUID)[1].name) for a in kit.allocations(name)]


def test_a_mig_1g_10gb_pod_runs_with_a_1g_10gb_on_an_h100_and_on_an_a100_80gb(kit):
    kit.create(mig_manager_pod("on-h100", "nvidia.com/mig-1g.10gb", 1, "H100"))
    kit.create(mig_manager_pod("on-a100", "nvidia.com/mig-1g.10gb", 1, "A100"))
    assert placed(kit, "on-h100") == [("1g.10gb", "NVIDIA H100 80GB HBM3")]
    assert placed(kit, "on-a100") == [("1g.10gb", "NVIDIA A100-SXM4-80GB")]


def test_a_mig_3g_40gb_pod_asking_two_runs_with_two_3g_40gb_and_the_client_hears_the_translation(kit):
    created = kit.core.create_namespaced_pod(
        "default", mig_manager_pod("two-3g", "nvidia.com/mig-3g.40gb", 2), _preload_content=False
    )
    warning = created.headers.get("Warning") or ""
    assert (
        "container main: nvidia.com/mig-3g.40gb: 2 (MIG Manager's name) became nvidia.com/gpu: 2, "
        "nvidia.com/gpumem: "
    ) in warning
    assert "preferring 3g.40gb" in warning
    assert [profile for profile, _ in placed(kit, "two-3g")] == ["3g.40gb", "3g.40gb"]


def test_a_name_no_allowed_profile_can_meet_is_refused_at_creation_with_a_message(kit):
    with pytest.raises(client.ApiException) as refused:
        kit.create(mig_manager_pod("too-big", "nvidia.com/mig-7g.200gb", 1))
    assert refused.value.status == 403
    assert "nvidia.com/mig-7g.200gb names no MIG profile of any GPU dynmig knows" in str(refused.value.body)
    assert "nearest allowed profiles: 7g.186gb, 7g.180gb, 7g.141gb" in str(refused.value.body)
    assert kit.pod("too-big") is None
