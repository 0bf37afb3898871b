"""The node's pool of ResourceSlices, published steered and kept in step with the occupancy.

What is published (`mig.dra.slices.steered_slices`): counters, each profile's candidate placements
best first, and every occupied placement as a device of its own so the allocator keeps counting it.
Occupied means: a live GI (anyone's), or a device kube-scheduler allocated to a claim on this node
that is not prepared yet (read from the claims this plugin watches): dropping such a device from
the pool would let the allocator hand out an overlapping one.

Each change of content bumps the pool's generation; slices are created, replaced and deleted by
name (`<node>-<driver>-...`), owned by the Node (deleted with it, as NVIDIA's driver does). A write
that fails is retried at the next sync; nothing else depends on it having worked.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kubernetes import client as k8s

from kube.errors import KubeError, NotFound, translated
from mig.dra.devices import Gpu, Instance, by_name, counter_set_name, slice_counter
from mig.dra.slices import steered_slices, validate_slice

log = logging.getLogger("dynmig.dra.publish")
TIMEOUT = (5.0, 15.0)
JSON = dict[str, Any]


def pending_instances(
    claims: Iterable[Mapping[str, Any]], gpus: list[Gpu], driver: str, pool: str
) -> dict[str, list[Instance]]:
    """Devices of our pool that claims' allocations name, as instances by GPU UUID."""
    names = by_name(gpus)
    out: dict[str, list[Instance]] = {}
    for claim in claims:
        status = claim.get("status") if isinstance(claim, Mapping) else None
        results = (((status or {}).get("allocation") or {}).get("devices") or {}).get("results")
        if not isinstance(results, list):
            continue
        for r in results[:64]:
            if isinstance(r, Mapping) and r.get("driver") == driver and r.get("pool") == pool:
                found = names.get(str(r.get("device")))
                if found is not None:
                    gpu, d = found
                    out.setdefault(gpu.uuid, []).append(Instance(d.profile, d.placement))
    return out


def zero_slices(slices: list[JSON], gpus: list[Gpu], blocked: Mapping[str, frozenset[int]]) -> None:
    """Publish the `memory-slice-<i>` counters of `blocked` slices (by GPU UUID) as 0 in their GPU's
    counter set: no device consuming one can be allocated (`gpus.unheld_slices` says which)."""
    zero = {
        counter_set_name(g.minor): {slice_counter(i) for i in blocked[g.uuid]}
        for g in gpus
        if g.uuid in blocked
    }
    for s in slices:
        for counter_set in s["spec"].get("sharedCounters") or []:
            for name in zero.get(counter_set["name"], ()):
                if name in counter_set["counters"]:
                    counter_set["counters"][name] = {"value": "0"}


def _content(slices: list[JSON]) -> str:
    """The slices without their generation: what decides whether a republish is needed."""
    stripped = []
    for s in slices:
        spec = {**s["spec"], "pool": {k: v for k, v in s["spec"]["pool"].items() if k != "generation"}}
        stripped.append({"name": s["metadata"]["name"], "spec": spec})
    return json.dumps(stripped, sort_keys=True)


class SlicePublisher:
    def __init__(self, api: k8s.ApiClient, node: str, driver: str):
        self.api = k8s.ResourceV1Api(api)
        self.core = k8s.CoreV1Api(api)
        self.node, self.driver = node, driver
        self.generation = 0
        self._published = ""
        self._owner: JSON | None = None
        self.lock = threading.Lock()
        self.publishes = 0

    def _raw(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> JSON:
        with translated(call.__name__):
            response = call(*args, _preload_content=False, _request_timeout=TIMEOUT, **kwargs)
            data = response.data
        body = json.loads(data) if data else {}
        return body if isinstance(body, dict) else {}

    def _existing(self) -> dict[str, JSON]:
        body = self._raw(self.api.list_resource_slice, field_selector=f"spec.nodeName={self.node}")
        items = [i for i in body.get("items") or [] if isinstance(i, dict)]
        mine = [i for i in items if (i.get("spec") or {}).get("driver") == self.driver]
        for i in mine:
            gen = ((i.get("spec") or {}).get("pool") or {}).get("generation")
            if isinstance(gen, int) and gen > self.generation:
                self.generation = gen  # a previous process's pool: go on from its generation
        return {i["metadata"]["name"]: i for i in mine if isinstance(i.get("metadata"), dict)}

    def _owner_ref(self) -> JSON | None:
        if self._owner is None:
            node = self._raw(self.core.read_node, self.node)
            uid = (node.get("metadata") or {}).get("uid")
            if uid:
                self._owner = {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": self.node,
                    "uid": uid,
                    "controller": True,
                }
        return self._owner

    def sync(self, gpus: list[Gpu], blocked: Mapping[str, frozenset[int]] | None = None) -> bool:
        """Publish the steered pool for `gpus` (the `blocked` slices' counters at 0) if it changed;
        True when the API now has it."""
        with self.lock:
            try:
                return self._sync(gpus, blocked or {})
            except KubeError as error:
                log.warning(
                    "publishing ResourceSlices of %s failed (retried at the next sync): %s", self.node, error
                )
                self._published = ""
                return False

    def _sync(self, gpus: list[Gpu], blocked: Mapping[str, frozenset[int]]) -> bool:
        existing = self._existing()
        desired = steered_slices(self.node, self.driver, gpus, self.generation + 1)
        zero_slices(desired, gpus, blocked)
        content = _content(desired)
        if content == self._published and set(existing) == {s["metadata"]["name"] for s in desired}:
            return True
        self.generation += 1
        owner = self._owner_ref()
        for s in desired:
            problems = validate_slice(s)
            if problems:
                raise KubeError(f"slice {s['metadata']['name']} would be refused: {'; '.join(problems)}")
            if owner is not None:
                s["metadata"]["ownerReferences"] = [owner]
            self._write(s, existing.get(s["metadata"]["name"]))
        for name in set(existing) - {s["metadata"]["name"] for s in desired}:
            with contextlib.suppress(NotFound):
                self._raw(self.api.delete_resource_slice, name)
        self._published = content
        self.publishes += 1
        log.info(
            "published %d ResourceSlices of %s (generation %d)", len(desired), self.node, self.generation
        )
        return True

    def _write(self, s: JSON, current: JSON | None) -> None:
        if current is None:
            self._raw(self.api.create_resource_slice, s)
            return
        s["metadata"]["resourceVersion"] = current["metadata"].get("resourceVersion")
        self._raw(self.api.replace_resource_slice, s["metadata"]["name"], s)
