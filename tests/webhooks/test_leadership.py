"""HA that holds: two scheduler pods, each a `dynmig serve` and a kube-scheduler that calls only its own
pod's serve on 127.0.0.1, with kube-scheduler's leader election on one Lease. The pod whose
kube-scheduler holds the Lease schedules; when it is deleted the other pod schedules after the
lease runs out, from the reservations recorded in pod annotations, and no two pods share a slice."""

from __future__ import annotations

import datetime as dt
import json
import time
from types import SimpleNamespace

import pytest
from kubernetes import client
from sim.scheduler import Scheduler, parse
from waiting_testkit import eventually
from webhooks_testkit import PluginStandIn, gpu_pod, node, scheduler_configuration

from certs.authority import ServiceIdentity, make_ca, make_serving
from certs.reload import FileSource, TLSReloader
from mig.annotations import BIND_PHASE, MIG_ALLOCATIONS, decode_allocations
from webhooks.runner import Extender, Listeners

LEASE = "dynmig-scheduler"
# kube-scheduler's 15s/10s/2s, scaled down so a test waits seconds, not a quarter of a minute
ELECTION = {
    "leaderElect": True,
    "leaseDuration": "5s",
    "renewDeadline": "3500ms",
    "retryPeriod": "500ms",
    "resourceLock": "leases",
    "resourceName": LEASE,
    "resourceNamespace": "dynmig",
}


@pytest.fixture
def scheduler_pods(apiserver, start_service, tmp_path):
    """start(name) -> one scheduler pod (serve + kube-scheduler) named `name`."""
    now = dt.datetime.now(dt.UTC)
    ca = make_ca(now)
    pair = make_serving(ca, ServiceIdentity("dynmig", "dynmig"), now)
    crt, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    crt.write_bytes(pair.cert_pem())
    key.write_bytes(pair.key_pem())
    running: list[SimpleNamespace] = []

    def start(name: str) -> SimpleNamespace:
        service = start_service(leader_elect=True, identity=name, lease_name=LEASE, namespace="dynmig")
        tls = TLSReloader(FileSource(crt, key), registry=service.metrics.registry)
        tls.start()
        service.tls = tls
        listeners = Listeners(
            service.app, service.metrics_app, tls=tls, extender=Extender(service.extender_app, tls=tls)
        ).start()
        doc = {**scheduler_configuration(listeners.extender_url, ca.cert_pem()), "leaderElection": ELECTION}
        scheduler = Scheduler(
            parse(doc),
            apiserver.api_client("kube-scheduler"),
            initial_backoff=0.05,
            max_backoff=0.5,
            hostname=name,
        ).start()
        assert scheduler.wait_synced()
        pod = SimpleNamespace(
            name=name, service=service, tls=tls, listeners=listeners, scheduler=scheduler, alive=True
        )
        running.append(pod)
        return pod

    yield start
    for pod in running:
        if pod.alive:
            delete(pod, graceful=True)


def delete(pod: SimpleNamespace, graceful: bool) -> None:
    """The pod goes away: kube-scheduler stops (releasing the Lease only when graceful), serve stops."""
    pod.alive = False
    pod.scheduler.stop(release=graceful)
    pod.listeners.stop()
    pod.tls.stop()
    pod.service.stop()


@pytest.fixture
def plugin(apiserver):
    stand_in = PluginStandIn(apiserver).start()
    yield stand_in
    stand_in.stop()


def holder(apiserver) -> str:
    lease = apiserver.get("leases", LEASE, "dynmig")
    return ((lease or {}).get("spec") or {}).get("holderIdentity") or ""


def leader_of(apiserver, pods: list[SimpleNamespace]) -> SimpleNamespace:
    name = eventually(lambda: holder(apiserver).rsplit("_", 1)[0], timeout=30)
    return next(p for p in pods if p.name == name)


def pods_of(apiserver, names: list[str]) -> list[dict]:
    return [apiserver.get("pods", n, "team") for n in names]


def bound_and_allocated(apiserver, names: list[str]) -> bool:
    return all(
        p["spec"].get("nodeName") and (p["metadata"].get("annotations") or {}).get(BIND_PHASE) == "success"
        for p in pods_of(apiserver, names)
    )


def slices(apiserver, names: list[str]) -> list[tuple[str, int, int]]:
    out = []
    for pod in pods_of(apiserver, names):
        for a in decode_allocations(pod["metadata"]["annotations"][MIG_ALLOCATIONS]):
            out += [
                (a.gpuUUID, s, 0)
                for s in range(a.placement_value.start, a.placement_value.start + a.placement_value.size)
            ]
    return out


def create(apiserver, names: list[str]) -> None:
    api = client.CoreV1Api(apiserver.api_client("alice"))
    for name in names:
        api.create_namespaced_pod("team", gpu_pod(name, memory=9000))  # 1g.10gb: seven fit an A100 80GB


def filtered_by(pod: SimpleNamespace) -> float:
    """How many filter calls this pod's serve answered."""
    return sum(
        s.value
        for m in pod.service.metrics.registry.collect()
        if m.name == "dynmig_filter_duration_seconds"
        for s in m.samples
        if s.name.endswith("_count")
    )


def test_only_the_pod_holding_the_lease_schedules_and_the_other_takes_over_when_it_is_deleted(
    apiserver, scheduler_pods, plugin
):
    apiserver.create(node("n1", gpus=1))
    pods = [scheduler_pods("dynmig-scheduler-a"), scheduler_pods("dynmig-scheduler-b")]
    first = leader_of(apiserver, pods)
    other = next(p for p in pods if p is not first)
    assert eventually(first.service.leader.is_leader) and not other.service.leader.refresh()

    before = [f"before-{i}" for i in range(4)]
    create(apiserver, before)
    assert eventually(lambda: bound_and_allocated(apiserver, before), timeout=30)
    assert filtered_by(other) == 0  # the follower pod's kube-scheduler never scheduled

    # the leader pod is deleted hard: its kube-scheduler cannot release the Lease
    killed_at = time.monotonic()
    delete(first, graceful=False)
    after = [f"after-{i}" for i in range(3)]
    create(apiserver, after)
    assert eventually(lambda: holder(apiserver).startswith(f"{other.name}_"), timeout=60)
    took_over = time.monotonic() - killed_at
    assert eventually(lambda: bound_and_allocated(apiserver, after), timeout=60)
    scheduled = time.monotonic() - killed_at
    assert other.service.leader.is_leader() and filtered_by(other) >= 3
    print(
        f"failover: the second pod took the Lease {took_over:.1f}s and had scheduled the 3 waiting pods "
        f"{scheduled:.1f}s after the leader pod was deleted (leaseDuration {ELECTION['leaseDuration']})"
    )

    # the new leader knew every reservation from the annotations: no slice is used twice...
    used = slices(apiserver, before + after)
    assert len(used) == len(set(used)) == 7
    # ...and the full GPU takes no eighth pod
    create(apiserver, ["one-too-many"])
    assert eventually(lambda: _refused(apiserver, "one-too-many"), timeout=30)
    assert not apiserver.get("pods", "one-too-many", "team")["spec"].get("nodeName")


def test_a_gracefully_deleted_leader_hands_over_at_once_and_its_successor_schedules(
    apiserver, scheduler_pods, plugin
):
    apiserver.create(node("n1", gpus=1))
    pods = [scheduler_pods("dynmig-scheduler-a"), scheduler_pods("dynmig-scheduler-b")]
    first = leader_of(apiserver, pods)
    other = next(p for p in pods if p is not first)
    create(apiserver, ["early"])
    assert eventually(lambda: bound_and_allocated(apiserver, ["early"]), timeout=30)
    delete(first, graceful=True)  # kube-scheduler releases the Lease on a stop signal
    create(apiserver, ["late"])
    assert eventually(lambda: bound_and_allocated(apiserver, ["late"]), timeout=30)
    assert holder(apiserver).startswith(f"{other.name}_")
    used = slices(apiserver, ["early", "late"])
    assert len(used) == len(set(used)) == 2


def _refused(apiserver, name: str) -> bool:
    events = json.loads(
        client.CoreV1Api(apiserver.api_client("admin"))
        .list_namespaced_event("team", _preload_content=False)
        .data
    )["items"]
    return any(
        e["involvedObject"]["name"] == name and e["reason"] in ("FilteringFailed", "FailedScheduling")
        for e in events
    )


@pytest.mark.parametrize(
    "spec, leads_for",
    [
        (
            {
                "holderIdentity": "pod-a_3f2c",
                "renewTime": "2026-01-01T00:00:00.000000Z",
                "leaseDurationSeconds": 15,
            },
            10.0,
        ),
        (
            {
                "holderIdentity": "pod-a_3f2c",
                "acquireTime": "2026-01-01T00:00:00Z",
                "leaseDurationSeconds": 3,
            },
            2.0,
        ),
        (
            {"holderIdentity": "pod-b_3f2c", "renewTime": "2026-01-01T00:00:00Z", "leaseDurationSeconds": 15},
            0.0,
        ),
        (
            {"holderIdentity": "pod-a-2_3f2c", "renewTime": "2026-01-01T00:00:00Z"},
            0.0,
        ),  # a pod with a longer name
        (
            {"holderIdentity": "", "renewTime": "2026-01-01T00:00:00Z", "leaseDurationSeconds": 1},
            0.0,
        ),  # released
        ({"holderIdentity": "pod-a_3f2c", "renewTime": "yesterday"}, 0.0),
        ({"holderIdentity": ["pod-a"], "renewTime": "2026-01-01T00:00:00Z"}, 0.0),
        (
            {
                "holderIdentity": "pod-a_3f2c",
                "renewTime": "2026-01-01T00:00:00Z",
                "leaseDurationSeconds": "15",
            },
            10.0,
        ),
        ("not a spec", 0.0),
    ],
)
def test_serve_leads_for_two_thirds_of_the_lease_after_its_own_pods_renewal(spec, leads_for):
    from webhooks.leader import leading_until

    renewed = dt.datetime(2026, 1, 1, tzinfo=dt.UTC).timestamp()
    until = leading_until(spec, "pod-a", now=renewed)
    assert (until - renewed if until else 0.0) == pytest.approx(leads_for)


def test_a_renewal_time_in_the_future_never_extends_leadership_beyond_one_window():
    from webhooks.leader import leading_until

    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC).timestamp()
    spec = {"holderIdentity": "pod-a_1", "renewTime": "2027-01-01T00:00:00Z", "leaseDurationSeconds": 15}
    assert leading_until(spec, "pod-a", now=now) == pytest.approx(now + 10)


def test_a_failed_lease_read_keeps_the_known_lease_which_then_runs_out_on_its_own(apiserver):
    from webhooks.kube import Kube
    from webhooks.leader import LeaseFollower

    renewed = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    apiserver.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "dynmig"}})
    apiserver.create(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": LEASE, "namespace": "dynmig"},
            "spec": {
                "holderIdentity": "pod-a_77",
                "leaseDurationSeconds": 3,
                "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            },
        }
    )
    now = [renewed.timestamp() + 1]
    changes: list[bool] = []
    follower = LeaseFollower(
        Kube(apiserver.api_client("scheduler")),
        "dynmig",
        LEASE,
        "pod-a",
        min_refresh=0,
        clock=lambda: now[0],
        on_change=changes.append,
    )
    assert follower.refresh() and changes == [True]
    apiserver.faults.fail_next(verb="get", resource="leases", code=500)
    assert follower.refresh()  # the API failed: what was known still holds...
    now[0] = renewed.timestamp() + 2.1
    assert not follower.is_leader()  # ...until 2/3 of the lease after its renewal, with no read at all
    assert not follower.refresh() and changes == [True, False]
    other = LeaseFollower(
        Kube(apiserver.api_client("scheduler")),
        "dynmig",
        LEASE,
        "pod-b",
        min_refresh=0,
        clock=lambda: renewed.timestamp(),
    )
    assert not other.refresh()  # another pod's kube-scheduler holds it


def test_each_replica_says_on_its_metrics_whether_it_leads(apiserver, scheduler_pods):
    apiserver.create(node("n1", gpus=1))
    pods = [scheduler_pods("dynmig-scheduler-a"), scheduler_pods("dynmig-scheduler-b")]
    first = leader_of(apiserver, pods)
    other = next(p for p in pods if p is not first)

    def leads(pod: SimpleNamespace) -> float | None:
        return pod.service.metrics.registry.get_sample_value("dynmig_leader")

    assert eventually(lambda: leads(first) == 1.0)
    assert leads(other) == 0.0
