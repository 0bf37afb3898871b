"""Binds in progress: what the filter decided and bind has to carry out, shared by the two.

The filter writes nothing to the cluster. Between its answer and the pod's bind, this holds (in
memory, for a bounded time):
- the node chosen for the pod: its bind takes that node's lock, so sending another pod there now
  would only fail that pod's bind on lock contention;
- the pod's reservation: HAMi's filter-time annotations, which bind puts on the Binding (the API
  server copies them onto the pod in the same write that sets spec.nodeName), and the fleet's
  in-flight reservation they record, which bind checks is still the fleet's before it binds.

Nothing survives a restart: a bind that finds no reservation here fails, and kube-scheduler filters
the pod again (its in-memory slices went with the process).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from mig.reconstruct import PodUsage

HELD = "chosen for another pod whose bind is in progress"


@dataclass(frozen=True)
class Reservation:
    """What the filter decided for one pod: its node, the annotations to bind with, the fleet's usage."""

    node: str
    annotations: Mapping[str, str]
    usage: PodUsage


@dataclass
class PendingBinds:
    ttl: float = 30.0  # how long a chosen node is held for its pod's bind
    reservation_ttl: float = 30.0  # how long a pod's reservation waits for its bind
    clock: Callable[[], float] = time.monotonic
    _chosen: dict[str, tuple[str, float]] = field(default_factory=dict)  # node -> (pod uid, deadline)
    # pod uid -> (reservation, deadline), oldest first: every entry expires, so memory stays bounded
    _reserved: OrderedDict[str, tuple[Reservation, float]] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # ---- the filter

    def choose(self, uid: str, reservation: Reservation) -> None:
        """The filter reserved `reservation` for the pod: hold its node and the reservation for the bind."""
        now = self.clock()
        with self._lock:
            self._expire(now)
            self._chosen[reservation.node] = (uid, now + self.ttl)
            self._reserved.pop(uid, None)
            self._reserved[uid] = (reservation, now + self.reservation_ttl)

    def held_for_others(self, uid: str) -> dict[str, str]:
        """Nodes chosen for another pod whose bind has not happened yet, with the reason."""
        now = self.clock()
        out = {}
        with self._lock:
            for node, (owner, deadline) in list(self._chosen.items()):
                if deadline < now:
                    self._chosen.pop(node, None)
                elif owner != uid:
                    out[node] = HELD
        return out

    # ---- bind

    def reservation(self, uid: str) -> Reservation | None:
        """The pod's reservation from its last filter, unless it expired or its bind is done."""
        with self._lock:
            entry = self._reserved.get(uid)
        if entry is None or entry[1] < self.clock():
            return None
        return entry[0]

    def done(self, uid: str, node: str) -> None:
        """The pod's bind finished (either way), or will never come: its node and reservation are no
        longer held for it."""
        with self._lock:
            if self._chosen.get(node, ("",))[0] == uid:
                self._chosen.pop(node, None)
            self._reserved.pop(uid, None)

    def _expire(self, now: float) -> None:
        """Forget reservations whose bind never came (the oldest first; caller holds the lock)."""
        while self._reserved:
            uid, (_, deadline) = next(iter(self._reserved.items()))
            if deadline >= now:
                return
            del self._reserved[uid]
