"""The storm's per-run report names why each pod failed, as a user reads it in the pod's status."""

from __future__ import annotations

from bench.chaos import Report, Trace, bound_when, failure_reason, timeline, unheld_after


def test_a_create_refused_at_a_reserved_placement_is_told_apart_from_a_dead_plugin():
    refused = (
        "Allocate failed due to rpc error: code = FailedPrecondition desc = dynmig: create-gi: create GI "
        "1g.24gb@0:3 on GPU-1: nvmlDeviceCreateGpuInstanceWithPlacement: NVML error 23 (Insufficient "
        "resources), which is unexpected"
    )
    assert failure_reason(refused) == "create-refused"
    assert (
        failure_reason("requested number of devices unavailable for nvidia.com/gpu") == "plugin-unavailable"
    )
    assert failure_reason("Allocate failed due to rpc error: code = Unavailable desc = Stream removed") == (
        "killed-mid-allocate"
    )
    assert failure_reason("dynmig: journal-write: cannot write the ownership journal") == "journal-write"


def test_a_run_with_a_refused_create_or_a_lingering_instance_is_not_clean():
    assert Report().clean
    assert not Report(failed_by_reason={"create-refused": 1}).clean
    assert not Report(lingering=1).clean
    assert Report(failed_by_reason={"plugin-unavailable": 3}).clean  # what a kill costs, counted apart


def test_an_instance_first_seen_unheld_after_a_slow_look_is_not_yet_lingering():
    # a look 11 s after the last one (a loaded machine) finds the instance's pod gone: the 11 s were
    # mostly its pod holding it, so the count starts at 0
    assert unheld_after(None, 11.0, up=True) == 0.0
    # unheld at two looks: the time between them counts, while its plugin was up
    assert unheld_after(0.0, 11.0, up=True) == 11.0
    assert unheld_after(4.0, 6.0, up=False) == 4.0


def test_a_pod_deleted_before_kubelet_admitted_it_is_not_counted_as_a_failure_of_the_storm():
    refused = (
        "Allocate failed due to FAILED_PRECONDITION: dynmig: pod-not-found: no binding pod found on node "
        "gpu-rtx: kubelet's pod manager lists no pod in bind-phase allocating"
    )
    assert failure_reason(refused, deleted=True) == "deleted-before-admission"
    assert failure_reason(refused) == "other"


def test_a_lingering_instance_is_reported_with_its_pods_end_its_processes_end_and_what_its_plugin_published():
    trace = Trace(
        "gpu-rtx",
        "1g.24gb@0:3 GI 3 on GPU-1",
        pod="chaos-0042",
        deleted=40.0,
        terminal=46.5,
        gone=47.0,
        stopped=46.0,
        unheld=46.5,
        published={"reclaiming": 48.0},
        destroyed=70.2,
        journal='{"name":"chaos-0042","idleSince":null}',
    )
    line = timeline(trace, [(10.0, 16.0), (50.0, 58.5), (90.0, None)])
    assert "pod chaos-0042 deleted 40.0s, terminal 46.5s, gone 47.0s; processes ended 46.0s" in line
    assert "published reclaiming 48.0s; destroyed 70.2s" in line
    assert "plugin down 50.0s-58.5s;" in line  # only while it lingered, not before or after
    assert line.endswith('journal {"name":"chaos-0042","idleSince":null}')


def test_a_plugin_unavailable_failure_is_told_by_when_its_pod_was_bound_against_its_nodes_kills():
    kills = [100.0, 160.0]
    # bound 4 s after the kill, failed 30 s later: kubelet's window, however late it was seen
    assert bound_when(104.0, seen=134.0, kills=kills) == "in-window"
    # the condition's second resolution: bound in the second of the kill
    assert bound_when(99.5, seen=101.0, kills=kills) == "in-window"
    # bound while the plugin served, admitted only after the next kill
    assert bound_when(150.0, seen=163.0, kills=kills) == "before-kill"
    # bound 20 s after the kill with no kill since: the extender had had time to leave the node out
    assert bound_when(120.0, seen=125.0, kills=kills) == "later"
    assert bound_when(-1.0, seen=125.0, kills=kills) == "unknown"
