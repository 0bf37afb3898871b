"""A container's GPU resources as quantities, combined as HAMi combines them, and sized per GPU model."""

from __future__ import annotations

import pytest

from base.policyfiles import default_allowlist
from mig.allowlist import ResourceNames
from mig.catalog import find_model
from mig.placement import (
    ContainerRequest,
    GpuState,
    Percent,
    Plan,
    PodRequest,
    RequestError,
    container_request,
    plan_pod,
)
from mig.placement.published import from_catalog

NAMES = ResourceNames()
GPU, MEM, PCT = NAMES.count, NAMES.memory, NAMES.memory_percentage
ALLOW = default_allowlist()


def read(limits=None, requests=None) -> ContainerRequest:
    return container_request("main", limits or {}, requests or {}, NAMES)


def gpu(model: str, uuid: str = "GPU-0", node: str = "node-a") -> GpuState:
    m = find_model(model)
    return GpuState(
        node, uuid, m.nvml_name, from_catalog(m, ALLOW.profiles_for(m.nvml_name)), memory_mb=m.memory_mib
    )


def profile_on(model: str, request: ContainerRequest) -> str:
    plan = plan_pod(PodRequest(containers=(request,)), [gpu(model)])
    assert isinstance(plan, Plan), plan
    return plan.devices[0].profile


@pytest.mark.parametrize("memory", ["8000", "8k", "8e3", "8.0k", "0.008M", 8000])
def test_a_pod_asking_8k_gets_the_same_profile_as_8000(memory):
    request = read({GPU: "1", MEM: memory})
    assert request == ContainerRequest(1, 8000)
    assert profile_on("A100-SXM4-80GB", request) == profile_on("A100-SXM4-80GB", ContainerRequest(1, 8000))


def test_binary_suffixes_count_as_their_value_in_mib():
    assert read({GPU: "1", MEM: "30Ki"}) == ContainerRequest(1, 30720)


def test_the_limit_wins_over_the_request_and_a_request_alone_is_read():
    assert read({GPU: "1", MEM: "8k"}, {MEM: "20k"}).memory_mib == 8000
    assert read(None, {GPU: "2", MEM: "4k"}) == ContainerRequest(2, 4000)


def test_percentage_25_on_an_a100_40gb_gets_a_3g_20gb():
    request = read({GPU: "1", PCT: "25"})
    assert request.memory == Percent(25)
    assert profile_on("A100-SXM4-40GB", request) == "3g.20gb"  # 25 % of 40,960 MiB = 10,240 MiB > 2g.10gb


def test_the_same_percentage_covers_a_different_profile_on_another_model():
    request = read({GPU: "1", PCT: "10"})
    assert profile_on("A100-SXM4-40GB", request) == "1g.5gb"  # 4,096 MiB
    assert profile_on("A100-SXM4-80GB", request) == "1g.10gb"  # 8,192 MiB


def test_a_pod_over_two_models_gets_the_profile_its_gpu_needs():
    request = PodRequest(containers=(read({GPU: "1", PCT: "25"}),))
    plan = plan_pod(request, [gpu("A100-SXM4-40GB", "GPU-40"), gpu("A100-SXM4-80GB", "GPU-80", "node-b")])
    assert isinstance(plan, Plan)
    (device,) = plan.devices
    assert device.profile == {"GPU-40": "3g.20gb", "GPU-80": "3g.40gb"}[device.gpu_uuid]


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ({GPU: "1", MEM: "8k", PCT: "50"}, ContainerRequest(1, 8000)),  # gpumem wins, as in HAMi
        ({GPU: "1", MEM: "0", PCT: "50"}, ContainerRequest(1, None, 50)),  # gpumem 0 counts as unset
        ({GPU: "1", PCT: "100"}, ContainerRequest(1)),  # 100 % is a whole GPU
        ({GPU: "1", PCT: "0"}, ContainerRequest(1)),  # 0 is ignored: a whole GPU
        ({GPU: "1"}, ContainerRequest(1)),
        ({MEM: "8k"}, ContainerRequest(0)),  # no device count: no devices here
    ],
)
def test_gpumem_and_percentage_combine_as_hami_combines_them(limits, expected):
    assert read(limits) == expected


def test_a_percentage_on_a_gpu_that_publishes_no_memory_is_refused_with_the_reason():
    m = find_model("A100-SXM4-40GB")
    bare = GpuState("node-a", "GPU-0", m.nvml_name, from_catalog(m, ALLOW.profiles_for(m.nvml_name)))
    refusal = plan_pod(PodRequest(containers=(read({GPU: "1", PCT: "25"}),)), [bare])
    assert not refusal.fits
    assert "publishes no total memory" in refusal.node_message("node-a")


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({GPU: "1.5"}, "container main: nvidia.com/gpu '1.5' is not a whole number"),
        ({GPU: "-1"}, "container main: nvidia.com/gpu must not be negative"),
        ({GPU: "1", MEM: "8 k"}, "container main: nvidia.com/gpumem: '8 k' is not a quantity"),
        ({GPU: "1", MEM: "8K"}, "container main: nvidia.com/gpumem: '8K' has an unknown suffix 'K'"),
        ({GPU: "1", MEM: "100m"}, "container main: nvidia.com/gpumem '100m' is not a whole number"),
        ({GPU: "1", MEM: "3Gi"}, "container main: nvidia.com/gpumem counts MiB: 3Gi is 3072"),
        (
            {GPU: "1", PCT: "101"},
            "container main: nvidia.com/gpumem-percentage 101 must be an integer between 0 and 100",
        ),
        (
            {GPU: "1", PCT: "12.5"},
            "container main: nvidia.com/gpumem-percentage '12.5' is not a whole number",
        ),
        ({GPU: ["1"]}, "container main: nvidia.com/gpu must be a quantity string"),
        ({GPU: True}, "container main: nvidia.com/gpu must be a quantity string"),
    ],
)
def test_a_bad_quantity_is_refused_naming_the_container_and_the_resource(limits, message):
    with pytest.raises(RequestError) as caught:
        read(limits)
    assert str(caught.value).startswith(message)
