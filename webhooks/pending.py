"""Binds in progress: what the filter started and bind has to finish, shared by the two.

Between a filter's answer and the pod's bind, two things are pending:
- the node chosen for the pod: its bind takes that node's lock, so sending another pod there now
  would only fail that pod's bind on lock contention (a chosen node is held for `ttl` seconds at most);
- the write of the reservation onto the pod, when it runs after the reply: bind waits for it, and
  a failed write stays visible to the bind until the bind is done with it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field

HELD = "chosen for another pod whose bind is in progress"


@dataclass
class PendingBinds:
    ttl: float = 30.0  # how long a chosen node is held for its pod's bind
    clock: Callable[[], float] = time.monotonic
    _chosen: dict[str, tuple[str, float]] = field(default_factory=dict)  # node -> (pod uid, deadline)
    _writes: dict[str, Future[str]] = field(default_factory=dict)  # pod uid -> write ("" or why it failed)

    # ---- the filter

    def choose(self, uid: str, node: str) -> None:
        """The filter chose `node` for the pod: hold it for the pod's bind."""
        self._chosen[node] = (uid, self.clock() + self.ttl)

    def held_for_others(self, uid: str) -> dict[str, str]:
        """Nodes chosen for another pod whose bind has not happened yet, with the reason."""
        now = self.clock()
        out = {}
        for node, (owner, deadline) in list(self._chosen.items()):  # a copy: binds end meanwhile
            if deadline < now:
                self._chosen.pop(node, None)
            elif owner != uid:
                out[node] = HELD
        return out

    def recording(self, uid: str, write: Future[str]) -> None:
        """The pod's reservation is being written after the reply; its bind waits for `write`."""
        self._writes[uid] = write

    # ---- bind

    def wait_recorded(self, uid: str, timeout: float = 30.0) -> str:
        """Wait for the pod's pending reservation write; "" when written (or none), else why not."""
        write = self._writes.get(uid)
        if write is None:
            return ""
        try:
            error = write.result(timeout)
        except FutureTimeout:
            return "the MIG reservation is still being written to the pod; retry"
        if not error and self._writes.get(uid) is write:
            del self._writes[uid]  # a failure stays until the bind has seen it (see `done`)
        return error

    def done(self, uid: str, node: str, keep_write: bool = False) -> None:
        """The pod's bind finished (either way), or will never come: its node is no longer held for
        it. `keep_write`: a failed write stays for the bind that may still come to see it."""
        if self._chosen.get(node, ("",))[0] == uid:
            self._chosen.pop(node, None)
        if keep_write:
            return
        write = self._writes.get(uid)
        if write is not None and write.done():
            self._writes.pop(uid, None)
