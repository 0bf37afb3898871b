"""Device-level NVML calls through the real pynvml wrappers: init, handles, names, memory, errors."""

from __future__ import annotations

import re

import pynvml
import pytest
from nvml_testkit import A100, H100, RTX, create_gi, full_ci

from mig.catalog import find_model
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
    assert all(re.fullmatch(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", u) for u in first)


def test_an_explicit_gpu_uuid_is_what_nvml_reports_and_finds(node):
    uuid = "GPU-c08d91cb-e324-655c-71ba-7570956445bc"
    node({"gpus": [{"model": H100, "uuid": uuid}]})
    handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
    assert pynvml.nvmlDeviceGetUUID(handle) == uuid
    assert pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0)) == uuid


@pytest.mark.parametrize("spec, field", [
    ({"gpus": "A100"}, "gpus"),
    ({"gpus": [{"model": "Z9000"}]}, "gpus[0].model"),
    ({"gpus": [{"model": A100, "count": 0}]}, "gpus[0].count"),
    ({"gpus": [{"model": A100, "uuid": "gpu-1"}]}, "gpus[0].uuid"),
    ({"gpus": [{"model": A100, "colour": "red"}]}, "gpus[0]"),
])
def test_a_bad_node_spec_names_the_field_to_fix(spec, field):
    with pytest.raises(SpecError, match=re.escape(field)):
        SimulatedNvml(spec)


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
