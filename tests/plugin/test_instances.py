"""The instance manager over the simulated NVML: idempotent, exact, one writer per GPU."""

from __future__ import annotations

import threading

import pytest
from sim.nvml import SimulatedNvml

from base.policyfiles import default_allowlist
from plugin.config import DeviceFilter
from plugin.discovery import discover
from plugin.instances import InstanceError, InstanceKey, InstanceManager
from plugin.nvml import Nvml


@pytest.fixture
def a100():
    sim = SimulatedNvml({"gpus": [{"model": "A100-SXM4-40GB"}]}, shuffle_gi_ids=3).install()
    nvml = Nvml()
    nvml.init()
    manager = InstanceManager(nvml, discover(nvml, default_allowlist(), DeviceFilter()))
    try:
        yield sim, manager
    finally:
        sim.uninstall()


def test_ensuring_the_same_key_twice_returns_the_same_mig_uuid_and_creates_once(a100):
    sim, manager = a100
    key = InstanceKey(sim.gpu_uuids[0], "2g.10gb", 4, 2)

    first, created = manager.ensure(key)
    again, created_again = manager.ensure(key)

    assert (created, created_again) == (True, False)
    assert again == first
    assert [e["op"] for e in sim.events()].count("create_gi") == 1
    assert sim.misuse == []  # the placement went to NVML by reference


def test_concurrent_creates_on_one_gpu_all_land_without_a_race(a100):
    sim, manager = a100
    keys = [InstanceKey(sim.gpu_uuids[0], "1g.5gb", s, 1) for s in range(7)]
    errors: list[Exception] = []

    def ensure(key):
        try:
            manager.ensure(key)
        except Exception as error:  # noqa: BLE001 - collected for the assert
            errors.append(error)

    threads = [threading.Thread(target=ensure, args=(k,)) for k in keys]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert errors == []
    assert sorted(gi.placement.start for gi in sim.gpu(0).gpu_instances) == list(range(7))
    assert manager.metrics.value("dynmig_plugin_managed_instances") == 7


def test_an_occupied_placement_fails_without_trying_another(a100):
    sim, manager = a100
    manager.ensure(InstanceKey(sim.gpu_uuids[0], "3g.20gb", 4, 4))

    with pytest.raises(InstanceError) as error:
        manager.ensure(InstanceKey(sim.gpu_uuids[0], "2g.10gb", 4, 2))

    assert error.value.reason == "create-gi"
    assert [gi.profile for gi in sim.gpu(0).gpu_instances] == ["3g.20gb"]
    assert manager.metrics.value("dynmig_plugin_failures_total", op="create", reason="create-gi") == 1


def test_a_failed_compute_instance_create_leaves_no_gpu_instance_behind(a100):
    sim, manager = a100
    sim.fail_nth_create(1, kind="ci")

    with pytest.raises(InstanceError, match="create CI"):
        manager.ensure(InstanceKey(sim.gpu_uuids[0], "1g.5gb", 2, 1))

    assert sim.gpu(0).gpu_instances == ()


def test_a_profile_outside_the_allowlist_is_refused(a100):
    sim, manager = a100

    with pytest.raises(InstanceError) as error:
        manager.ensure(InstanceKey(sim.gpu_uuids[0], "4g.20gb", 0, 4))

    assert error.value.reason == "unsupported-profile"
    assert sim.gpu(0).gpu_instances == ()


def test_a_pending_mig_mode_change_refuses_creation(a100):
    sim, manager = a100
    sim.set_mig_pending(sim.gpu_uuids[0], mode=0)

    with pytest.raises(InstanceError) as error:
        manager.ensure(InstanceKey(sim.gpu_uuids[0], "1g.5gb", 0, 1))

    assert error.value.reason == "mig-mode"
