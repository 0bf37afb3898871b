"""The node heartbeat a kubelet keeps: its Lease in `kube-node-lease`, renewed every 10 s.

As the kubelet does (nodeLeaseDurationSeconds 40, renewed at a quarter of it): the Lease is named
after the node, held by it (`holderIdentity`), owned by the Node object (so it goes with it), and
its `renewTime` moves on each renewal. `kubectl describe node` shows it; node lifecycle controllers
read it. A renewal that fails (API server down) is tried again at the next tick.
"""

from __future__ import annotations

import datetime
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from sim.kubelet.periodic import Periodic

NAMESPACE = "kube-node-lease"
DURATION_S = 40
RENEW_S = DURATION_S / 4


def micro_time(now: datetime.datetime | None = None) -> str:
    """A metav1.MicroTime as the API writes it (RFC 3339 with microseconds, UTC)."""
    now = now or datetime.datetime.now(datetime.UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class NodeLease(Periodic):
    def __init__(self, node: str, api_client: Any, interval: float = RENEW_S) -> None:
        self.node = node
        self.api = client.CoordinationV1Api(api_client)
        self.core = client.CoreV1Api(api_client)
        self.renewals = 0
        super().__init__(f"kubelet-lease-{node}", interval)

    def start(self) -> NodeLease:
        self.renew()
        return super().start()

    def tick(self) -> None:
        self.renew()

    def renew(self) -> None:
        body = {
            "spec": {
                "holderIdentity": self.node,
                "leaseDurationSeconds": DURATION_S,
                "renewTime": micro_time(),
            }
        }
        try:
            self.api.patch_namespaced_lease(self.node, NAMESPACE, body, _request_timeout=5)
        except ApiException as error:
            if error.status != 404:
                raise
            self.api.create_namespaced_lease(NAMESPACE, self._new(body), _request_timeout=5)
        self.renewals += 1

    def _new(self, body: dict[str, Any]) -> dict[str, Any]:
        node = self.core.read_node(self.node, _request_timeout=5)
        owner = {"apiVersion": "v1", "kind": "Node", "name": self.node, "uid": node.metadata.uid}
        return {"metadata": {"name": self.node, "namespace": NAMESPACE, "ownerReferences": [owner]}, **body}
