"""kill -9 of the device plugin with idle reuse on (the short run of `bench/chaos.py --reuse`): pods
churn with matching requests so ended pods' instances are handed to the next ones, kills land
during create, right after pods were created while the node publishes idle instances (the hand-over
in flight), after deletes (reclaim) and during recovery; no instance with a process on it is ever
handed to another pod, and once the workload's last pod is gone what is left is journaled idle,
within the per-GPU cap and its TTL (audited before the last kills clean the idle node), and at the
end nothing. Whether anything is left idle to audit depends on where the kills land (a restarted
plugin on a GPU no pod holds cleans it), so the run does not require it; that a graceful or prompt
delete leaves a journaled idle instance is tested without kills in tests/plugin/test_idle_reuse.py."""

from __future__ import annotations

import pytest

from bench.chaos import run


@pytest.mark.timeout(300)
def test_kill_9_with_idle_reuse_on_hands_no_busy_instance_out_and_leaks_nothing():
    report = run(
        "chaos-a=1xA100-SXM4-40GB",
        pods=30,
        kills=5,
        concurrency=5,
        seed=3,
        echo=lambda line: None,
        long_hold=(4.0, 8.0),
        reuse=True,
    )

    assert report.kills == 5
    assert set(report.kills_by_mode) == {"anywhere", "allocate", "reuse", "after-delete", "startup"}
    assert report.handovers > 0, report.details  # instances were reused: the run tested reuse
    assert report.busy_handovers == 0, report.details
    assert (report.overlaps, report.lost_instances, report.leftover_failures) == (0, 0, 0), report.details
    assert report.idle_unproven == 0, report.details
    assert (report.leaked_instances, report.journal_entries_left) == (0, 0), report.details
