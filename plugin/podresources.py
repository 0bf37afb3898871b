"""kubelet's PodResources API (v1 List): which pods kubelet has taken in, for finding Allocate's pod.

kubelet adds each new pod to its pod manager just before admitting it (`HandlePodAdditions` in
pkg/kubelet/kubelet.go: `podManager.AddPod(pod)`, then `canAdmitPod`), admits one pod at a time, and
calls the device plugin's Allocate only inside that admission; PodResources List
(pkg/kubelet/apis/podresources/server_v1.go) lists the pod manager's pods. So while kubelet waits on
our Allocate, every pod List shows besides the one being admitted has finished its admission, and
the pods bound to the node that kubelet has not reached yet are not listed at all.
"""

from __future__ import annotations

import grpc

from plugin.api import podresources_pb2 as pb
from plugin.api import podresources_pb2_grpc as rpc

TIMEOUT_S = 2.0


class PodResourcesError(RuntimeError):
    pass


class KubeletPods:
    def __init__(self, socket: str, timeout: float = TIMEOUT_S):
        self.socket = socket
        self.timeout = timeout
        self._channel = grpc.insecure_channel(f"unix://{socket}")
        self._stub = rpc.PodResourcesListerStub(self._channel)

    def listed(self) -> set[tuple[str, str]]:
        """(namespace, name) of every pod kubelet's pod manager holds; PodResourcesError if unanswered."""
        try:
            response = self._stub.List(pb.ListPodResourcesRequest(), timeout=self.timeout)
        except grpc.RpcError as error:
            raise PodResourcesError(f"PodResources List on {self.socket}: {error.code().name}") from None
        return {(p.namespace, p.name) for p in response.pod_resources}

    def reachable(self) -> bool:
        try:
            self.listed()
        except PodResourcesError:
            return False
        return True

    def close(self) -> None:
        self._channel.close()
