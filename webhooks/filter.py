"""Extender filter: plan the whole pod with the placement engine and reserve it in memory at once.

The filter writes nothing to the cluster: one `Fleet.decide` plans and reserves under the fleet's
lock (the next filter already sees this reservation), and the pod's HAMi annotations wait in that
reservation for its bind, which carries them on the Binding. A pod that fits nowhere gets per-node
reasons and a `FilteringFailed` event; a pod that fits gets no event of ours (kube-scheduler posts
`Scheduled` once it is bound). A pod refused only because the nodes that could place it are busy
with other pods' binds (locked, or chosen by a reservation whose bind is coming) gets no event
either: kube-scheduler retries it when those binds finish, and its FailedNodes say why meanwhile.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mig import pods
from mig.allowlist import ResourceNames
from mig.annotations import AnnotationError
from mig.placement import PodRequest, RequestError
from mig.pods import PodRecord, gpu_request, is_terminal
from webhooks.extender import BadArgs, ExtenderArgs, ExtenderFilterResult
from webhooks.fleet import Asking, Fleet, Placed
from webhooks.kube import EventRecorder
from webhooks.metrics import Metrics
from webhooks.objects import ObjectError, ObjectMeta, Pod, check

log = logging.getLogger(__name__)


def typed_pod(pod: Mapping[str, Any] | Pod, where: str = "Pod") -> Pod:
    """The pod as the typed model of the fields dynmig reads; BadArgs names a wrong field."""
    if isinstance(pod, Pod):
        return pod
    try:
        return check(Pod, pod, where)
    except ObjectError as error:
        raise BadArgs(str(error)) from None


def pod_request(pod: Mapping[str, Any], names: ResourceNames) -> PodRequest | None:
    """The pod's MIG request (init containers first, HAMi order), or None when it asks for no GPU.

    BadArgs names the field of the wrong type, or the container and resource (or annotation) that
    cannot be read or never fits."""
    typed_pod(pod)
    return _read_request(pod, names)


def _read_request(pod: Mapping[str, Any], names: ResourceNames) -> PodRequest | None:
    """`gpu_request` of a pod whose fields were type-checked (`typed_pod`), errors as BadArgs."""
    try:
        return gpu_request(pod, names)
    except RequestError as error:
        raise BadArgs(str(error)) from None


class PodReadings:
    """A cluster pod's typed model and MIG request, read once per copy of the pod and shared by its
    filter and its bind (the cache replaces a pod's dict on every change and never edits one, so a
    copy read once reads the same again). Bounded: the last `size` copies read."""

    def __init__(self, size: int = 256):
        self._size = size
        self._lock = threading.Lock()
        # id(pod) -> (the pod itself, so its id is not reused while held; names; typed; request)
        self._read: OrderedDict[int, tuple[Mapping[str, Any], ResourceNames, Pod, PodRequest | None]] = (
            OrderedDict()
        )

    def read(self, pod: Mapping[str, Any], names: ResourceNames, where: str) -> tuple[Pod, PodRequest | None]:
        """(typed pod, its request or None when it asks for no GPU); BadArgs names a wrong field."""
        with self._lock:
            found = self._read.get(id(pod))
        if found is not None and found[0] is pod and found[1] == names:
            return found[2], found[3]
        typed = typed_pod(pod, where)
        request = _read_request(pod, names)
        with self._lock:
            self._read[id(pod)] = (pod, names, typed, request)
            self._read.move_to_end(id(pod))
            while len(self._read) > self._size:
                self._read.popitem(last=False)
        return typed, request


def replan_problem(pod: Pod) -> str:
    """Why this pod's reservation must not be planned again (only a pod still waiting for a node may be)."""
    meta = pod.metadata or ObjectMeta()
    if meta.deletionTimestamp:
        return "is terminating"
    if pod.spec and pod.spec.nodeName:
        return f"is already bound to node {pod.spec.nodeName}"
    phase = pod.status.phase if pod.status else None
    if is_terminal(phase):
        return f"has ended ({phase})"
    try:
        held = PodRecord(meta.annotations or {}).holds_instance
    except AnnotationError:
        return ""  # an unreadable record on a pod without a node is replaced by the new plan
    if held:
        return "holds a MIG instance on its node (its reservation has a runtime identity)"
    return ""


_Lookup = Callable[[str, str, str], dict[str, Any] | None]


def _asks_alike(body: Mapping[str, Any], cluster: Mapping[str, Any]) -> bool:
    """The two pods ask for the same devices: `gpu_request` reads only the spec's containers and the
    annotations (and the name and namespace, which the lookup matched)."""
    if body.get("spec") != cluster.get("spec"):
        return False
    return (body.get("metadata") or {}).get("annotations") == (cluster.get("metadata") or {}).get(
        "annotations"
    )


class _NotCached(Exception):
    """`Filter.inline` met a pod the cache does not have (or not with that UID)."""


@dataclass
class Filter:
    fleet: Fleet
    resources: Callable[[], ResourceNames]
    events: EventRecorder
    metrics: Metrics
    # Nodes a bind of pod namespace/name would fail on now because of their node lock, with the reason.
    blocked: Callable[[str, str], Mapping[str, str]] = lambda namespace, name: {}
    # The pod as the cluster has it (cache, else one GET), by namespace/name; None when it does not
    # exist. Filter plans only that pod, never the body kube-scheduler (or anyone) sent.
    lookup: Callable[[str, str, str], dict[str, Any] | None] | None = None
    # Defrag advice for a refused pod by uid: (node, one line), or None (webhooks/defrag.py).
    advice: Callable[[str], tuple[str, str] | None] | None = None
    # The pod from the cache only (no API call), for `inline`; None: `inline` always declines.
    cached: Callable[[str, str, str], dict[str, Any] | None] | None = None
    readings: PodReadings = field(default_factory=PodReadings)  # shared with bind
    # Nodes whose binds take no node lock (webhooks/nodelock.lock_free): a reservation whose bind is
    # coming does not keep other pods off them. None: every node's binds take it.
    lock_free: Callable[[str], bool] | None = None

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        reply = self._answer(body, self.lookup)
        assert reply is not None  # with the lookup that may call the API, every body is answered
        return reply

    def inline(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """The answer, when it needs no API call (the pod is in the cache): the filter makes none
        otherwise, so the server may run it on its event loop. None: call the filter instead."""
        return self._answer(body, self.cached) if self.cached is not None else None

    def _answer(self, body: dict[str, Any], lookup: _Lookup | None) -> dict[str, Any] | None:
        started = time.perf_counter()
        result, full = "error", False
        args = ExtenderArgs.parse(body)  # WireError: not extender args at all (HTTP 400)
        full = args.nodes is not None
        try:
            reply, result = self._filter(args, lookup)
        except _NotCached:
            return None
        except BadArgs as error:
            reply = ExtenderFilterResult(error=str(error))
        self.metrics.filter_latency.labels(result).observe(time.perf_counter() - started)
        return reply.to_wire(full)

    def _filter(self, args: ExtenderArgs, lookup: _Lookup | None) -> tuple[ExtenderFilterResult, str]:
        meta = args.meta
        uid, namespace, name = meta.uid or "", meta.namespace or "", meta.name or ""
        names = self.resources()
        # the body's request decides first (ExtenderArgs.parse has checked its types)
        if self._body_request(args, names, namespace, name, uid) is None:  # not a GPU pod
            return self._skipped(args), "skipped"  # every candidate stays
        raw = self._cluster_pod(namespace, name, uid, lookup)  # a GPU pod: the cluster's, not the body
        pod, request = self.readings.read(raw, names, f"the cluster's pod {namespace}/{name}")
        if request is None:  # not a GPU pod: every candidate stays
            return self._skipped(args), "skipped"
        problem = replan_problem(pod)
        if problem:
            raise BadArgs(f"pod {namespace}/{name} {problem}; dynmig does not plan it again")
        return self._place(args, raw, uid, namespace, name, request, len(pods.containers(raw)), names)

    def _body_request(
        self, args: ExtenderArgs, names: ResourceNames, namespace: str, name: str, uid: str
    ) -> PodRequest | None:
        """What the body's pod asks for. A body that asks exactly what the cached pod asks (the same
        spec and annotations: kube-scheduler sends its copy of the cluster's pod) is read once per
        copy of that pod, shared with the cluster pod's reading below and with its bind."""
        cached = self.cached(namespace, name, uid) if self.cached is not None else None
        if cached is not None and _asks_alike(args.pod, cached):
            return self.readings.read(cached, names, f"the cluster's pod {namespace}/{name}")[1]
        return _read_request(args.pod, names)

    @staticmethod
    def _skipped(args: ExtenderArgs) -> ExtenderFilterResult:
        return ExtenderFilterResult(node_names=list(args.node_names), nodes=list(args.nodes or []))

    def _cluster_pod(self, namespace: str, name: str, uid: str, lookup: _Lookup | None) -> dict[str, Any]:
        """The pod as the cluster has it, if it is the pod the request names (same UID)."""
        if lookup is None:
            raise BadArgs("this filter has no view of the cluster's pods")
        try:
            pod = lookup(namespace, name, uid)
        except Exception as error:  # noqa: BLE001 - API down, timeouts: answered in Error, retried
            raise BadArgs(f"cannot read pod {namespace}/{name}: {str(error)[:300]}") from None
        if pod is None and lookup is self.cached:
            raise _NotCached  # the API may have it (the watch lags): the caller asks `lookup`
        if not isinstance(pod, dict):
            raise BadArgs(f"pod {namespace}/{name} does not exist in the cluster")
        known = (pod.get("metadata") or {}).get("uid") or ""
        if not uid or known != uid:
            raise BadArgs(
                f"pod {namespace}/{name} in the request has uid {uid!r}, the cluster's has {known!r}; "
                "dynmig filters only the pod the cluster has"
            )
        return pod

    def _place(
        self,
        args: ExtenderArgs,
        pod: dict[str, Any],
        uid: str,
        namespace: str,
        name: str,
        request: PodRequest,
        containers: int,
        names: ResourceNames,
    ) -> tuple[ExtenderFilterResult, str]:
        """One decision by the fleet; a refused pod gets each node's reason and, unless only other
        pods' binds keep it out, a FilteringFailed event."""
        hint = self.advice(uid) if self.advice is not None else None
        decision = self.fleet.decide(
            request,
            args.node_names,
            Asking(uid, namespace, name, containers),
            self.blocked(namespace, name),  # binding there would fail on the node lock
            resource=names.count,  # a node whose device plugin is not serving it is left out
            advice=hint[1] if hint else "",
            lock_free=self.lock_free,
        )
        if isinstance(decision, Placed):
            node = decision.plan.node
            chosen = [n for n in (args.nodes or ()) if (n.get("metadata") or {}).get("name") == node]
            return ExtenderFilterResult(node_names=[node], nodes=chosen), "scheduled"
        if decision.event is not None:
            self.events.record(pod, "Warning", "FilteringFailed", decision.event)
        empty: list[str] | None = [] if args.nodes is None else None
        return ExtenderFilterResult(node_names=empty, nodes=[], failed=decision.failed), "unschedulable"
