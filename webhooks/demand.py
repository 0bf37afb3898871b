"""What the filter sees, fed to the engine's demand estimate (`mig.placement.demand`).

Each pod counts as one arrival however often kube-scheduler filters it (a refused pod is retried), its
lifetime runs from its first reservation to the moment it stops holding slices, and the engine's
pricing is refreshed every `REFRESH` changes of the estimate, not at every filter (a mix costs a
walk over the window). One pool, the whole fleet. Memory stays bounded: at most `MAX_PODS` pods are
remembered, the oldest forgotten first. Node slots for pods asking N whole GPUs on one node are priced
only with `node_pricing` (serve's --node-pricing, off by default): on held-out real-trace windows that
term refused more GPU-work than the best simple rule (docs/packing.md).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from mig.placement import PlacementIndex, PodRequest
from mig.placement.demand import DemandEstimate
from mig.placement.request import Memory

POOL = ""
REFRESH = 25
MAX_PODS = 100_000


class DemandFeed:
    def __init__(self, index: PlacementIndex, clock: Callable[[], float], node_pricing: bool = False) -> None:
        self.index = index
        self.clock = clock
        self.node_pricing = node_pricing
        self.estimate = DemandEstimate()
        self._pods: OrderedDict[str, tuple[tuple[Memory, ...], float | None]] = OrderedDict()
        self._applied = 0

    def arrived(self, uid: str, request: PodRequest) -> None:
        """The filter is asked about this pod (the first time counts)."""
        if uid in self._pods:
            return
        asks = tuple(memory for _, _, memory in request.devices())
        self._pods[uid] = (asks, None)
        if len(self._pods) > MAX_PODS:
            self._pods.popitem(last=False)
        self.estimate.arrived(POOL, asks, self.clock())
        self._refresh()

    def placed(self, uid: str) -> None:
        """The pod got a reservation: its lifetime starts (at its first one)."""
        entry = self._pods.get(uid)
        if entry is not None and entry[1] is None:
            self._pods[uid] = (entry[0], self.clock())

    def ended(self, uid: str) -> None:
        """The pod no longer holds slices (gone or finished): its lifetime is known."""
        entry = self._pods.pop(uid, None)
        if entry is not None and entry[1] is not None:
            self.estimate.ended(POOL, entry[0], self.clock() - entry[1])
            self._refresh()

    def _refresh(self) -> None:
        if self.estimate.version - self._applied >= REFRESH:
            self._applied = self.estimate.version
            node_mix = self.estimate.node_mix(POOL) if self.node_pricing else ()
            self.index.set_demand(self.estimate.mix(POOL), node_mix)
