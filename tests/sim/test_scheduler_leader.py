"""The simulated kube-scheduler elects itself on a Lease as kube-scheduler does (client-go's
leaderelection): one holder schedules, a killed holder is replaced after leaseDuration, a stopped
one releases the Lease, one that cannot renew stops."""

from __future__ import annotations

import uuid

import pytest
from kubernetes import client
from sim.scheduler import ConfigError, Scheduler, parse
from waiting_testkit import wait_for

ELECTION = {
    "leaderElect": True,
    "leaseDuration": "2s",
    "renewDeadline": "1500ms",
    "retryPeriod": "250ms",
    "resourceLock": "leases",
    "resourceName": "gpu-sched",
    "resourceNamespace": "kube-system",
}


def config(**election) -> dict:
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {**ELECTION, **election},
        "profiles": [{"schedulerName": "gpu-sched"}],
    }


def plain_pod(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"schedulerName": "gpu-sched", "containers": [{"name": "c", "image": "x"}]},
    }


@pytest.fixture
def start(apiserver):
    apiserver.create(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "node-1"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
    )
    started: list[Scheduler] = []

    def run(hostname: str, **election) -> Scheduler:
        sched = Scheduler(
            parse(config(**election)),
            apiserver.api_client("kube-scheduler"),
            initial_backoff=0.05,
            max_backoff=0.2,
            hostname=hostname,
        ).start()
        started.append(sched)
        assert sched.wait_synced()
        return sched

    yield run
    for sched in started:
        sched.stop()


def lease(apiserver) -> dict:
    return apiserver.get("leases", "gpu-sched", "kube-system")["spec"]


def scheduled(apiserver, name: str) -> str | None:
    return apiserver.get("pods", name, "default")["spec"].get("nodeName")


def test_only_the_lease_holder_schedules_and_a_killed_holder_is_replaced(apiserver, start):
    a = start("pod-a")
    assert a.wait_leading()
    b = start("pod-b")
    holder = lease(apiserver)["holderIdentity"]
    host, _, unique = holder.partition("_")
    assert host == "pod-a" and uuid.UUID(unique)  # <hostname>_<uuid>, as kube-scheduler names itself
    apiserver.create(plain_pod("first"))
    assert wait_for(lambda: scheduled(apiserver, "first")) == "node-1"
    assert b.stats.attempts == 0 and not b.elector.leading.is_set()

    a.stop(release=False)  # the pod is gone without a chance to let go
    assert b.wait_leading()
    after = lease(apiserver)
    assert after["holderIdentity"].startswith("pod-b_") and after["leaseTransitions"] == 1
    apiserver.create(plain_pod("second"))
    assert wait_for(lambda: scheduled(apiserver, "second")) == "node-1"
    # counted by the binder thread once the Binding is answered, a moment after the API shows it
    assert wait_for(lambda: b.stats.scheduled == 1)


def test_a_stopped_holder_releases_the_lease_for_its_successor(apiserver, start):
    a = start("pod-a")
    assert a.wait_leading()
    a.stop()
    released = lease(apiserver)
    assert released["holderIdentity"] == "" and released["leaseDurationSeconds"] == 1
    b = start("pod-b", leaseDuration="60s", renewDeadline="40s")  # a free Lease is taken at once
    assert b.wait_leading(timeout=10)


def test_a_holder_that_cannot_renew_loses_leadership_and_stops_scheduling(apiserver, start):
    a = start("pod-a")
    assert a.wait_leading()
    leases = client.CoordinationV1Api(apiserver.api_client("admin"))
    taken = leases.read_namespaced_lease("gpu-sched", "kube-system")
    taken.spec.holder_identity = "intruder_1"
    leases.replace_namespaced_lease("gpu-sched", "kube-system", taken)
    assert wait_for(lambda: a.elector.lost)
    apiserver.create(plain_pod("orphan"))
    assert a.stats.attempts == 0 and scheduled(apiserver, "orphan") is None


@pytest.mark.parametrize(
    "election, named",
    [
        ({"renewDeadline": "2s"}, "leaseDuration"),
        ({"retryPeriod": "1400ms"}, "renewDeadline"),
        ({"resourceLock": "configmaps"}, "resourceLock"),
        ({"leaseDuration": "soon"}, "leaderElection.leaseDuration"),
    ],
)
def test_unusable_leader_election_settings_are_refused_naming_the_field(election, named):
    with pytest.raises(ConfigError, match=named):
        parse(config(**election))


def test_leader_election_defaults_are_kube_schedulers():
    cfg = parse({"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"})
    e = cfg.leader_election
    assert (e.leader_elect, e.lease_duration, e.renew_deadline, e.retry_period) == (True, 15, 10, 2)
    assert (e.resource_lock, e.resource_name, e.resource_namespace) == (
        "leases",
        "kube-scheduler",
        "kube-system",
    )
