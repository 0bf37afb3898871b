"""The extender's `prioritize` verb for pods with ResourceClaims on dynmig's DRA nodes.

kube-scheduler consults an extender entry without `managedResources` for every pod
(kubernetes `pkg/scheduler/extender.go` `IsInterested`), posts the pod and its feasible nodes
(`Prioritize`) and adds each node's score × the entry's weight × MaxNodeScore/MaxExtenderPriority to
its plugins' scores (`schedule_one.go` `prioritizeNodes`). With DRA claims those plugins tie and the
node would be drawn at random; dynmig scores the nodes by the engine's loss of the claim's best
placements there (`mig.dra.score`), so the pod goes where the engine would have put it, and the
steered slices there list that placement first.

Only claims it can read exactly are scored: every request of the simple profile form
(`mig.dra.score.claim_asks`). A pod with no claim naming the driver is answered with an empty list at
once; a pod with a claim it cannot read, not yet mirrored, or already allocated gets 0 on every
node: never a guess. The reply is a HostPriorityList (`[{"Host", "Score"}]`); errors of the body are
HTTP 400 (kube-scheduler's entry is `ignorable`, so scheduling goes on without the scores).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from mig.catalog import GpuModel
from mig.dra.devices import Gpu
from mig.dra.score import Ask, claim_asks, node_gpus, node_key, scores
from webhooks.extender import BadArgs, ExtenderArgs

MAX_POD_CLAIMS = 128  # the API's limit on pod.spec.resourceClaims (validation: 128 entries)

T = TypeVar("T")


class Claims(Protocol):
    """What prioritize reads: `webhooks.dracache.DraCache`."""

    def claim(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def derived(self, name: str, build: Callable[[list[dict[str, Any]], list[dict[str, Any]]], T]) -> T: ...


def _claim_names(pod: Mapping[str, Any]) -> list[str] | None:
    """The names of the pod's ResourceClaims (from a template: as its status names them); None
    when one is not known yet."""
    spec, status = pod.get("spec"), pod.get("status")
    refs = spec.get("resourceClaims") if isinstance(spec, Mapping) else None
    if not isinstance(refs, list) or not refs:
        return []
    if len(refs) > MAX_POD_CLAIMS:
        raise BadArgs(f"Pod.spec.resourceClaims: more than {MAX_POD_CLAIMS} entries")
    generated = status.get("resourceClaimStatuses") if isinstance(status, Mapping) else None
    by_ref = {
        s.get("name"): s.get("resourceClaimName")
        for s in (generated if isinstance(generated, list) else [])[:MAX_POD_CLAIMS]
        if isinstance(s, Mapping) and isinstance(s.get("name"), str)
    }
    names = []
    for i, ref in enumerate(refs):
        if not isinstance(ref, Mapping) or not isinstance(ref.get("name"), str):
            raise BadArgs(f"Pod.spec.resourceClaims[{i}].name: must be a string")
        name = ref.get("resourceClaimName") or by_ref.get(ref["name"])
        if not isinstance(name, str) or not name:
            return None
        names.append(name)
    return names


class Prioritizer:
    """`prioritize(body)` -> HostPriorityList, from the DRA cache of `driver`'s slices and claims."""

    def __init__(
        self, cache: Claims, driver: str, allowed: Callable[[GpuModel], tuple[str, ...]] | None = None
    ):
        self.cache, self.driver, self.allowed = cache, driver, allowed
        self._mention = f'"{driver}"'

    def _gpus(self) -> dict[str, list[Gpu]]:
        def build(slices: list[dict[str, Any]], claims: list[dict[str, Any]]) -> dict[str, list[Gpu]]:
            return node_gpus(slices, claims, self.driver, self.allowed)

        return self.cache.derived("prioritize-gpus", build)

    def _asks(self, namespace: str, names: Sequence[str]) -> list[Ask] | None:
        """The pod's asks of this driver; [] when it asks nothing of it; None when it cannot be read."""
        asks: list[Ask] = []
        for name in names:
            claim = self.cache.claim(namespace, name)
            if claim is None:
                return None
            status = claim.get("status")
            if self._mention not in json.dumps(claim.get("spec"), separators=(",", ":")):
                continue  # another driver's claim: not ours to score
            if isinstance(status, Mapping) and status.get("allocation"):
                return None  # allocated already: the node is decided, nothing to steer
            got = claim_asks(claim, self.driver)
            if got is None:
                return None
            asks.extend(got)
        return asks

    def __call__(self, body: Any) -> list[dict[str, Any]]:
        args = ExtenderArgs.parse(body)
        names = _claim_names(args.pod)
        if names == []:
            return []  # no claims: nothing for dynmig to say, fast
        namespace = str(args.pod.get("metadata", {}).get("namespace") or "default")
        asks = None if names is None else self._asks(namespace, names)
        if asks == []:
            return []
        if asks is None:
            points = dict.fromkeys(args.node_names, 0)
        else:
            gpus = self._gpus()
            points = scores({n: node_key(gpus[n], asks) if n in gpus else None for n in args.node_names})
        return [{"Host": n, "Score": points[n]} for n in args.node_names]
