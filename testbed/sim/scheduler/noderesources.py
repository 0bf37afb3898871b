"""kube-scheduler's NodeResourcesFit filter for scalar resources (extended resources such as
`nvidia.com/mig-1g.10gb`, hugepages): a pod fits a node when each resource it requests is at most
the node's allocatable minus what the pods already on the node request.

As upstream (pkg/scheduler/framework/plugins/noderesources/fit.go `fitsRequest`):
- a pod's request is what component-helpers' resource.PodRequests computes: the containers' sum,
  restartable (sidecar) init containers added, at least each regular init container's request
  with the sidecars started before it, plus spec.overhead; only `requests` count (kube-apiserver
  defaults them from limits);
- a zero request is skipped; an extended resource named by an extender's `managedResources` with
  `ignoredByScheduler: true` is skipped (pkg/scheduler/scheduler.go `buildExtenders` appends those
  names to every profile's NodeResourcesFitArgs.IgnoredResources);
- the pods on a node are the assigned pods that are not Succeeded or Failed (the scheduler's pod
  informer selects `status.phase!=Succeeded,status.phase!=Failed`), plus the pods it assumed on the
  node before their binding is seen; each missing resource is one reason,
  `Insufficient <resource name>`.

Not simulated: cpu, memory, ephemeral-storage and the pod count (the lab's nodes declare none of
them) and NodeResourcesFitArgs given in the config.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Mapping
from fractions import Fraction
from typing import Any

from sim.apiserver import quantity

# The assigned pods kube-scheduler's informer keeps (scheduler.go newPodInformer, and assigned).
ASSIGNED_PODS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"

_QUALIFIED = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]"
    r"([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)

Requests = dict[str, Fraction]


def is_extended(name: str) -> bool:
    """v1helper.IsExtendedResourceName: has a domain that is not kubernetes.io's, and is a
    qualified name once prefixed `requests.`."""
    if "/" not in name or "kubernetes.io/" in name or name.startswith("requests."):
        return False
    return bool(_QUALIFIED.match(f"requests.{name}"))


def is_scalar(name: str) -> bool:
    """v1helper.IsScalarResourceName: extended, hugepages-*, kubernetes.io/-prefixed or
    attachable-volumes-*; what NodeInfo keeps in ScalarResources."""
    return (
        is_extended(name)
        or name.startswith("hugepages-")
        or "kubernetes.io/" in name
        or name.startswith("attachable-volumes-")
    )


def _amounts(resources: Any) -> Requests:
    out: Requests = {}
    if not isinstance(resources, Mapping):
        return out
    for name, value in resources.items():
        if not is_scalar(str(name)):
            continue
        try:
            out[str(name)] = quantity.parse(value)[0]
        except quantity.QuantityError:
            continue  # kube-apiserver refuses such a pod; nothing to count
    return out


def _container_requests(container: Any) -> Requests:
    resources = container.get("resources") if isinstance(container, Mapping) else None
    return _amounts((resources or {}).get("requests") if isinstance(resources, Mapping) else None)


def _add(into: Requests, more: Mapping[str, Fraction]) -> None:
    for name, value in more.items():
        into[name] = into.get(name, Fraction(0)) + value


def _max(into: Requests, other: Mapping[str, Fraction]) -> None:
    for name, value in other.items():
        if value > into.get(name, Fraction(0)):
            into[name] = value


def pod_requests(pod: Mapping[str, Any]) -> Requests:
    """The pod's scalar requests as resource.PodRequests computes them."""
    spec = pod.get("spec") or {}
    total: Requests = {}
    for c in spec.get("containers") or []:
        _add(total, _container_requests(c))
    sidecars: Requests = {}
    init_peak: Requests = {}
    for c in spec.get("initContainers") or []:
        wanted = _container_requests(c)
        if isinstance(c, Mapping) and c.get("restartPolicy") == "Always":
            _add(total, wanted)
            _add(sidecars, wanted)
            continue
        with_sidecars = dict(sidecars)
        _add(with_sidecars, wanted)
        _max(init_peak, with_sidecars)
    _max(total, init_peak)
    _add(total, _amounts(spec.get("overhead")))
    return total


def insufficient(
    wanted: Mapping[str, Fraction],
    allocatable: Mapping[str, Fraction],
    requested: Mapping[str, Fraction],
    ignored: Iterable[str] = (),
    backed_by_dra: Callable[[str], bool] = lambda name: False,
) -> list[str]:
    """fitsRequest's reasons for the scalar resources: one `Insufficient <name>` per resource the
    node has too little of, in the pod's order of names (sorted, as a Go map's order is not kept).
    With DRAExtendedResource, an extended resource the node has none of and a DeviceClass maps is
    left to the DynamicResources plugin (fit.go `fitsRequest`, the `draManager` check)."""
    skip = set(ignored)
    reasons = []
    for name in sorted(wanted):
        amount = wanted[name]
        if amount == 0 or (is_extended(name) and name in skip):
            continue
        if is_extended(name) and allocatable.get(name, Fraction(0)) == 0 and backed_by_dra(name):
            continue
        if amount > allocatable.get(name, Fraction(0)) - requested.get(name, Fraction(0)):
            reasons.append(f"Insufficient {name}")
    return reasons


def _key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


class NodeResources:
    """The filter and the per-node sums it needs: fed by an informer of the assigned pods
    (`ASSIGNED_PODS`), and by the scheduler's assume and forget around a binding."""

    def __init__(
        self, ignored: Iterable[str], backed_by_dra: Callable[[str], bool] = lambda name: False
    ) -> None:
        self.ignored = frozenset(ignored)
        self.backed_by_dra = backed_by_dra
        self._lock = threading.Lock()
        self._pods: dict[str, tuple[str, Requests]] = {}  # pod key -> (its node, its requests)
        self._requested: dict[str, Requests] = {}  # node -> what its pods request

    def _set(self, key: str, node: str | None, pod: Mapping[str, Any] | None = None) -> None:
        old = self._pods.pop(key, None)
        if old is not None:
            _add(self._requested.setdefault(old[0], {}), {n: -v for n, v in old[1].items()})
        if node and pod is not None:
            amounts = pod_requests(pod)
            self._pods[key] = (node, amounts)
            _add(self._requested.setdefault(node, {}), amounts)

    # ---- informer callbacks ------------------------------------------------------------------
    def sync_pods(self, items: list[dict[str, Any]]) -> None:
        with self._lock:
            self._pods, self._requested = {}, {}
            for p in items:
                self._set(_key(p), (p.get("spec") or {}).get("nodeName"), p)

    def pod_event(self, kind: str, pod: dict[str, Any]) -> None:
        with self._lock:
            self._set(_key(pod), None if kind == "DELETED" else (pod.get("spec") or {}).get("nodeName"), pod)

    # ---- the scheduling cycle ----------------------------------------------------------------
    def assume(self, pod: Mapping[str, Any], node: str) -> None:
        """The pod counts on the node from its scheduling cycle on, before its binding is seen."""
        with self._lock:
            self._set(_key(pod), node, pod)

    def forget(self, pod: Mapping[str, Any]) -> None:
        """Its binding failed: it no longer counts on the node."""
        with self._lock:
            self._set(_key(pod), None)

    def filter(self, pod: Mapping[str, Any], node: Mapping[str, Any]) -> list[str]:
        """Why the node cannot hold the pod's scalar requests ([] when it can)."""
        wanted = pod_requests(pod)
        if not wanted:
            return []
        name = (node.get("metadata") or {}).get("name", "")
        allocatable = _amounts((node.get("status") or {}).get("allocatable"))
        with self._lock:
            requested = dict(self._requested.get(name, {}))
        return insufficient(wanted, allocatable, requested, self.ignored, self.backed_by_dra)
