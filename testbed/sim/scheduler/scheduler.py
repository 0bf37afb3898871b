"""A kube-scheduler stand-in that calls extenders the way the real one does.

It list-watches unassigned pods and all nodes through the official client, schedules pods whose
`spec.schedulerName` is one of its profiles, one at a time: in-tree fit (with kube-scheduler's
node sampling), then each interested extender's filter, then a host, then binding (the extender's
bind verb, or a Binding) on a pool of threads, one per binding in flight, as kube-scheduler runs
each binding cycle in its own goroutine while the next pod's scheduling cycle starts. Pods with
ResourceClaims go through the DynamicResources plugin (sim.scheduler.dra): held before their claims
exist, claims allocated per node beside the in-tree fit and before the extenders, written before
the binding. Events
(events.k8s.io/v1, as kube-scheduler posts them) are written by a recorder thread, off both paths
(sim.scheduler.recorder). A failed attempt records a `FailedScheduling` Warning event and the
pod's PodScheduled=False condition (reason Unschedulable, or SchedulerError for an error:
`schedule_one.go` `handleSchedulingFailure`, `updatePod`), and the pod is retried after an
exponential backoff.

The queue follows `pkg/scheduler/backend/queue/scheduling_queue.go`: PreEnqueue plugins run when a
pod is put in the active queue (`moveToActiveQ`, from `Add`, `Update`, the backoff flush and the
moves of cluster events), on the pod the informer delivered last, so a pod popped for an attempt
has passed them; a pod they reject waits gated (in `unschedulablePods`) and is moved again when the
pod is updated or a ResourceClaim, ResourceSlice or DeviceClass changes (the DynamicResources
plugin's queueing hints, `isSchedulableAfterPodChange`, `isSchedulableAfterClaimChange`), which
re-runs PreEnqueue. (Running PreEnqueue on the copy popped before the claim controller recorded the
claim lost the wake-up of a pod updated during that check: it stayed gated, with no condition,
until an informer relisted.)

With leaderElection on (kube-scheduler's default) it schedules only while it holds the Lease
(sim.scheduler.leader), and stops for good when it loses it, as kube-scheduler exits then.

Extenders' prioritize verbs are called for the feasible nodes as kube-scheduler does (when more
than one is feasible) and the highest total wins, ties at random. Extended resources are checked
against each node's allocatable as NodeResourcesFit does (sim.scheduler.noderesources), those the
extenders mark ignoredByScheduler skipped. Not simulated: the preempt verb,
scoring plugins (their scores tie),
resource fit of cpu/memory, affinity beyond nodeSelector, the 5-minute unschedulable queue.
"""

from __future__ import annotations

import heapq
import json
import logging
import random
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kubernetes import client, watch

from sim.scheduler import messages
from sim.scheduler.api import ApiWriter
from sim.scheduler.config import SchedulerConfig
from sim.scheduler.dra import CycleState, DraError, DraUnschedulable, DynamicResources
from sim.scheduler.extender import Extender, ExtenderError
from sim.scheduler.fit import PLAIN_POD, is_plain, num_feasible_nodes_to_find, unfit_reason
from sim.scheduler.leader import LeaderElector
from sim.scheduler.noderesources import ASSIGNED_PODS, NodeResources
from sim.scheduler.recorder import EventRecorder

log = logging.getLogger("sim.scheduler")


@dataclass
class Stats:
    attempts: int = 0
    scheduled: int = 0
    unschedulable: int = 0
    errors: int = 0
    last_scheduled_at: float = 0.0  # time.monotonic() of the latest successful binding
    # wall time of the scheduling cycles (a pod's filtering, its extenders' filters included, up to
    # handing its binding to a binder thread or failing it): cycles run one at a time, so attempts /
    # cycle_seconds bounds pods/s
    cycle_seconds: float = 0.0


class Unschedulable(Exception):
    """The attempt failed; the message is the FailedScheduling event text."""


def _key(pod: dict[str, Any]) -> str:
    return f"{pod['metadata'].get('namespace', '')}/{pod['metadata']['name']}"


def _strip_type_meta(obj: dict[str, Any]) -> dict[str, Any]:
    # kube-scheduler's informer objects carry no apiVersion/kind, so neither does what it sends.
    return {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}


class _Informer:
    """List then watch one resource with the official client, as raw JSON, relisting on errors."""

    def __init__(
        self,
        name: str,
        list_fn: Callable[..., Any],
        field_selector: str,
        on_sync: Callable[[list[dict[str, Any]]], None],
        on_event: Callable[[str, dict[str, Any]], None],
        stopping: threading.Event,
    ):
        self.name, self.list_fn, self.field_selector = name, list_fn, field_selector
        self.on_sync, self.on_event, self.stopping = on_sync, on_event, stopping
        self.synced = threading.Event()
        self._watch: watch.Watch | None = None
        self.thread = threading.Thread(target=self._run, name=f"sched-informer-{name}", daemon=True)

    def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                resp = self.list_fn(field_selector=self.field_selector, _preload_content=False)
                doc = json.loads(resp.data)
                rv = doc["metadata"]["resourceVersion"]
                self.on_sync(doc.get("items") or [])
                self.synced.set()
                self._watch = watch.Watch()
                for ev in self._watch.stream(
                    self.list_fn,
                    field_selector=self.field_selector,
                    resource_version=rv,
                    timeout_seconds=30,
                    allow_watch_bookmarks=True,
                    deserialize=False,
                ):
                    if self.stopping.is_set():
                        break
                    obj = ev.get("object") or {}
                    if ev.get("type") == "ERROR":
                        break
                    rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                    if ev.get("type") != "BOOKMARK":
                        self.on_event(ev["type"], obj)
                # The official client raises KeyError on an ERROR event when not deserializing,
                # and ends the stream at timeout: either way, relist and watch again.
            except Exception as exc:  # noqa: BLE001 - the informer must survive an unavailable API
                if not self.stopping.is_set():
                    log.info("informer %s: %s; relisting", self.name, exc)
                    self.stopping.wait(0.2)

    def stop(self) -> None:
        w = self._watch
        if w is not None:
            w.stop()
            _shutdown_socket(getattr(w, "_resp", None))


class Scheduler:
    """Args:
    config: parsed KubeSchedulerConfiguration (sim.scheduler.config.load / parse).
    api_client: an official-client ApiClient (e.g. ApiServer.api_client("kube-scheduler")).
    initial_backoff, max_backoff: override the config's pod backoff (seconds), e.g. 0.05 in tests.
    bind_workers: how many bindings may run at once. kube-scheduler starts one goroutine per binding
        cycle (schedule_one.go), so there is no real limit; the pool's threads start only when
        bindings overlap, and 64 in flight is more than any extender here keeps waiting.
    seed: seed for breaking ties between feasible nodes.
    hostname: the first part of the leader-election identity `<hostname>_<uuid>` and the end of the
        events' reportingInstance `<schedulerName>-<hostname>` (in a pod, kube-scheduler's hostname
        is the pod's name); default this machine's.
    """

    def __init__(
        self,
        config: SchedulerConfig,
        api_client: Any,
        *,
        initial_backoff: float | None = None,
        max_backoff: float | None = None,
        bind_workers: int = 64,
        seed: int | None = None,
        hostname: str | None = None,
    ):
        self.config = config
        self.core = client.CoreV1Api(api_client)
        self.extenders = [Extender(e) for e in sorted(config.extenders, key=lambda e: e.ignorable)]
        self.initial_backoff = config.initial_backoff if initial_backoff is None else initial_backoff
        self.max_backoff = config.max_backoff if max_backoff is None else max_backoff
        self.stats = Stats()
        self._rng = random.Random(seed)
        self._lock = threading.Condition()
        # name -> (node, why a pod without tolerations or nodeSelector does not fit it), kept per node
        # version so a scheduling attempt does not re-derive readiness and taints of every node.
        self._nodes: dict[str, tuple[dict[str, Any], str | None]] = {}
        self._pods: dict[str, dict[str, Any]] = {}
        self._active: deque[str] = deque()
        self._queued: set[str] = set()
        self._backoff: list[tuple[float, str]] = []
        self._backing_off: set[str] = set()
        self._in_flight: set[str] = set()
        self._failures: dict[str, int] = {}
        self.api = ApiWriter(api_client)
        self.dra = DynamicResources(api_client, self.api, random.Random(seed), on_change=self._claims_changed)
        self._gated: dict[str, str] = {}  # pod key -> why DynamicResources' PreEnqueue holds it
        self.fit = NodeResources(
            (mr.name for e in config.extenders for mr in e.managed_resources if mr.ignored_by_scheduler),
            self.dra.backed_by_dra,
        )
        hostname = hostname or socket.gethostname()
        self.recorder = EventRecorder(self.api, hostname)
        self._next_start = 0
        self._stopping = threading.Event()
        self._binders = ThreadPoolExecutor(bind_workers, thread_name_prefix="sched-bind")
        self._informers = [
            _Informer(
                "pods",
                self.core.list_pod_for_all_namespaces,
                "spec.nodeName=",
                self._sync_pods,
                self._pod_event,
                self._stopping,
            ),
            _Informer("nodes", self.core.list_node, "", self._sync_nodes, self._node_event, self._stopping),
            _Informer(
                "assigned-pods",
                self.core.list_pod_for_all_namespaces,
                ASSIGNED_PODS,
                self.fit.sync_pods,
                self.fit.pod_event,
                self._stopping,
            ),
            *self._dra_informers(api_client),
        ]
        self._worker = threading.Thread(target=self._run, name="sched-worker", daemon=True)
        election = config.leader_election
        self.elector = (
            LeaderElector(
                api_client,
                election,
                hostname,
                on_started=self._worker.start,
                on_lost=self._lost,
            )
            if election.leader_elect
            else None
        )

    def _dra_informers(self, api_client: Any) -> list[_Informer]:
        """The DynamicResources plugin's informers: claims, slices, device classes."""
        resource = client.ResourceV1Api(api_client)
        dra, stopping = self.dra, self._stopping
        return [
            _Informer(
                "resourceclaims",
                resource.list_resource_claim_for_all_namespaces,
                "",
                dra.sync_claims,
                dra.claim_event,
                stopping,
            ),
            _Informer(
                "resourceslices", resource.list_resource_slice, "", dra.sync_slices, dra.slice_event, stopping
            ),
            _Informer(
                "deviceclasses", resource.list_device_class, "", dra.sync_classes, dra.class_event, stopping
            ),
        ]

    # ---- lifecycle -----------------------------------------------------------------------------
    def start(self) -> Scheduler:
        for inf in self._informers:
            inf.thread.start()
        if self.elector is not None:
            self.elector.start()  # the scheduling loop starts once the Lease is ours
        else:
            self._worker.start()
        return self

    def wait_leading(self, timeout: float = 30) -> bool:
        return self.elector is None or self.elector.leading.wait(timeout)

    def _lost(self) -> None:
        """Leadership lost: kube-scheduler exits ("leaderelection lost"); this one stops scheduling."""
        self._stopping.set()
        with self._lock:
            self._lock.notify_all()

    def wait_synced(self, timeout: float = 10) -> bool:
        deadline = time.monotonic() + timeout
        return all(inf.synced.wait(max(0.0, deadline - time.monotonic())) for inf in self._informers)

    def stop(self, release: bool = True) -> None:
        """A graceful stop releases the Lease (kube-scheduler's ReleaseOnCancel); `release=False` is a
        process killed without that chance: a successor waits out leaseDuration."""
        self._stopping.set()
        with self._lock:
            self._lock.notify_all()
        if self.elector is not None:
            self.elector.stop(release=release)
        for inf in self._informers:
            inf.stop()
        if self._worker.is_alive():
            self._worker.join(timeout=5)
        self._binders.shutdown(wait=True, cancel_futures=True)
        self.recorder.stop()
        for inf in self._informers:
            inf.thread.join(timeout=5)
        for ext in self.extenders:
            ext.close()

    def __enter__(self) -> Scheduler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- informer callbacks --------------------------------------------------------------------
    def _eligible(self, pod: dict[str, Any]) -> bool:
        spec, meta = pod.get("spec") or {}, pod.get("metadata") or {}
        return (
            spec.get("schedulerName", "default-scheduler") in self.config.scheduler_names
            and not spec.get("nodeName")
            and not meta.get("deletionTimestamp")
            and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        )

    def _enqueue(self, key: str) -> None:
        """scheduling_queue.go `moveToActiveQ` (under the lock): PreEnqueue runs here, on the pod as
        the informer last delivered it, never on a copy taken before; a pod it rejects waits gated,
        out of the active queue, until its claims or the pod change (`_claims_changed`, `_pod_event`).
        A pod queued, backing off or being attempted is left where it is: the attempt's end (or the
        pop) reads the newest copy."""
        if key in self._queued or key in self._backing_off or key in self._in_flight:
            return
        pod = self._pods.get(key)
        why = self.dra.pre_enqueue(pod) if pod is not None else ""
        if why:
            self._gated[key] = why
            return
        self._gated.pop(key, None)
        self._queued.add(key)
        self._active.append(key)
        self._lock.notify_all()

    def _sync_pods(self, items: list[dict[str, Any]]) -> None:
        with self._lock:
            self._pods = {_key(p): p for p in items if self._eligible(p)}
            for key in self._pods:
                self._enqueue(key)

    def _pod_event(self, kind: str, pod: dict[str, Any]) -> None:
        key = _key(pod)
        with self._lock:
            if kind != "DELETED" and self._eligible(pod):
                self._pods[key] = pod
                self._enqueue(key)
            else:
                self._pods.pop(key, None)
                self._failures.pop(key, None)
                self._gated.pop(key, None)

    def _sync_nodes(self, items: list[dict[str, Any]]) -> None:
        with self._lock:
            self._nodes = {n["metadata"]["name"]: (n, unfit_reason(PLAIN_POD, n)) for n in items}

    def _node_event(self, kind: str, node: dict[str, Any]) -> None:
        with self._lock:
            if kind == "DELETED":
                self._nodes.pop(node["metadata"]["name"], None)
            else:
                self._nodes[node["metadata"]["name"]] = (node, unfit_reason(PLAIN_POD, node))

    # ---- the scheduling loop -------------------------------------------------------------------
    def _pop(self) -> tuple[str, dict[str, Any]] | None:
        with self._lock:
            while not self._stopping.is_set():
                now = time.monotonic()
                while self._backoff and self._backoff[0][0] <= now:
                    _, key = heapq.heappop(self._backoff)
                    self._backing_off.discard(key)
                    if key in self._pods:
                        self._enqueue(key)
                while self._active:
                    key = self._active.popleft()
                    self._queued.discard(key)
                    pod = self._pods.get(key)
                    if pod is not None:
                        self._in_flight.add(key)
                        return key, pod
                wait = self._backoff[0][0] - now if self._backoff else 0.5
                self._lock.wait(min(max(wait, 0.001), 0.5))
        return None

    def _run(self) -> None:
        while not self._stopping.is_set():
            item = self._pop()
            if item is None:
                return
            key, pod = item
            try:
                self._schedule_one(key, pod)
            except Exception as exc:
                log.exception("scheduling %s", key)
                self._failed(key, pod, str(exc), error=True)

    def _schedule_one(self, key: str, pod: dict[str, Any]) -> None:
        started = time.perf_counter()
        try:
            self._cycle(key, pod)
        finally:
            self.stats.cycle_seconds += time.perf_counter() - started

    def _cycle(self, key: str, pod: dict[str, Any]) -> None:
        self.stats.attempts += 1
        with self._lock:
            nodes = list(self._nodes.values())
        state: CycleState | None = None
        try:
            if not nodes:
                raise Unschedulable(messages.NO_NODES)
            state = self._pre_filter(pod, len(nodes))
            node = self._find_host(pod, nodes, state)
            if state is not None:
                self.dra.reserve(state, node)
        except Unschedulable as exc:
            self._failed(key, pod, str(exc))
            return
        except (ExtenderError, DraError) as exc:
            self._failed(key, pod, str(exc), error=True)
            return
        self.fit.assume(pod, node)
        self._binders.submit(self._bind, key, pod, node, state)

    def _pre_filter(self, pod: dict[str, Any], num_nodes: int) -> CycleState | None:
        """DynamicResources' PreFilter; its rejection is the whole attempt's FitError."""
        try:
            return self.dra.pre_filter(pod)
        except DraUnschedulable as exc:
            raise Unschedulable(messages.prefilter_error(num_nodes, str(exc))) from exc

    def _claims_changed(self) -> None:
        """A claim, slice or class changed: PreEnqueue runs again for the pods it held (upstream's
        queueing hints `isSchedulableAfterClaimChange` and friends move them; PreEnqueue decides)."""
        with self._lock:
            for key in list(self._gated):
                if key in self._pods:
                    self._enqueue(key)
                else:
                    self._gated.pop(key, None)

    def gated(self, namespace: str, name: str) -> str:
        """Why DynamicResources' PreEnqueue holds the pod ("" when it does not)."""
        with self._lock:
            return self._gated.get(f"{namespace}/{name}", "")

    def _find_host(
        self,
        pod: dict[str, Any],
        nodes: list[tuple[dict[str, Any], str | None]],
        state: CycleState | None = None,
    ) -> str:
        wire_pod = _strip_type_meta(pod)
        reasons: dict[str, str | list[str]] = {}
        feasible: list[dict[str, Any]] = []
        want = num_feasible_nodes_to_find(self.config.percentage_of_nodes_to_score, len(nodes))
        start, processed = self._next_start % len(nodes), 0
        plain = is_plain(pod)
        for i in range(len(nodes)):
            if len(feasible) >= want:
                break
            node, plain_why = nodes[(start + i) % len(nodes)]
            processed += 1
            why: str | list[str] | None = plain_why if plain else unfit_reason(pod, node)
            if not why:
                why = self.fit.filter(pod, node)
            if not why and state is not None:
                why = self.dra.filter(state, node)
            if why:
                reasons[node["metadata"]["name"]] = why
            else:
                feasible.append(node)
        self._next_start = (start + processed) % len(nodes)
        for ext in self.extenders:
            if not feasible:
                break
            if not ext.cfg.filter_verb or not ext.interested(pod):
                continue
            try:
                result = ext.filter(
                    wire_pod,
                    feasible if ext.cfg.node_cache_capable else [_strip_type_meta(n) for n in feasible],
                )
            except ExtenderError:
                if ext.cfg.ignorable:
                    continue
                raise
            reasons.update(result.failed)
            reasons.update(result.failed_unresolvable)
            keep = set(result.node_names)
            feasible = [n for n in feasible if n["metadata"]["name"] in keep]
        if not feasible:
            raise Unschedulable(messages.fit_error(len(nodes), reasons))
        if len(feasible) == 1:
            return feasible[0]["metadata"]["name"]
        return self._rng.choice(self._best_scored(pod, wire_pod, feasible))["metadata"]["name"]

    def _best_scored(
        self, pod: dict[str, Any], wire_pod: dict[str, Any], feasible: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """schedule_one.go `prioritizeNodes` with the plugins' scores tied: each interested
        extender's prioritize scores added up (a failed one skipped), then `selectHost`'s choice
        among the highest (uniform, as its reservoir sampling is)."""
        total: dict[str, int] = {}
        for ext in self.extenders:
            if not ext.cfg.prioritize_verb or not ext.interested(pod):
                continue
            try:
                nodes = feasible if ext.cfg.node_cache_capable else [_strip_type_meta(n) for n in feasible]
                for host, score in ext.prioritize(wire_pod, nodes).items():
                    total[host] = total.get(host, 0) + score
            except ExtenderError:
                continue
        if not total:
            return feasible
        best = max(total.get(n["metadata"]["name"], 0) for n in feasible)
        return [n for n in feasible if total.get(n["metadata"]["name"], 0) == best]

    def _bind(self, key: str, pod: dict[str, Any], node: str, state: CycleState | None = None) -> None:
        """The binding cycle: PreBind (DynamicResources writes the claims), then the bind; a failure
        unreserves what the scheduling cycle reserved."""
        failure = self._try_bind(pod, node, state)
        if failure is not None:
            self.fit.forget(pod)
            if state is not None:
                self.dra.unreserve(state, pod)
            self._failed(key, pod, failure, error=True)
            return
        with self._lock:
            self.stats.scheduled += 1
            self.stats.last_scheduled_at = time.monotonic()
            self._in_flight.discard(key)
            self._pods.pop(key, None)
            self._failures.pop(key, None)
        note = messages.scheduled(pod["metadata"]["namespace"], pod["metadata"]["name"], node)
        self.recorder.record(pod, "Normal", "Scheduled", "Binding", note)

    def _try_bind(self, pod: dict[str, Any], node: str, state: CycleState | None) -> str | None:
        """None once bound, else the FailedScheduling message."""
        try:
            if state is not None:
                self.dra.pre_bind(state, pod, node)
            if not self._extenders_bind(pod, node):
                meta = pod["metadata"]
                body = {
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": node},
                }
                self.api.bind(meta["namespace"], meta["name"], body)
        except (ExtenderError, DraError) as exc:
            return str(exc)
        except client.ApiException as exc:
            return f'running Bind plugin "DefaultBinder": {_api_message(exc)}'
        except Exception as exc:  # noqa: BLE001
            return f"binding failed: {exc}"
        return None

    def _extenders_bind(self, pod: dict[str, Any], node: str) -> bool:
        """kube-scheduler's extendersBinding: the first interested binder extender binds; one that
        fails and is ignorable is skipped for the next, and when none bound, DefaultBinder does."""
        for ext in self.extenders:
            if not ext.cfg.bind_verb or not ext.interested(pod):
                continue
            try:
                ext.bind(pod, node)
            except ExtenderError:
                if ext.cfg.ignorable:
                    continue
                raise
            return True
        return False

    def _failed(self, key: str, pod: dict[str, Any], message: str, error: bool = False) -> None:
        with self._lock:
            if error:
                self.stats.errors += 1
            else:
                self.stats.unschedulable += 1
        self.recorder.record(pod, "Warning", "FailedScheduling", "Scheduling", messages.truncated(message))
        self._set_condition(pod, message, "SchedulerError" if error else "Unschedulable")
        with self._lock:
            self._in_flight.discard(key)
            n = self._failures.get(key, 0) + 1
            self._failures[key] = n
            if key in self._pods and key not in self._backing_off:
                delay = min(self.initial_backoff * (2 ** (n - 1)), self.max_backoff)
                heapq.heappush(self._backoff, (time.monotonic() + delay, key))
                self._backing_off.add(key)
            self._lock.notify_all()

    # ---- API writes ----------------------------------------------------------------------------
    def _set_condition(self, pod: dict[str, Any], message: str, reason: str) -> None:
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("message") == message:
                return
        meta = pod["metadata"]
        patch = {
            "status": {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": reason,
                        "message": message,
                        "lastProbeTime": None,
                        "lastTransitionTime": _now(),
                    }
                ]
            }
        }
        try:
            self.api.patch_pod_status(meta["namespace"], meta["name"], patch)
        except Exception as exc:  # noqa: BLE001 - a condition is informative only
            log.debug("pod condition for %s: %s", _key(pod), exc)


def _shutdown_socket(resp: Any) -> None:
    """Unblock a thread reading a watch stream by shutting its socket down (urllib3 response)."""
    if resp is None:
        return
    try:
        sock = resp._fp.fp.raw._sock  # http.client response -> socket reader -> socket
        sock.shutdown(socket.SHUT_RDWR)
    except Exception:  # noqa: BLE001 - already closed or a different transport: fall back to close
        try:
            resp.close()
        except Exception as exc:  # noqa: BLE001
            log.debug("closing a watch response: %s", exc)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _api_message(exc: client.ApiException) -> str:
    try:
        return json.loads(exc.body).get("message") or str(exc.reason)
    except (TypeError, ValueError):
        return str(exc.reason)
