"""The timing model of the simulated NVML: how long each GI/CI create and destroy takes (the driver
data's estimates), which calls wait for each other, and a MIG device list that may lag a create.

No test measures time: the library's `time.sleep` and `time.time` are replaced, so each test reads
exactly which call slept how long under which serialization scope.
"""

from __future__ import annotations

import contextlib
from typing import ClassVar

import pynvml
import pytest
from nvml_testkit import A100, create_gi, find_model, full_ci, gpu0
from sim.nvml import SpecError, library

TWO_A100 = {"gpus": [{"model": A100, "count": 2}]}


@pytest.fixture
def clock(monkeypatch):
    """Record the library's sleeps (seconds, the scopes held) instead of sleeping; `now` is its clock."""

    class Clock:
        now = 1_000_000.0
        sleeps: ClassVar[list[tuple[float, tuple[str, ...]]]] = []
        held: ClassVar[list[str]] = []

    def sleep(seconds: float) -> None:
        Clock.sleeps.append((round(seconds, 6), tuple(Clock.held)))

    monkeypatch.setattr(library.time, "sleep", sleep)
    monkeypatch.setattr(library.time, "time", lambda: Clock.now)
    return Clock


def watch_scopes(sim, clock) -> None:
    real = sim.store.serial

    @contextlib.contextmanager
    def serial(scope: str):
        with real(scope):
            clock.held.append(scope)
            try:
                yield
            finally:
                clock.held.remove(scope)

    sim.store.serial = serial


def one_instance(sim) -> tuple[object, object]:
    gi = create_gi(gpu0(), 19, 0, 1)
    return gi, full_ci(gi, 1)


def test_timing_is_zero_unless_asked_for(node, clock, monkeypatch):
    monkeypatch.delenv("DYNMIG_SIM_TIMING", raising=False)
    sim = node(A100)
    gi, ci = one_instance(sim)
    pynvml.nvmlComputeInstanceDestroy(ci)
    pynvml.nvmlGpuInstanceDestroy(gi)
    assert clock.sleeps == []
    assert sim.timing.mode == "zero"


def test_driver_timing_takes_each_calls_seconds_from_the_driver_data(node, clock):
    sim = node({"gpus": [{"model": A100}], "timing": "driver"})
    watch_scopes(sim, clock)
    expected = find_model(A100).timing
    gi, ci = one_instance(sim)
    pynvml.nvmlComputeInstanceDestroy(ci)
    pynvml.nvmlGpuInstanceDestroy(gi)
    scope = (f"gpu-{sim.gpu_uuids[0]}",)
    assert clock.sleeps == [
        (expected.create_gi_s, scope),
        (expected.create_ci_s, scope),
        (expected.destroy_ci_s, scope),
        (expected.destroy_gi_s, scope),
    ]
    # the estimates as the data gives them: about 1.5 s for a create (HAMi PR #2910)
    assert expected.create_gi_s + expected.create_ci_s == pytest.approx(1.5)


def test_a_refused_call_returns_at_once(node, clock):
    sim = node({"gpus": [{"model": A100}], "timing": "driver"})
    create_gi(gpu0(), 19, 0, 1)
    clock.sleeps.clear()
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        create_gi(gpu0(), 14, 0, 2)  # overlaps the 1g at 0
    assert clock.sleeps == []
    assert len(sim.gpus()[0].gpu_instances) == 1


@pytest.mark.parametrize("serialization", ["gpu", "node"])
def test_the_serialization_scope_is_per_gpu_or_per_node(node, clock, serialization):
    sim = node({**TWO_A100, "timing": "driver", "timing_serialization": serialization})
    watch_scopes(sim, clock)
    for index in (0, 1):
        create_gi(pynvml.nvmlDeviceGetHandleByIndex(index), 19, 0, 1)
    scopes = [held for _, held in clock.sleeps]
    if serialization == "node":
        assert scopes == [("node",), ("node",)]
    else:
        assert scopes == [(f"gpu-{sim.gpu_uuids[0]}",), (f"gpu-{sim.gpu_uuids[1]}",)]


def test_the_mig_device_list_may_lag_a_create(node, clock):
    sim = node({"gpus": [{"model": A100}], "listing_lag_s": 1.5})
    one_instance(sim)
    uuid = sim.gpus()[0].mig_uuids[0]  # the hardware has it at once
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu0(), 0)
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetHandleByUUID(uuid)
    clock.now += 1.5
    migdev = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu0(), 0)
    assert pynvml.nvmlDeviceGetUUID(migdev) == uuid


def test_timing_can_change_at_run_time_and_is_checked(node, clock):
    sim = node(A100)
    sim.set_timing("driver", "node")
    create_gi(gpu0(), 19, 0, 1)
    assert [held for _, held in clock.sleeps] == [()]  # the scope is taken; nobody watched it
    assert sim.timing.serialization == "node"
    with pytest.raises(SpecError, match="timing"):
        sim.set_timing("fast")
    with pytest.raises(SpecError, match="listing_lag_s"):
        sim.set_timing("driver", listing_lag_s=-1)


def test_a_node_spec_with_a_bad_timing_field_is_refused():
    from sim.nvml import SimulatedNvml

    with pytest.raises(SpecError, match="timing_serialization"):
        SimulatedNvml({"gpus": [{"model": A100}], "timing_serialization": "cluster"})
