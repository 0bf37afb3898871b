"""kube-scheduler's scheduling cycle for a pod with ResourceClaims, as far as DRA decides it.

Checked against kubernetes `pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go`
(PreFilter lists every ResourceSlice once per cycle, `ListWithDeviceTaintRules`, and builds one
allocator from them and the devices already allocated; Filter calls `Allocate` per node) and
`pkg/scheduler/schedule_one.go` (`selectHost`: the highest total score wins, ties broken by
reservoir sampling, i.e. uniformly at random).

Assumptions, stated because they decide node choice:

- every node is evaluated: `numFeasibleNodesToFind` returns all nodes below 100
  (`minFeasibleNodesToFind`), and the bench's fleets are smaller;
- scores tie: the DRA plugin scores nothing for exact requests, and the simulated pods differ in no
  resource the default score plugins weigh (NodeResourcesFit's LeastAllocated and
  BalancedAllocation on CPU and memory, image locality, affinities), so `selectHost` picks uniformly
  among the feasible nodes. `least_allocated=True` instead prefers the node with the fewest pods,
  what LeastAllocated does when every pod requests the same CPU;
- slice order: the informer cache's list is a Go map's, so each cycle draws a fresh order from the
  RNG (`shuffle_slices=False` keeps the published order: the best case for a driver that sorts);
- `schedule`: the claims' allocations are written back at once (no other pod is scheduled in
  between); `burst`: pods created together (a Job, a Deployment scale-up) are scheduled one per cycle
  from one publication, each cycle counting the devices the earlier cycles allocated: Reserve hands
  them to the DRA manager as in-flight allocations (`dynamicresources.go` `Reserve` →
  `dra_manager.go` `claimTracker.SignalClaimPendingAllocation`, `inFlightAllocations`) and the next
  PreFilter's `ListAllAllocatedDevices` (`allocateddevices.go`) returns them with the written ones,
  while the driver sees the allocations only when its claim watch or kubelet's prepare reaches it,
  after the scheduler has moved on, so no republish comes in between.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sim.dra.allocator import Allocator, DeviceID, Slice, parse_slice

JSON = dict[str, Any]


@dataclass
class SliceStore:
    """The informer's view of ResourceSlices: objects by name, read once per change."""

    objects: dict[str, JSON] = field(default_factory=dict)
    parsed: dict[str, Slice] = field(default_factory=dict)

    def replace_pool(self, node: str, driver: str, slices: Iterable[JSON]) -> None:
        """The driver republished the node's pool: its new slices replace every old one."""
        for name in [n for n, s in self.parsed.items() if s.node == node and s.driver == driver]:
            del self.objects[name], self.parsed[name]
        for obj in slices:
            name = obj["metadata"]["name"]
            self.objects[name] = obj
            self.parsed[name] = parse_slice(obj)

    def list(self) -> list[Slice]:
        return list(self.parsed.values())


@dataclass
class Scheduler:
    rng: random.Random
    shuffle_slices: bool = True
    least_allocated: bool = False

    def schedule(
        self,
        claims: Sequence[JSON],
        nodes: Sequence[str],
        store: SliceStore,
        classes: dict[str, JSON],
        allocated: Iterable[DeviceID],
        pods_on: dict[str, int] | None = None,
    ) -> tuple[str, list[JSON]] | None:
        """(node, allocation results per claim) for a pod with these claims, or None (unschedulable)."""
        slices = store.list()
        if self.shuffle_slices:
            self.rng.shuffle(slices)
        allocator = Allocator(slices, classes, allocated)
        feasible: list[tuple[str, list[JSON]]] = []
        for node in nodes:
            results = allocator.allocate(node, claims, pool_order=self.rng)
            if results is not None:
                feasible.append((node, results))
        if not feasible:
            return None
        return self._select(feasible, pods_on or {})

    def burst(
        self,
        pods: Sequence[Sequence[JSON]],
        nodes: Sequence[str],
        store: SliceStore,
        classes: dict[str, JSON],
        allocated: Iterable[DeviceID],
        pods_on: dict[str, int] | None = None,
    ) -> list[tuple[str, list[JSON]] | None]:
        """Each pod's (node, results per claim) or None, the pods (their claims) scheduled in a row
        from the store as it is: each cycle counts what the cycles before it allocated."""
        taken = set(allocated)
        count = dict(pods_on or {})
        out: list[tuple[str, list[JSON]] | None] = []
        for claims in pods:
            got = self.schedule(claims, nodes, store, classes, taken, count)
            out.append(got)
            if got is not None:
                count[got[0]] = count.get(got[0], 0) + 1
                for results in got[1]:
                    for r in results["devices"]["results"]:
                        taken.add((r["driver"], r["pool"], r["device"]))
        return out

    def _select(
        self, feasible: list[tuple[str, list[JSON]]], pods_on: dict[str, int]
    ) -> tuple[str, list[JSON]]:
        def score(node: str) -> int:
            return -pods_on.get(node, 0) if self.least_allocated else 0

        best, count, chosen = score(feasible[0][0]), 1, feasible[0]
        for cand in feasible[1:]:
            s = score(cand[0])
            if s > best:
                best, count, chosen = s, 1, cand
            elif s == best:
                count += 1
                if self.rng.randrange(count) == 0:
                    chosen = cand
        return chosen
