"""Two scheduler replicas (`server.replicas=2`): kill -9 of the leading one during a burst of GPU
pods (the short run of `bench/chaos.py --serve-failover`)."""

from __future__ import annotations

import pytest

from bench import failover


# a lab with two scheduler pods and one node, 8 pods, leaseDuration (15 s) to wait out: about a minute
@pytest.mark.timeout(420)
def test_killing_the_leading_scheduler_replica_during_a_burst_leaves_no_double_reservation_and_every_pod_runs():
    # the chart's defaults: the mutating webhook fails closed and is sent only GPU pods (docs/operating.md,
    # "High availability"): a GPU pod created while the Service still routes to the killed replica is
    # refused and created again, not let through unrouted to the default scheduler, and a pod that
    # asks for no GPU is created at once
    result = failover.run(
        "fo-a=2xA100-SXM4-40GB", pods=8, seed=3, echo=lambda line: None, memory=(4000, 4000, 9000)
    )

    assert result.killed, "a leading replica was killed"
    assert (result.double_reservations, result.overlaps) == (0, 0), result.details
    assert result.running == result.pods == 8, result.details
    assert result.unrouted == 0, "every GPU pod went through the surviving replica's mutating webhook"
    assert result.plain_refused == 0, "the pod without a GPU was created while no replica answered"
    assert result.leader_after is not None, "the other replica leads after the kill"
