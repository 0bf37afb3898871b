"""GPU-instance profile discovery (HAMi's discovery sequence) across GPU models."""

from __future__ import annotations

import ctypes

import pynvml
import pytest
from nvml_testkit import A30, A100, H100, RTX, THREE_MODELS, create_gi, find_model, placements


@pytest.mark.parametrize("model", (*THREE_MODELS, A30))
def test_enumerating_profile_enums_finds_exactly_the_catalog_profiles(node, model):
    node(model)
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    found = {}
    for enum in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, enum)
        except pynvml.NVMLError_NotSupported:
            continue
        found[info.name] = (enum, info.id, info.memorySizeMB, info.sliceCount, info.instanceCount)
    catalog = find_model(model)
    assert found == {
        f"MIG {p.name}": (p.enum, p.profile_id, p.memory_mib, p.slice_count, p.instance_count)
        for p in catalog.profiles
    }
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT)


@pytest.mark.parametrize("model", THREE_MODELS)
def test_v1_and_v2_profile_info_agree_and_v2_carries_its_version_and_name(node, model):
    node(model)
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    spec = find_model(model).profiles[0]
    v1 = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, spec.enum, version=1)
    v2 = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, spec.enum)
    by_id = pynvml.nvmlDeviceGetGpuInstanceProfileInfoById(handle, spec.profile_id)
    assert (v1.id, v1.multiprocessorCount, v1.copyEngineCount) == (
        spec.profile_id,
        spec.sm_count,
        spec.engines.copy,
    )
    # _PrintableStructure decodes char arrays: `name` reads as str in this pynvml
    assert v2.version == pynvml.nvmlGpuInstanceProfileInfo_v2 and v2.name == f"MIG {spec.name}"
    assert (v2.id, v2.name, v2.memorySizeMB) == (by_id.id, by_id.name, v1.memorySizeMB)
    assert v2.isP2pSupported == 0


def test_a_v2_struct_with_a_wrong_version_is_a_version_mismatch(node):
    node(A100)
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetGpuInstanceProfileInfoV")
    info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
    info.version = 1
    assert (
        fn(pynvml.nvmlDeviceGetHandleByIndex(0), 0, ctypes.byref(info))
        == pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    )


@pytest.mark.parametrize("model", (*THREE_MODELS, A30))
def test_possible_placements_are_the_catalog_placements_and_do_not_shrink_when_occupied(node, model):
    node(model)
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    catalog = find_model(model)
    for spec in catalog.profiles:
        assert placements(handle, spec.profile_id) == [(p.start, p.size) for p in spec.placements]
    smallest = catalog.profiles[0]
    first = smallest.placements[0]
    create_gi(handle, smallest.profile_id, first.start, first.size)
    assert placements(handle, smallest.profile_id) == [(p.start, p.size) for p in smallest.placements]


def test_a_placement_array_smaller_than_the_list_is_insufficient_size(node):
    node(A100)
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    array = (pynvml.c_nvmlGpuInstancePlacement_t * 2)()
    count = ctypes.c_uint(2)
    with pytest.raises(pynvml.NVMLError_InsufficientSize):
        pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, 19, array, ctypes.byref(count))
    assert count.value == 7


def test_placements_are_listed_even_with_mig_disabled_but_profile_info_is_not_supported(node):
    node({"gpus": [{"model": H100, "mig": False}]})
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert placements(handle, 19) == [(s, 1) for s in range(7)]
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, 0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, 19)
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(handle) == 0


@pytest.mark.parametrize(
    "model, small, big, after",
    [
        # after one smallest instance at slot 0: how many of the big profile still fit
        (A100, "1g.5gb", "3g.20gb", 1),
        (H100, "1g.10gb", "2g.20gb", 2),
        (RTX, "1g.24gb", "2g.48gb", 1),
    ],
)
def test_remaining_capacity_follows_occupancy(node, model, small, big, after):
    node(model)
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    catalog = find_model(model)
    small_spec, big_spec = catalog.profile(small), catalog.profile(big)
    assert (
        pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, small_spec.profile_id)
        == small_spec.instance_count
    )
    assert (
        pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, big_spec.profile_id)
        == big_spec.instance_count
    )
    create_gi(handle, small_spec.profile_id, 0, small_spec.placement_size)
    assert (
        pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, small_spec.profile_id)
        == small_spec.instance_count - 1
    )
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, big_spec.profile_id) == after
    full = max(catalog.profiles, key=lambda p: p.placement_size)
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, full.profile_id) == 0
