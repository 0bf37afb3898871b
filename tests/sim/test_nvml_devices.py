"""Device-level NVML calls through the real pynvml wrappers: init, handles, names, memory, errors."""

from __future__ import annotations

import ctypes
import re

import pynvml
import pytest
from nvml_testkit import A100, H100, RTX, create_gi, find_model, full_ci
from sim.nvml import SimulatedNvml, SpecError


def test_a_node_spec_with_counts_gives_that_many_gpus_with_their_nvml_names(node):
    node({"gpus": [{"model": A100, "count": 2}, {"model": "RTX PRO 6000 Blackwell Server Edition"}]})
    assert pynvml.nvmlDeviceGetCount() == 3
    names = [pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(3)]
    assert names == [find_model(A100).nvml_name] * 2 + [find_model(RTX).nvml_name]


def test_gpu_uuids_are_deterministic_per_node_name_and_well_formed():
    first = SimulatedNvml({"node": "n1", "gpus": [{"model": H100, "count": 2}]}).gpu_uuids
    again = SimulatedNvml({"node": "n1", "gpus": [{"model": H100, "count": 2}]}).gpu_uuids
    other = SimulatedNvml({"node": "n2", "gpus": [{"model": H100, "count": 2}]}).gpu_uuids
    assert first == again and first != other and len(set(first)) == 2
    assert all(
        re.fullmatch(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", u) for u in first
    )


def test_an_explicit_gpu_uuid_is_what_nvml_reports_and_finds(node):
    uuid = "GPU-c08d91cb-e324-655c-71ba-7570956445bc"
    node({"gpus": [{"model": H100, "uuid": uuid}]})
    handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
    assert pynvml.nvmlDeviceGetUUID(handle) == uuid
    assert pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0)) == uuid


@pytest.mark.parametrize(
    "spec, field",
    [
        ({"gpus": "A100"}, "gpus"),
        ({"gpus": [{"model": "Z9000"}]}, "gpus[0].model"),
        ({"gpus": [{"model": A100, "count": 0}]}, "gpus[0].count"),
        ({"gpus": [{"model": A100, "uuid": "gpu-1"}]}, "gpus[0].uuid"),
        ({"gpus": [{"model": A100, "colour": "red"}]}, "gpus[0]"),
        ({"gpus": [{"model": A100, "count": 10**9}]}, "gpus[0].count"),
        ({"gpus": [{"model": A100, "driver": "R999"}]}, "gpus[0].driver"),
        ({"gpus": [{"model": A100, "driver": ["R570"]}]}, "gpus[0].driver"),
        ({"gpus": [{"model": A100}], "driver": "x" * 10_000}, "driver"),
        ({"gpus": [{"model": A100}], "gi_ids": "random"}, "gi_ids"),
        ({"gpus": [{"model": A100}], "shuffle_gi_ids": "seven"}, "shuffle_gi_ids"),
        ({"gpus": [{"model": A100}], "mig_uuids": "sometimes"}, "mig_uuids"),
        ({"gpus": [{"model": A100}], "gpu": []}, "unknown fields ['gpu']"),
    ],
)
def test_a_bad_node_spec_names_the_field_to_fix(spec, field):
    with pytest.raises(SpecError, match=re.escape(field)):
        SimulatedNvml(spec)


@pytest.mark.parametrize(
    "spec, version",
    [
        ({"gpus": [{"model": A100}]}, "550.127.05"),
        ({"gpus": [{"model": A100}], "driver": "R470"}, "470.256.02"),
        ({"gpus": [{"model": "B200"}], "driver": "570.86"}, "570.86.15"),
        ({"gpus": [{"model": A100, "driver": "R450"}], "driver": "R470"}, "450.216.04"),
    ],
)
def test_the_driver_version_is_the_node_release_of_its_first_gpu(node, spec, version):
    node(spec)
    assert pynvml.nvmlSystemGetDriverVersion() == version


def test_an_older_driver_release_reports_its_own_memory_and_lacks_later_profiles(node):
    node({"gpus": [{"model": A100}], "driver": "R450"})
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    two_g = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE)
    assert two_g.memorySizeMB == 9856
    for enum in (
        pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1,
        pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2,
    ):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, enum)


def test_an_early_gb200_driver_names_its_1g_profile_1g_24gb(node):
    node({"gpus": [{"model": "GB200"}], "driver": "R570"})
    info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(
        pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE
    )
    assert (info.name, info.id, info.memorySizeMB) == ("MIG 1g.24gb", 19, 20480)


@pytest.mark.parametrize(
    "model, name",
    [
        ("RTX-PRO-6000-WS", "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"),
        ("RTX PRO 6000 Blackwell Max-Q", "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"),
        ("RTX PRO 6000", "NVIDIA RTX PRO 6000 Blackwell Server Edition"),
    ],
)
def test_every_rtx_pro_6000_blackwell_edition_is_a_mig_gpu_with_a_12_slice_axis(node, model, name):
    node(model)
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetName(handle) == name
    info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, pynvml.NVML_GPU_INSTANCE_PROFILE_4_SLICE)
    count = ctypes.c_uint(0)
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, info.id, None, ctypes.byref(count))
    assert count.value == 1 and info.sliceCount == 4


def test_an_unknown_uuid_is_not_found_and_a_bad_index_is_an_invalid_argument(node):
    node(A100)
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000")
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetHandleByIndex(1)


def test_memory_info_reports_the_model_total_in_bytes(node):
    node(RTX)
    memory = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0))
    assert memory.total == find_model(RTX).memory_mib * 1024 * 1024
    assert memory.free + memory.used == memory.total
    v2 = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0), version=pynvml.nvmlMemory_v2)
    assert v2.total == memory.total


def test_calls_before_init_and_after_the_last_shutdown_are_uninitialized():
    sim = SimulatedNvml({"gpus": [{"model": A100}]}).install()
    try:
        with pytest.raises(pynvml.NVMLError_Uninitialized):
            pynvml.nvmlDeviceGetCount()
        pynvml.nvmlInit()
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        assert pynvml.nvmlDeviceGetCount() == 1  # NVML is reference-counted
        pynvml.nvmlShutdown()
        with pytest.raises(pynvml.NVMLError_Uninitialized):
            pynvml.nvmlDeviceGetCount()
    finally:
        sim.uninstall()
    assert pynvml.nvmlLib is not sim.library


def test_error_strings_come_from_the_library_for_codes_pynvml_does_not_know(node):
    node(A100)
    assert str(pynvml.NVMLError(pynvml.NVML_ERROR_IN_USE)) == "In use by another client"
    assert "resources" in str(pynvml.NVMLError(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)).lower()


def test_a_function_the_simulated_driver_lacks_is_function_not_found(node):
    node(A100)
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlDeviceGetPowerUsage(pynvml.nvmlDeviceGetHandleByIndex(0))


def test_a_mig_uuid_finds_the_mig_device_handle_and_its_parent(node):
    sim = node(H100)
    gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
    full_ci(create_gi(gpu, 19, 3, 1), 1)
    mig_uuid = sim.gpus()[0].mig_uuids[0]
    mig = pynvml.nvmlDeviceGetHandleByUUID(mig_uuid)
    assert pynvml.nvmlDeviceIsMigDeviceHandle(mig).value == 1
    assert pynvml.nvmlDeviceIsMigDeviceHandle(gpu).value == 0
    parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
    assert pynvml.nvmlDeviceGetUUID(parent) == sim.gpu_uuids[0]
    assert pynvml.nvmlDeviceGetName(mig) == "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
    assert pynvml.nvmlDeviceGetMemoryInfo(mig).total == 9984 * 1024 * 1024
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(gpu)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetGpuInstanceId(gpu)
