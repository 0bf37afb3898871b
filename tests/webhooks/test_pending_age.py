"""How long MIG pods have waited, per reason, on serve's /metrics: what the "pending longer than N
minutes" alert reads (`dynmig_pods_pending_oldest_seconds`)."""

from __future__ import annotations

from webhooks.fleet import Fleet
from webhooks.metrics import Metrics


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def oldest(metrics: Metrics, reason: str) -> float | None:
    return metrics.registry.get_sample_value("dynmig_pods_pending_oldest_seconds", {"reason": reason})


def pod(uid: str) -> dict:
    return {
        "metadata": {"uid": uid, "name": uid, "namespace": "team"},
        "spec": {},
        "status": {"phase": "Pending"},
    }


def test_the_longest_wait_per_reason_counts_from_the_first_refusal_and_ends_with_the_pod():
    clock = Clock()
    fleet = Fleet(clock=clock)
    metrics = Metrics(fleet=fleet.view)
    fleet.set_refused("a", "fragmented")
    clock.now += 30
    fleet.set_refused("b", "fragmented")
    fleet.set_refused("c", "not-enough-free-slices")
    clock.now += 20
    fleet.set_refused("a", "not-enough-free-slices")  # refused again, for another reason: still waiting since
    clock.now += 50

    assert oldest(metrics, "not-enough-free-slices") == 100  # a, since its first refusal
    assert oldest(metrics, "fragmented") == 70  # b

    fleet.delete_pod(pod("a"))
    assert oldest(metrics, "not-enough-free-slices") == 70  # c
    fleet.delete_pod(pod("b"))
    assert oldest(metrics, "fragmented") is None  # no pod waits for that reason: no series
