"""kill -9 of the device plugin while it pre-creates a bound pod's instance (the simulated NVML's
timing model on, so each create takes its estimated 1.5 s): once kubelet has restarted it, the
journal and NVML agree, every pod runs on exactly the instance its reservation names (a pod
kubelet failed at admission meanwhile leaves no instance behind, and its retry runs), no instance
is shared or left half made, and nothing is left once the pods are deleted."""

from __future__ import annotations

import time

import pytest
from lab.cluster import Lab
from lab.kit import Kit, gpu_pod
from lab.nodes import parse_nodes

from bench.chaos import _journal, _sigkill

PODS = 6  # one GPU: its pre-creates queue in series, most for pods kubelet has not reached yet


def in_flight(runtime) -> bool:
    """A create is under way: its intent is journaled (before the first NVML call), it has no
    runtime identity yet, and some instance of the burst exists already (the first create went by)."""
    entries = _journal(runtime)
    return any(e.get("gpuInstanceID") is None for e in entries) and any(
        e.get("gpuInstanceID") is not None for e in entries
    )


@pytest.mark.timeout(300)
def test_kill_9_during_a_pre_create_leaks_nothing_and_gives_every_pod_its_own_instance(monkeypatch):
    monkeypatch.setenv("DYNMIG_SIM_TIMING", "driver")  # the lab's NVML and plugin inherit it
    monkeypatch.setenv("DYNMIG_PRECREATE", "on")
    with Lab(parse_nodes("pre=1xA100-SXM4-40GB"), reconcile_interval=1.0) as lab:
        kit = Kit(lab)
        runtime = lab.nodes["pre"]
        registrations = runtime.kubelet.resource(lab.resource).registrations
        starts = runtime.plugin_starts
        for i in range(PODS):
            kit.create(gpu_pod(f"p{i}", 4000))
        kit.wait(lambda: in_flight(runtime), 60, "a pre-create in flight")
        _sigkill(runtime.plugin)
        lab._wait_plugin(runtime, registrations + 1, started_after=starts)

        # a pod kubelet admitted while the plugin was down (or whose Allocate the kill cut) fails
        # its admission, as kubelet fails it: its instance, pre-created or not, must not outlive it,
        # and its controller's retry is a new pod, which must run like any other
        # (a replacement has a name of its own, as a ReplicaSet's or a Job's does: PodResources
        # names pods by namespace and name only, so a same-name pod still in kubelet's pod manager
        # would make the next Allocate ambiguous, which the plugin refuses rather than guess)
        names = [f"p{i}" for i in range(PODS)]
        for attempt in range(3):  # a controller retries until its pods run
            settled = lambda now=tuple(names): all(kit.phase(n) in ("Running", "Failed") for n in now)  # noqa: E731
            kit.wait(settled, 120, "pods settled")
            failed = [n for n in names if kit.phase(n) == "Failed"]
            for name in failed:
                assert any(e["reason"] == "UnexpectedAdmissionError" for e in kit.events(name))
                kit.delete(name)
            retries = {name: f"{name.split('-')[0]}-r{attempt}" for name in failed}
            for retry in retries.values():
                kit.create(gpu_pod(retry, 4000))
            names = [retries.get(n, n) for n in names]
        for name in names:
            kit.wait_phase(name, "Running", timeout=120)
        owned: dict[str, str] = {}
        for name in names:
            [a] = kit.allocations(name)
            assert a.migUUID and a.migUUID not in owned.values()
            owned[name] = a.migUUID
        on_gpu = kit.instances()
        assert sorted(x.mig_uuid for x in on_gpu) == sorted(owned.values())  # no stray instance
        assert not kit.bare_gpu_instances()  # no GI left without its CI
        placements = {(x.gpu_uuid, x.start, x.size) for x in on_gpu}
        for name in names:
            [a] = kit.allocations(name)
            assert (a.gpuUUID, a.placement.start, a.placement.size) in placements  # its reserved one
        journal = _journal(runtime)
        assert sorted(e.get("migUUID") for e in journal) == sorted(owned.values())
        pods = {p["metadata"]["name"]: p["metadata"]["uid"] for p in kit.pods()}
        assert {(e["name"], e["podUID"]) for e in journal} == {(n, pods[n]) for n in owned}

        kit.delete_all(timeout=90)
        kit.wait(lambda: not kit.instances() and not kit.bare_gpu_instances(), 60, "every instance gone")
        deadline = time.monotonic() + 15
        while _journal(runtime) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _journal(runtime) == []
