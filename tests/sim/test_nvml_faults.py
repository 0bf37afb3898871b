"""Fault injection, busy GPUs, MIG mode changes and running processes."""

from __future__ import annotations

import pynvml
import pytest
from nvml_testkit import A100, H100, RTX, create_gi, find_model, full_ci, gpu0


def test_an_injected_error_fails_the_next_calls_of_that_function_only(node):
    sim = node(A100)
    sim.inject_error("nvmlDeviceCreateGpuInstanceWithPlacement", pynvml.NVML_ERROR_UNKNOWN, times=2)
    for _ in range(2):
        with pytest.raises(pynvml.NVMLError_Unknown):
            create_gi(gpu0(), 19, 0, 1)
    assert sim.gpus()[0].gpu_instances == ()
    create_gi(gpu0(), 19, 0, 1)
    assert len(sim.gpus()[0].gpu_instances) == 1


@pytest.mark.parametrize(
    "wrapper",
    [
        "nvmlDeviceGetComputeRunningProcesses",  # calls the _v3 symbol
        "nvmlDeviceGetGpuInstanceProfileInfo",  # calls the ...InfoV symbol
    ],
)
def test_an_error_injected_by_wrapper_name_hits_the_versioned_symbol_it_calls(node, wrapper):
    sim = node(A100)
    sim.inject_error(wrapper, pynvml.NVML_ERROR_GPU_IS_LOST)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        if "Processes" in wrapper:
            pynvml.nvmlDeviceGetComputeRunningProcesses(gpu0())
        else:
            pynvml.nvmlDeviceGetGpuInstanceProfileInfo(gpu0(), 0)


def test_injecting_into_a_function_that_does_not_exist_is_refused(node):
    sim = node(A100)
    with pytest.raises(ValueError, match="nvmlDeviceMakeCoffee"):
        sim.inject_error("nvmlDeviceMakeCoffee", pynvml.NVML_ERROR_UNKNOWN)


def test_the_nth_create_fails_with_the_given_code_and_leaves_nothing_behind(node):
    sim = node(H100)
    sim.fail_nth_create(2, pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
    create_gi(gpu0(), 19, 0, 1)
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        create_gi(gpu0(), 19, 1, 1)
    create_gi(gpu0(), 19, 1, 1)
    assert sim.gpus()[0].placements == (
        find_model(H100).profile("1g.10gb").placements[0],
        find_model(H100).profile("1g.10gb").placements[1],
    )


def test_a_failed_compute_instance_create_can_be_injected_too(node):
    sim = node(A100)
    sim.fail_nth_create(1, pynvml.NVML_ERROR_UNKNOWN, kind="ci")
    gi = create_gi(gpu0(), 19, 0, 1)
    with pytest.raises(pynvml.NVMLError_Unknown):
        full_ci(gi, 1)
    full_ci(gi, 1)
    assert len(sim.gpus()[0].mig_uuids) == 1


def test_running_processes_count_semantics_match_the_driver(node):
    sim = node(A100)
    uuid = sim.gpu_uuids[0]
    assert pynvml.nvmlDeviceGetComputeRunningProcesses(gpu0()) == []
    gi = create_gi(gpu0(), 19, 2, 1)
    full_ci(gi, 1)
    gi_id = pynvml.nvmlGpuInstanceGetInfo(gi).id
    sim.set_busy(uuid, [101, 102], gi_id=gi_id, ci_id=0, used_mib=512)
    procs = pynvml.nvmlDeviceGetComputeRunningProcesses(gpu0())
    assert sorted(p.pid for p in procs) == [101, 102]
    assert {(p.gpuInstanceId, p.computeInstanceId, p.usedGpuMemory) for p in procs} == {(gi_id, 0, 512 << 20)}
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu0(), 0)
    assert len(pynvml.nvmlDeviceGetComputeRunningProcesses(mig)) == 2
    sim.clear_busy(uuid)
    assert pynvml.nvmlDeviceGetComputeRunningProcesses(mig) == []


def test_processes_on_an_instance_block_destroying_it(node):
    sim = node(RTX)
    gi = create_gi(gpu0(), 14, 3, 3)
    ci = full_ci(gi, 1)
    sim.set_busy(sim.gpu_uuids[0], [7], gi_id=pynvml.nvmlGpuInstanceGetInfo(gi).id)
    with pytest.raises(pynvml.NVMLError_InUse):
        pynvml.nvmlComputeInstanceDestroy(ci)
    sim.clear_busy(sim.gpu_uuids[0])
    pynvml.nvmlComputeInstanceDestroy(ci)
    sim.set_busy(sim.gpu_uuids[0], [8], gi_id=pynvml.nvmlGpuInstanceGetInfo(gi).id)
    with pytest.raises(pynvml.NVMLError_InUse):
        pynvml.nvmlGpuInstanceDestroy(gi)


def test_a_process_holding_the_whole_gpu_makes_creates_in_use(node):
    sim = node(H100)
    sim.set_busy(sim.gpu_uuids[0], [99])
    with pytest.raises(pynvml.NVMLError_InUse):
        create_gi(gpu0(), 19, 0, 1)


def test_enabling_mig_on_a_disabled_gpu_applies_at_once_when_no_reset_is_needed(node):
    sim = node({"gpus": [{"model": A100, "mig": False}]})
    assert pynvml.nvmlDeviceGetMigMode(gpu0()) == [0, 0]
    with pytest.raises(pynvml.NVMLError_NotSupported):
        create_gi(gpu0(), 19, 0, 1)
    assert pynvml.nvmlDeviceSetMigMode(gpu0(), pynvml.NVML_DEVICE_MIG_ENABLE) == pynvml.NVML_SUCCESS
    assert pynvml.nvmlDeviceGetMigMode(gpu0()) == [1, 1]
    create_gi(gpu0(), 19, 0, 1)
    assert sim.gpus()[0].mig_current == 1


def test_a_pending_mig_mode_stays_pending_until_the_gpu_is_reset(node):
    sim = node({"gpus": [{"model": A100, "mig": False}]})
    uuid = sim.gpu_uuids[0]
    sim.set_mig_pending(uuid)
    assert pynvml.nvmlDeviceGetMigMode(gpu0()) == [0, 1]
    assert pynvml.nvmlDeviceSetMigMode(gpu0(), 1) == pynvml.NVML_ERROR_RESET_REQUIRED
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(gpu0()) == 0
    sim.reset_gpu(uuid)
    assert pynvml.nvmlDeviceGetMigMode(gpu0()) == [1, 1]
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(gpu0()) == find_model(A100).max_mig_devices


def test_mig_cannot_be_disabled_while_gpu_instances_exist(node):
    node(H100)
    create_gi(gpu0(), 19, 0, 1)
    with pytest.raises(pynvml.NVMLError_InUse):
        pynvml.nvmlDeviceSetMigMode(gpu0(), pynvml.NVML_DEVICE_MIG_DISABLE)


def test_with_mig_disabled_instance_lookups_are_not_supported(node):
    node({"gpus": [{"model": RTX, "mig": False}]})
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetGpuInstanceById(gpu0(), 3)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu0(), 0)


def test_every_mutation_is_in_the_event_log(node):
    sim = node(A100)
    gi = create_gi(gpu0(), 19, 5, 1)
    ci = full_ci(gi, 1)
    pynvml.nvmlComputeInstanceDestroy(ci)
    pynvml.nvmlGpuInstanceDestroy(gi)
    assert [e["op"] for e in sim.events()] == ["create_gi", "create_ci", "destroy_ci", "destroy_gi"]
    assert sim.events()[0]["placement"] == "5:1"


def test_a_busy_gpu_keeps_a_mig_mode_change_pending_with_in_use(node):
    sim = node({"gpus": [{"model": H100, "mig": False}]})
    sim.set_busy(sim.gpu_uuids[0], [5])
    assert pynvml.nvmlDeviceSetMigMode(gpu0(), pynvml.NVML_DEVICE_MIG_ENABLE) == pynvml.NVML_ERROR_IN_USE
    assert pynvml.nvmlDeviceGetMigMode(gpu0()) == [0, 1]


def test_a_slow_destroy_still_destroys_and_clear_faults_removes_every_fault(node):
    sim = node(A100)
    sim.set_destroy_delay(0.01)
    sim.inject_error("nvmlDeviceGetCount", pynvml.NVML_ERROR_UNKNOWN, times=5)
    sim.fail_nth_create(3)
    gi = create_gi(gpu0(), 19, 0, 1)
    pynvml.nvmlGpuInstanceDestroy(gi)
    assert sim.gpus()[0].gpu_instances == ()
    sim.clear_faults()
    assert pynvml.nvmlDeviceGetCount() == 1
    assert sim.snapshot()["faults"] == {"errors": {}, "create_failures": [], "destroy_delay_s": 0.0}


def test_busy_work_is_compute_work_and_graphics_process_lists_stay_empty(node):
    sim = node(A100)
    sim.set_busy(sim.gpu_uuids[0], [31])
    assert pynvml.nvmlDeviceGetGraphicsRunningProcesses(gpu0()) == []
    assert [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(gpu0())] == [31]
