"""State outlives NVML sessions and processes; HAMi's call sequences run end to end."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pynvml
import pytest
from nvml_testkit import (
    A100,
    H100,
    RTX,
    THREE_MODELS,
    compute_instances,
    create_gi,
    find_model,
    full_ci,
    gpu0,
    gpu_instances,
    mig_uuids_by_index,
    placements,
)
from sim.nvml import SimulatedNvml
from sim.nvml.hardware import CI_ENUM_BY_SLICES

ROOT = Path(__file__).resolve().parents[2]


def test_a_new_nvml_session_in_the_same_process_sees_the_instances_left_running(node):
    node(H100)
    gi = create_gi(gpu0(), 19, 4, 1)
    full_ci(gi, 1)
    pynvml.nvmlShutdown()
    pynvml.nvmlInit()
    (found,) = gpu_instances(gpu0(), 19)
    assert pynvml.nvmlGpuInstanceGetInfo(found).placement.start == 4
    assert len(compute_instances(found, CI_ENUM_BY_SLICES[1])) == 1


def _launch(state: Path, *args: str, spec: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests" / "sim")])}
    command = [sys.executable, "-m", "sim.nvml.launch", "--state", str(state)]
    if spec is not None:
        command += ["--spec", json.dumps(spec)]
    return subprocess.run(
        [*command, "--", *args], check=False, capture_output=True, text=True, env=env, cwd=ROOT, timeout=60
    )


def test_a_separate_process_under_the_launcher_shares_the_state_file_with_an_observer(tmp_path):
    state = tmp_path / "node.json"
    spec = {"node": "n1", "gpus": [{"model": A100}]}
    first = _launch(state, "nvml_testkit:child_create", "3", spec=spec)
    assert first.returncode == 0, first.stderr
    observer = SimulatedNvml(state_path=state)
    assert observer.gpus()[0].placements == (find_model(A100).profile("1g.5gb").placements[3],)
    assert observer.gpus()[0].mig_uuids == (first.stdout.strip(),)
    observer.inject_error("nvmlDeviceCreateGpuInstanceWithPlacement", pynvml.NVML_ERROR_NO_PERMISSION)
    second = _launch(state, "nvml_testkit:child_create", "5")
    assert second.stdout.strip() == f"error {pynvml.NVML_ERROR_NO_PERMISSION}"
    assert len(observer.gpus()[0].gpu_instances) == 1


def test_the_launcher_hands_other_arguments_to_the_dynmig_command_line(tmp_path):
    result = _launch(tmp_path / "node.json", "--help", spec={"gpus": [{"model": RTX}]})
    assert result.returncode == 0 and "usage: dynmig" in result.stdout


def test_a_missing_state_file_without_a_spec_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="pass a node spec"):
        SimulatedNvml(state_path=tmp_path / "absent.json")


def test_two_simulators_on_one_state_file_see_each_others_instances(tmp_path, node, monkeypatch):
    monkeypatch.delenv("DYNMIG_SIM_GI_IDS", raising=False)
    path = tmp_path / "node.json"
    writer = node({"gpus": [{"model": H100}]}, state_path=path)
    reader = SimulatedNvml(state_path=path)
    create_gi(gpu0(), 19, 6, 1)
    assert reader.gpus()[0].placements == writer.gpus()[0].placements
    assert reader.gpus()[0].gpu_instances[0].gi_id == 9


def test_another_processs_write_that_keeps_inode_mtime_and_size_is_never_undone(tmp_path):
    # a rename-replaced state file reuses the inode freed two writes before, and writes within one
    # coarse clock tick share their mtime: a same-sized change by another process must still be seen,
    # or a mutate here writes the stale state back (an instance it destroyed back, a process gone on)
    path = tmp_path / "node.json"
    lab = SimulatedNvml({"gpus": [{"model": H100}]}, state_path=path)
    uuid = lab.gpu_uuids[0]
    lab.set_busy(uuid, (1111,))
    lab.gpus()  # the lab's view is cached now
    before = os.stat(path)
    text = path.read_text()
    with open(path, "r+") as f:  # another process: pid 1111 ended, 2222 started (same size)
        f.write(text.replace("1111", "2222"))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_ino, after.st_mtime_ns, after.st_size) == (
        before.st_ino,
        before.st_mtime_ns,
        before.st_size,
    )

    lab.set_busy(uuid, (3333,))  # a mutate of the lab's own

    assert sorted(p.pid for p in SimulatedNvml(state_path=path).gpu(0).processes) == [2222, 3333]


@pytest.mark.parametrize("model", THREE_MODELS)
def test_hami_allocate_release_reset_and_adopt_sequences_run_through_pynvml(node, model):
    """mig-facts §6, step by step, on the first profile's last placement."""
    sim = node(model)
    handle = gpu0()
    # Allocate
    current, pending = pynvml.nvmlDeviceGetMigMode(handle)
    assert (current, pending) == (1, 1)
    spec = find_model(model).profiles[0]
    info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, spec.enum)
    wanted = spec.placements[-1]
    assert (wanted.start, wanted.size) in placements(handle, info.id)
    gi = create_gi(handle, info.id, wanted.start, wanted.size)
    gi_info = pynvml.nvmlGpuInstanceGetInfo(gi)
    ci_info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
        gi, CI_ENUM_BY_SLICES[info.sliceCount], pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
    )
    ci = pynvml.nvmlGpuInstanceCreateComputeInstance(gi, ci_info.id)
    ci_id = pynvml.nvmlComputeInstanceGetInfo(ci).id
    uuid = next(u for g, _, u in mig_uuids_by_index(handle) if g == gi_info.id)  # HAMi's walk
    # Adopt after a restart
    pynvml.nvmlShutdown()
    pynvml.nvmlInit()
    handle = gpu0()
    (adopted,) = gpu_instances(handle, info.id)
    adopted_info = pynvml.nvmlGpuInstanceGetInfo(adopted)
    assert (adopted_info.id, adopted_info.placement.start) == (gi_info.id, wanted.start)
    (adopted_ci,) = compute_instances(adopted, ci_info.id)
    assert pynvml.nvmlComputeInstanceGetInfo(adopted_ci).id == ci_id
    assert pynvml.nvmlDeviceGetUUID(pynvml.nvmlComputeInstanceGetInfo(adopted_ci).device) == uuid
    assert pynvml.nvmlDeviceGetComputeRunningProcesses(handle) == []
    # Release
    gi = pynvml.nvmlDeviceGetGpuInstanceById(handle, gi_info.id)
    pynvml.nvmlComputeInstanceDestroy(pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, ci_id))
    pynvml.nvmlGpuInstanceDestroy(gi)
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetGpuInstanceById(handle, gi_info.id)
    # Reset of an idle GPU: list every profile's GIs, destroy CIs then GIs
    for p in find_model(model).profiles[:3]:
        for placement in p.placements[:1]:
            with contextlib.suppress(pynvml.NVMLError_InsufficientResources):
                full_ci(create_gi(handle, p.profile_id, placement.start, placement.size), p.slice_count)
    for enum in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            p_info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, enum)
        except pynvml.NVMLError_NotSupported:
            continue
        for each in gpu_instances(handle, p_info.id):
            for ci_enum in range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
                try:
                    c_info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(each, ci_enum, 0)
                except pynvml.NVMLError_NotSupported:
                    continue
                for c in compute_instances(each, c_info.id):
                    pynvml.nvmlComputeInstanceDestroy(c)
            pynvml.nvmlGpuInstanceDestroy(each)
    assert sim.gpus()[0].gpu_instances == ()
