"""kill -9 of the device plugin during a create/delete workload (the short run of bench/chaos.py):
no overlap, no running pod loses its instance, no Allocate fails because of a leftover, and nothing
is left once everything is deleted."""

from __future__ import annotations

import os
import signal

import pytest
from lab.cluster import Lab
from lab.kit import Kit, gpu_pod
from lab.nodes import parse_nodes

from bench.chaos import run
from mig.leftovers import LEFTOVERS


# 40 pods held 15-40 s each: about a minute alone, several on a loaded 2-core machine
@pytest.mark.timeout(480)
def test_kill_9_of_the_plugin_during_a_pod_stream_leaks_nothing_and_breaks_no_running_pod():
    # long-running pods keep the GPU busy across restarts, where only the journal can prove an
    # instance ours (with its proof switched off this run leaked 4 instances)
    report = run(
        "chaos-a=1xA100-SXM4-40GB",
        pods=40,
        kills=4,
        concurrency=6,
        seed=7,
        echo=lambda line: None,
        long_hold=(15.0, 40.0),
    )

    assert report.kills == 4 and set(report.kills_by_mode) == {
        "anywhere",
        "allocate",
        "after-delete",
        "startup",
    }
    assert (report.overlaps, report.lost_instances, report.leftover_failures) == (0, 0, 0), report.details
    assert (report.leaked_instances, report.journal_entries_left) == (0, 0), report.details


@pytest.mark.parametrize("journal", ["kept", "lost"])
def test_a_pod_deleted_while_its_plugin_is_stopped_never_blocks_the_next_pod_at_its_placement(journal):
    # the reproduction through the whole lab: a and b Running on one GPU; stop the plugin,
    # delete a; start it again; c (a's size) must run: at a's placement once it is reclaimed (the
    # journal proves it ours), or elsewhere because the scheduler saw the leftover as occupied
    with Lab(parse_nodes("solo=1xA100-SXM4-40GB"), reconcile_interval=0.5) as lab:
        kit = Kit(lab)
        for name in ("a", "b"):
            kit.create(gpu_pod(name, 4000))
            kit.wait_phase(name, "Running")
        [a] = kit.allocations("a")
        runtime = lab.nodes["solo"]
        registrations, starts = runtime.kubelet.resource(lab.resource).registrations, runtime.plugin_starts
        os.killpg(runtime.plugin.process.pid, signal.SIGTERM)  # kubelet restarts it after its back-off
        runtime.plugin.process.wait(20)
        if journal == "lost":
            (runtime.state_file.parent / "plugin-state" / "instances.json").unlink()
        kit.delete("a")
        lab._wait_plugin(runtime, registrations + 1, started_after=starts)
        if journal == "lost":  # the plugin may not destroy it (GPU busy, no proof), so it tells the scheduler
            kit.wait(
                lambda: LEFTOVERS in (lab.core().read_node("solo").metadata.annotations or {}),
                10,
                "the leftover to be published",
            )

        kit.create(gpu_pod("c", 4000))
        kit.wait_phase("c", "Running")

        [c] = kit.allocations("c")
        starts = sorted(i.start for i in kit.instances())
        if journal == "kept":
            assert a.placement_value not in [i.placement_value for i in kit.allocations("b")]
            assert len(starts) == 2  # a's instance was reclaimed
        else:
            assert c.placement_value != a.placement_value and len(starts) == 3
        assert not [e for e in kit.events("c") if "Insufficient" in e.get("message", "")]
