"""The simulated kubelet's node Lease: created owned by the Node, renewed, and kept through an outage."""

from __future__ import annotations

from sim.kubelet.lease import DURATION_S, NAMESPACE, NodeLease
from waiting_testkit import eventually


def lease(apiserver, name: str = "n1"):
    return apiserver.get("leases", name, NAMESPACE)


def test_a_node_lease_is_held_by_the_node_owned_by_it_and_renewed(apiserver, run):
    node = apiserver.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    heartbeat = NodeLease("n1", apiserver.api_client("kubelet"), interval=0.05).start()
    try:
        first = lease(apiserver)
        assert first["spec"]["holderIdentity"] == "n1"
        assert first["spec"]["leaseDurationSeconds"] == DURATION_S
        assert first["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]
        assert eventually(lambda: lease(apiserver)["spec"]["renewTime"] != first["spec"]["renewTime"])
        header, row = (line.split() for line in run("get", "lease", "-n", NAMESPACE).splitlines())
        assert (header[:2], row[:2]) == (["NAME", "HOLDER"], ["n1", "n1"])
    finally:
        heartbeat.stop()


def test_a_lease_renewal_that_fails_is_tried_again_once_the_api_server_is_back(apiserver):
    apiserver.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    heartbeat = NodeLease("n1", apiserver.api_client("kubelet"), interval=0.05).start()
    try:
        apiserver.faults.fail_next(5, verb="patch", code=503)
        renewals = heartbeat.renewals
        assert eventually(lambda: heartbeat.renewals > renewals + 2)
        assert heartbeat._thread.is_alive()
    finally:
        heartbeat.stop()
