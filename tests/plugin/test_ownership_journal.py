"""The ownership journal: what the plugin created survives a crash as proof, so nothing leaks, and an
instance is never handed to a pod while another pod's process still uses it."""

from __future__ import annotations

import itertools
import json
import shutil
import threading

from mig.annotations import BIND_PHASE
from mig.leftovers import LEFTOVERS, decode_leftovers
from plugin.instances import InstanceKey
from plugin.nvml import IN_USE
from plugin.reconcile import BACKOFF_CAP, ReclaimBackoff
from tests.plugin.conftest import Want
from tests.plugin.test_reclaim_and_restart import leftover

A100 = {"gpus": [{"model": "A100-SXM4-40GB"}]}


def running(node, name: str, want: Want, pid: int) -> None:
    """A pod admitted, Running, with its workload's process on its MIG device."""
    node.add_pod(name, [[want]])
    assert node.admit(name).ok
    node.set_phase(name, "Running")
    [r] = node.reservations(name)
    node.sim.set_busy(node.uuids[want.gpu], pids=(pid,), gi_id=r.gpuInstanceID, ci_id=r.computeInstanceID)


def starts(node) -> list[int]:
    return [s for _, s, _, _ in node.instances(0)]


def retry_admission(node, name: str):
    node.patch_annotations(name, {BIND_PHASE: "allocating"})
    return node.admit(name)


def test_a_pod_deleted_while_the_plugin_was_down_gets_its_instance_reclaimed_on_a_busy_gpu(make_node):
    # the four steps: a and b Running on one GPU; stop the plugin, delete a; start it; c at a's place
    node = make_node(A100)
    node.start_plugin()
    running(node, "a", Want(0, "1g.5gb", 0, 1), pid=101)
    running(node, "b", Want(0, "1g.5gb", 1, 1), pid=102)
    node.stop_plugin()
    node.sim.clear_busy(node.uuids[0], pids=(101,))  # a's container ends with its pod
    node.core.delete_namespaced_pod("a", "default", grace_period_seconds=0)  # gone from the API

    app = node.start_plugin()

    assert starts(node) == [1]
    assert not any("has no owner" in line for line in app.report.unproven)
    assert app.metrics.value("dynmig_plugin_journal_reclaims_total") == 1
    node.add_pod("c", [[Want(0, "1g.5gb", 0, 1)]])
    assert node.admit("c").ok
    assert starts(node) == [0, 1]
    assert [p.pid for p in node.sim.gpu(0).processes] == [102]


def test_every_create_is_journaled_before_the_gpu_instance_exists_and_forgotten_after_the_destroy(make_node):
    node = make_node(A100)
    app = node.start_plugin()
    node.add_pod("a", [[Want(0, "3g.20gb", 4, 4)]])
    assert node.admit("a").ok
    [r] = node.reservations("a")

    [entry] = json.loads(node.journal_path.read_text())["entries"]
    assert (entry["start"], entry["size"], entry["profile"], entry["name"]) == (4, 4, "3g.20gb", "a")
    assert (entry["gpuInstanceID"], entry["computeInstanceID"], entry["migUUID"]) == (
        r.gpuInstanceID,
        r.computeInstanceID,
        r.migUUID,
    )
    assert app.metrics.value("dynmig_plugin_journal_entries") == 1

    node.core.delete_namespaced_pod("a", "default")
    node.tick()
    assert node.instances(0) == []
    assert json.loads(node.journal_path.read_text())["entries"] == []
    assert not node.journal_path.with_name("instances.json.tmp").exists()


def test_a_crash_between_the_intent_and_the_create_record_still_proves_the_instance(make_node):
    node = make_node(A100)
    node.start_plugin()
    node.add_pod("a", [[Want(0, "2g.10gb", 2, 2)]])
    assert node.admit("a").ok
    node.sim.set_busy(node.uuids[0], pids=(7,))  # something else keeps the GPU busy
    node.stop_plugin()
    doc = json.loads(node.journal_path.read_text())
    for entry in doc["entries"]:  # as if killed right after the intent was written
        for field in ("gpuInstanceID", "computeInstanceID", "migUUID"):
            entry.pop(field)
    node.journal_path.write_text(json.dumps(doc))
    node.core.delete_namespaced_pod("a", "default")

    node.start_plugin()

    assert node.instances(0) == []


def test_a_pod_recreated_under_the_same_name_never_gets_the_old_pods_instance(make_node):
    node = make_node(A100)
    node.start_plugin()
    running(node, "web", Want(0, "1g.5gb", 3, 1), pid=55)
    [old] = node.reservations("web")
    running(node, "keep-busy", Want(0, "1g.5gb", 0, 1), pid=56)
    node.stop_plugin()
    node.sim.clear_busy(node.uuids[0], pids=(55,))
    node.core.delete_namespaced_pod("web", "default", grace_period_seconds=0)
    node.add_pod("web", [[Want(0, "1g.5gb", 3, 1)]], phase="Pending")  # a new pod, same name and place

    app = node.start_plugin()

    assert app.manager.get(next(iter(app.report.protected))) is None  # not adopted for the new pod
    result = node.admit("web")
    assert result.ok
    [new] = node.reservations("web")
    assert new.gpuInstanceID is not None
    assert app.metrics.value("dynmig_plugin_instance_creates_total") == 1
    assert app.metrics.value("dynmig_plugin_instance_destroys_total", cause="reclaim") == 1
    assert old.placement_value == new.placement_value


def test_an_instance_a_foreign_process_still_uses_after_its_pod_is_gone_is_never_handed_over(make_node):
    node = make_node(A100)
    app = node.start_plugin()
    clock = [1000.0]
    app.reconciler.clock = lambda: clock[0]
    running(node, "a", Want(0, "1g.5gb", 6, 1), pid=900)
    node.core.delete_namespaced_pod("a", "default", grace_period_seconds=0)  # pid 900 does not go away

    result = node.tick()

    assert [reason for _, reason in result.failed] == ["in-use"]
    assert starts(node) == [6]
    assert app.metrics.value("dynmig_plugin_reclaims_stuck") == 1
    events = node.core.list_namespaced_event("default").items
    [event] = [e for e in events if e.reason == "MigInstanceReclaimStuck"]
    assert event.type == "Warning" and "1g.5gb@6:1" in event.message and "default/a" in event.message
    [published] = decode_leftovers(node.node_annotations()[LEFTOVERS])
    assert (published.placement_value.start, published.reason) == (6, "reclaiming")

    node.add_pod("c", [[Want(0, "1g.5gb", 6, 1)]])
    refused = node.admit("c")
    assert not refused.ok and "owned-by-another-pod" in refused.error
    assert [p.pid for p in node.sim.gpu(0).processes] == [900]

    assert node.tick().deferred  # backing off: no destroy attempt before the delay is over
    assert len(node.destroys()) == 0 or all(e.get("code") == IN_USE for e in node.destroys())

    node.sim.clear_busy(node.uuids[0])
    clock[0] += 2.0
    assert node.tick().destroyed
    assert app.metrics.value("dynmig_plugin_reclaims_stuck") == 0
    assert LEFTOVERS not in node.node_annotations()
    node.kubelet.release(node.core.read_namespaced_pod("c", "default").metadata.uid)
    assert retry_admission(node, "c").ok


def test_a_failing_reclaim_backs_off_exponentially_up_to_a_cap(make_node):
    node = make_node(A100)
    app = node.start_plugin()
    clock = [0.0]
    app.reconciler.clock = lambda: clock[0]
    running(node, "a", Want(0, "1g.5gb", 2, 1), pid=3)
    node.core.delete_namespaced_pod("a", "default", grace_period_seconds=0)
    attempts = []
    for _ in range(200):
        result = node.tick()
        if result.failed:
            attempts.append(clock[0])
        clock[0] += 1.0
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert gaps[:4] == [2.0, 4.0, 8.0, 16.0]
    assert len(attempts) < 12


def test_a_terminating_pods_instance_is_retried_quietly_while_its_containers_stop(make_node):
    node = make_node(A100)
    app = node.start_plugin()
    running(node, "a", Want(0, "1g.5gb", 2, 1), pid=3)
    node.core.delete_namespaced_pod("a", "default")  # graceful: its container still runs

    first, second = node.tick(), node.tick()

    assert [r for _, r in first.failed] == [r for _, r in second.failed] == ["in-use"]  # no back-off
    assert app.metrics.value("dynmig_plugin_reclaims_stuck") == 0
    assert not [
        e for e in node.core.list_namespaced_event("default").items if e.reason == "MigInstanceReclaimStuck"
    ]
    node.sim.clear_busy(node.uuids[0])
    assert node.tick().destroyed and node.instances(0) == []


def test_allocate_waits_briefly_for_an_ended_pods_last_process_to_leave_the_placement(make_node):
    node = make_node(A100)
    app = node.start_plugin()
    running(node, "a", Want(0, "1g.5gb", 3, 1), pid=31)
    node.core.delete_namespaced_pod("a", "default", grace_period_seconds=0)
    assert node.tick().failed  # in use: backing off now
    node.add_pod("c", [[Want(0, "2g.10gb", 2, 2)]])  # overlaps a's 3:1
    timer = threading.Timer(0.5, node.sim.clear_busy, args=(node.uuids[0],))
    timer.start()

    result = node.admit("c")

    timer.join()
    assert result.ok, result.error
    assert [(p, s) for p, s, _, _ in node.instances(0)] == [("2g.10gb", 2)]
    assert app.metrics.value("dynmig_plugin_reclaims_stuck") == 0


def test_the_reclaim_back_off_never_waits_longer_than_its_cap():
    backoff, key = ReclaimBackoff(), InstanceKey("GPU-1", "1g.5gb", 0, 1)
    delays = [backoff.failed(key, 0.0).delay for _ in range(30)]
    assert max(delays) == BACKOFF_CAP and delays[-1] == BACKOFF_CAP
    backoff.clear(key)
    assert backoff.due(key, 0.0) and backoff.failed(key, 0.0).delay == delays[0]


def test_an_existing_instance_with_a_process_on_it_is_refused_until_the_process_ends(make_node):
    node = make_node(A100)
    mig_uuid = leftover(0, "2g.10gb", 0, 2)  # there before the plugin, at the pending pod's placement
    node.add_pod("waiting", [[Want(0, "2g.10gb", 0, 2)]], phase="Pending")
    node.sim.set_busy(
        node.uuids[0],
        pids=(4242,),
        gi_id=node.sim.gpu(0).gpu_instances[0].gi_id,
        ci_id=node.sim.gpu(0).gpu_instances[0].compute_instances[0].ci_id,
    )
    app = node.start_plugin()
    app.allocator.busy_wait = 0.2

    refused = node.admit("waiting")

    assert not refused.ok and "instance-busy" in refused.error and "4242" in refused.error
    assert app.metrics.value("dynmig_plugin_busy_handovers_refused_total") == 1
    assert node.instances(0) == [("2g.10gb", 0, 2, mig_uuid)]  # not destroyed: not this call's
    node.sim.clear_busy(node.uuids[0])
    answer = retry_admission(node, "waiting")
    assert answer.ok
    assert answer.containers[0].response.envs["NVIDIA_VISIBLE_DEVICES"] == mig_uuid


def test_without_a_journal_an_unowned_instance_on_a_busy_gpu_is_kept_and_published_as_occupied(make_node):
    node = make_node(A100)
    node.start_plugin()
    running(node, "a", Want(0, "1g.5gb", 0, 1), pid=1)
    running(node, "b", Want(0, "1g.5gb", 1, 1), pid=2)
    node.stop_plugin()
    node.sim.clear_busy(node.uuids[0], pids=(1,))
    node.core.delete_namespaced_pod("a", "default")
    node.lose_journal()

    app = node.start_plugin()

    assert starts(node) == [0, 1]
    assert app.metrics.value("dynmig_plugin_journal_problems_total", reason="missing") == 1
    [published] = decode_leftovers(node.node_annotations()[LEFTOVERS])
    assert (published.gpuUUID, published.profile, published.placement_value.start, published.reason) == (
        node.uuids[0],
        "1g.5gb",
        0,
        "unowned",
    )
    assert app.metrics.value("dynmig_plugin_unowned_placements", reason="unowned") == 1


def test_a_corrupt_journal_proves_nothing_is_kept_aside_and_is_counted(make_node):
    node = make_node(A100)
    node.start_plugin()
    running(node, "a", Want(0, "1g.5gb", 0, 1), pid=1)
    running(node, "b", Want(0, "1g.5gb", 1, 1), pid=2)
    node.stop_plugin()
    node.sim.clear_busy(node.uuids[0], pids=(1,))
    node.core.delete_namespaced_pod("a", "default")
    good = node.journal_path.read_text()
    node.journal_path.write_text(good.replace('"start":0', '"start":"zero"'))

    app = node.start_plugin()

    assert starts(node) == [0, 1]  # a's instance is no longer proven: never destroyed on the busy GPU
    assert app.journal.status == "corrupt"
    assert app.metrics.value("dynmig_plugin_journal_problems_total", reason="corrupt") == 1
    assert node.journal_path.with_name("instances.json.corrupt").read_text().count('"zero"') == 1
    assert [e["name"] for e in json.loads(node.journal_path.read_text())["entries"]] == ["b"]  # b re-recorded


def test_when_the_journal_cannot_be_written_nothing_is_created(make_node):
    node = make_node(A100)
    app = node.start_plugin()
    state = node.journal_path.parent
    shutil.rmtree(state)
    state.write_text("not a directory")  # the state directory is broken under the plugin

    node.add_pod("a", [[Want(0, "1g.5gb", 0, 1)]])
    result = node.admit("a")

    assert not result.ok and "journal-write" in result.error
    assert node.instances(0) == []
    assert app.metrics.value("dynmig_plugin_journal_problems_total", reason="write-failed") == 1
