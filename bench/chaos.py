"""Chaos: kill -9 device plugins during a create/delete workload and count what users would suffer.

Run as `python bench/chaos.py [--pods 300] [--kills 24] [--seed 1]`. It starts a `dynmig lab`
(simulated API server, kube-scheduler, kubelets and GPUs; dynmig serve and one device plugin per
node as real processes), then keeps a stream of GPU pods coming and going (each pod asks for a 1g,
2g or 3g instance, runs briefly and is deleted) while the plugins are killed with SIGKILL, round
robin: at a random moment, right after pods were created (Allocate in flight), right after a delete
(reclaim in flight), and during startup recovery (killed again before it is ready). The lab's
kubelet restarts a killed plugin in its DaemonSet pod (with kubelet's back-off, shortened); while it
is down, pods in flight and deletions go on but no new pod is created (they would all fail at once),
and the next kill waits until the plugin has been back for 1.5 s. Throughout it checks:

- overlaps: two GPU instances on one GPU, or two running pods, on intersecting slices (or one MIG
  device given to two running pods);
- lost instances: a running pod whose MIG device is gone from NVML or was re-created;
- Allocate failures caused by leftovers (`Insufficient resources`, an instance still owned by
  another pod or still busy) — failures because the plugin was dead at that moment are counted
  apart, they are what a kill costs;
- after everything is deleted: leaked GPU instances and journal entries left.

With `--reuse` the plugins run with idle reuse on (`DYNMIG_IDLE_TTL`, `DYNMIG_IDLE_PER_GPU`; same
namespace), most pods ask for a 1g.5gb so an ended pod's instance is handed to the next one, and a
fifth kill mode lands right after pods were created while the node publishes idle instances (the
hand-over in flight). It also checks:

- busy hand-overs: a pod's workload starting on a MIG device a process already runs on (the
  simulated NVML is watched, so no hand-over between two looks is missed);
- once the workload's last pod is gone (audited then, before the kills still due land on the idle
  node: a restart on a GPU no pod holds cleans it, so an audit after them found nothing idle), each
  instance still on a GPU is journaled idle (`idleSince`) by its node's plugin, within the per-GPU
  cap and its TTL (waiting up to 3 s for the last pass to park them); and at the end, nothing is
  left.

With `--storm SECONDS` it runs as users do, the way the storm of issue 38 was judged: a kill every
SECONDS on a clock (as soon as the plugin is back, no pause), and pods keep coming while a plugin is
down (kube-scheduler may bind them to its node). Each run prints one line: kills, pods, ever Running,
Failed by reason (`failure_reason`), instances lingering > LINGER_S of their plugin's up time with no
active pod holding their placement, lost, overlaps, left after every pod was deleted. A Failed pod
whose create was refused at its reserved placement, or whose journal could not be written, makes
the run unclean; `plugin-unavailable` and `killed-mid-allocate` are what a kill costs.

Writes bench/results/chaos.json (chaos-reuse.json with `--reuse`). The short versions run in
tests/plugin/test_chaos.py and tests/plugin/test_chaos_reuse.py.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import contextlib

from lab.cluster import Lab
from lab.kit import Kit, gpu_pod
from lab.nodes import parse_nodes

from mig.annotations import LEFTOVERS, MIG_ALLOCATIONS, AnnotationError, decode_allocations
from mig.idle import IDLE, decode_idle
from mig.leftovers import decode_leftovers
from mig.types import Placement

RESULTS = Path(__file__).resolve().parent / "results" / "chaos.json"
RESULTS_REUSE = Path(__file__).resolve().parent / "results" / "chaos-reuse.json"
MEMORY = (4000, 4000, 9000, 19000)  # 1g.5gb, 2g.10gb, 3g.20gb on an A100-40GB
MEMORY_REUSE = (4000, 4000, 4000, 4000, 9000)  # mostly alike, so ended pods' instances are reused
KILL_MODES = ("anywhere", "allocate", "after-delete", "startup")
KILL_MODES_REUSE = ("anywhere", "allocate", "reuse", "after-delete", "startup")
IDLE_TTL, IDLE_PER_GPU = 6.0, 2  # seconds; idle instances per GPU
LEFTOVER_SIGNS = ("Insufficient resources", "error 23", "owned-by-another-pod", "instance-busy")
LINGER_S = 10.0  # plugin-up seconds an instance no active pod holds may stay (a reconcile is ~1 s)
# kubelet's nodeStatusUpdateFrequency (10 s) plus the extender's watch and this loop's delay: a pod
# bound that soon after its node's plugin died still finds allocatable > 0 on the Node
KUBELET_WINDOW_S = 12.0
# Failed pods by the reason a user reads in their status (the first sign found names the reason)
FAILURE_REASONS = (
    ("create-refused", ("create-gi", "Insufficient resources", "error 23")),
    ("owned-by-another-pod", ("owned-by-another-pod",)),
    ("instance-busy", ("instance-busy",)),
    ("journal-write", ("journal-write", "ownership journal")),
    ("plugin-unavailable", ("requested number of devices unavailable", "not registered")),
    (
        "killed-mid-allocate",
        ("Stream removed", "Channel closed", "UNAVAILABLE", "unavailable", "Socket closed"),
    ),
)


def failure_reason(message: str, deleted: bool = False) -> str:
    """The reason label of an admission failure's message (pure). `deleted`: the pod was deleted
    before kubelet admitted it (the bench deletes a pod Pending for 60 s; kubelet still admits a
    pod that reaches it already deleted, HandlePodAdditions in pkg/kubelet/kubelet.go, and the
    plugin makes nothing for a pod being deleted): not a cost of the storm."""
    if deleted:
        return "deleted-before-admission"
    return next((label for label, signs in FAILURE_REASONS if any(s in message for s in signs)), "other")


def bound_when(bound: float, seen: float, kills: Sequence[float], window: float = KUBELET_WINDOW_S) -> str:
    """When a pod that failed for an unavailable plugin was bound, against its node's kills (seconds
    into the run; `bound` to the second, as the Binding's PodScheduled condition gives it):
    "in-window" (within `window` after a kill: kubelet's node status had not shown allocatable 0
    yet), "before-kill" (bound before a kill that came before the failure was seen: kubelet admitted
    it only after the kill), "later" (more than `window` after the last kill and no kill since: the
    extender had had time to leave the node out) or "unknown" (no binding time)."""
    if bound < 0:
        return "unknown"
    before = [k for k in kills if k <= bound + 1.0]  # + the condition's one-second resolution
    if before and bound - before[-1] <= window:
        return "in-window"
    if any(bound < k <= seen for k in kills):
        return "before-kill"
    return "later"


def unheld_after(before: float | None, elapsed: float, up: bool) -> float:
    """An instance's unheld plugin-up seconds after a look that found it unheld (pure): the time
    between two looks counts only when both found it unheld and its plugin up. Under load one look
    takes seconds, and the interval before the first unheld look is mostly its pod holding it."""
    if before is None:
        return 0.0
    return before + (elapsed if up else 0.0)


@dataclass
class Report:
    pods: int = 0
    kills: int = 0
    kills_by_mode: dict[str, int] = field(default_factory=dict)
    overlaps: int = 0
    lost_instances: int = 0
    leftover_failures: int = 0
    kill_failures: int = 0  # Allocate failed because the plugin was down at that moment
    other_failures: int = 0
    stuck_pending: int = 0  # informative: a pod may wait for capacity behind long-running ones
    leaked_instances: int = 0
    journal_entries_left: int = 0
    reuse: bool = False
    handovers: int = 0  # pods given a MIG device an earlier pod had (reuse hits), seen in annotations
    busy_handovers: int = 0  # a workload started on a MIG device a process already ran on
    idle_after_delete: int = 0  # instances left once every pod was gone (all journaled idle, or leaked)
    idle_unproven: int = 0  # of those: not journaled idle, over the per-GPU cap, or past the TTL
    storm: bool = False  # pods keep coming while a plugin is down; kills on a clock (users' conditions)
    ever_running: int = 0
    failed_by_reason: dict[str, int] = field(default_factory=dict)
    lingering: int = 0  # instances no active pod held for > LINGER_S of their plugin's up time
    # plugin-unavailable failures seen within KUBELET_WINDOW_S of their node's last kill (kubelet's
    # node status had not shown allocatable 0 yet) and later than that
    unavailable_in_window: int = 0
    unavailable_later: int = 0
    # the same failures by when the pod was bound (`bound_when`): within KUBELET_WINDOW_S after
    # its node's kill, before the kill (kubelet admitted it only after), or later (the extender had
    # had time to leave the node out)
    unavailable_bound: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    load: list[float] = field(default_factory=list)  # the machine's 1-minute load average, every 10 s
    slowest_look: float = 0.0  # the longest seconds between two looks at the pods and GPUs
    # instances a process still ran on after their pod was gone (force-deleted, its containers not
    # stopped yet): not lingering, the plugin never destroys an instance in use
    busy_without_pod: int = 0
    details: list[str] = field(default_factory=list)
    timelines: list[str] = field(default_factory=list)  # one per lingering instance (`timeline`)
    # every instance's most unheld plugin-up seconds: how close the run came to LINGER_S
    unheld_over_5s: int = 0
    unheld_max: float = 0.0
    closest: list[str] = field(default_factory=list)  # timelines of the 3 most unheld below LINGER_S

    @property
    def clean(self) -> bool:
        return not (
            self.overlaps
            or self.lost_instances
            or self.leftover_failures
            or self.leaked_instances
            or self.journal_entries_left
            or self.busy_handovers
            or self.idle_unproven
            or self.lingering
            or self.failed_by_reason.get("create-refused", 0)
            or self.failed_by_reason.get("journal-write", 0)
        )


@dataclass
class Down:
    node: str
    mode: str
    starts: int  # the node's plugin starts when it was killed
    registrations: int
    again_after: float | None = None  # startup mode: kill the next process this long after it starts
    since: float | None = None  # when we began waiting for the next process
    started_at: float | None = None  # when the next process was seen


@dataclass
class Live:
    name: str
    created: float
    hold: float
    running_since: float | None = None
    deleted: bool = False


@dataclass
class Trace:
    """What happened to one GPU instance (one MIG UUID), in seconds into the run, so a lingering one
    tells whose it is: the plugin's (published `reclaiming` long after its pod and processes were
    gone), the test world's (its pod or its processes went late) or the count's."""

    node: str
    where: str  # "1g.24gb@0:3 GI 3 on GPU-…"
    pod: str = ""  # the last pod seen holding its placement
    deleted: float | None = None  # the bench deleted that pod
    terminal: float | None = None  # that pod's phase was first seen terminal
    gone: float | None = None  # that pod was first seen gone from the API
    stopped: float | None = None  # its last process exited (the lab's kubelet stopped the containers)
    unheld: float | None = None  # first look that found no active pod holding it
    published: dict[str, float] = field(default_factory=dict)  # reclaiming / unowned / idle: first seen
    destroyed: float | None = None  # first look that found it gone from the GPU
    journal: str = ""  # its journal entry when it was flagged
    log: list[str] = field(default_factory=list)  # its node's plugin log lines about it
    unheld_s: float = 0.0  # the most plugin-up seconds it stayed unheld (the lingering count's measure)


def timeline(trace: Trace, downs: Sequence[tuple[float, float | None]] = ()) -> str:
    """One line per lingering instance (pure): its pod's end, its processes' end, what the plugin
    published and when it went, and when its plugin was down meanwhile."""

    def at(t: float | None) -> str:
        return "-" if t is None else f"{t:.1f}s"

    published = ", ".join(f"{k} {at(v)}" for k, v in sorted(trace.published.items(), key=lambda kv: kv[1]))
    start = trace.unheld if trace.unheld is not None else 0.0
    end = trace.destroyed if trace.destroyed is not None else float("inf")
    down = ", ".join(f"{at(a)}-{at(b)}" for a, b in downs if a <= end and (b is None or b >= start - 5.0))
    return (
        f"{trace.where} on {trace.node}: pod {trace.pod or '?'} deleted {at(trace.deleted)}, "
        f"terminal {at(trace.terminal)}, gone {at(trace.gone)}; processes ended {at(trace.stopped)}; "
        f"unheld {at(trace.unheld)}; published {published or 'nothing'}; destroyed {at(trace.destroyed)}; "
        f"plugin down {down or 'never'}; journal {trace.journal or 'no entry'}"
    )


class Chaos:
    def __init__(
        self,
        lab: Lab,
        pods: int,
        kills: int,
        concurrency: int,
        seed: int,
        echo=print,
        long_hold: tuple[float, float] = (8.0, 20.0),
        reuse: bool = False,
        storm: float = 0.0,
        warm: int = 0,
    ):
        self.warm = warm  # the plugins keep a warm pool of this many instances per node
        self.storm = storm  # > 0: kills every `storm` seconds, pods created while a plugin is down
        self.started = time.monotonic()
        self.wall0 = time.time()
        self.traces: dict[str, Trace] = {}  # MIG UUID -> what happened to it
        self.lingered: list[str] = []  # MIG UUIDs flagged lingering
        self.deleted_at: dict[str, float] = {}  # pod name -> when the bench deleted it (into the run)
        self.downs: dict[str, list[tuple[float, float | None]]] = {}  # node -> (killed, back) into the run
        self.unheld: dict[tuple[str, str, int], float] = {}  # (node, GPU, GI) -> plugin-up s unheld
        self.killed_at: dict[str, float] = {}  # node -> when its plugin was last killed
        self.ever_running: set[str] = set()
        self.last_check = time.monotonic()
        self.last_load = float("-inf")
        self.busy_unheld: set[tuple[str, str, int]] = set()
        self.long_hold = long_hold
        self.reuse = reuse
        self.modes = KILL_MODES_REUSE if reuse else KILL_MODES
        self.memory = MEMORY_REUSE if reuse else MEMORY
        self.owner_of: dict[str, str] = {}  # MIG UUID -> uid of the last pod seen with it
        self.lab, self.kit = lab, Kit(lab)
        self.total, self.kills, self.concurrency = pods, kills, concurrency
        self.rng = random.Random(seed)
        self.echo = echo
        self.report = Report(pods=pods, reuse=reuse, storm=storm > 0)
        self.live: dict[str, Live] = {}
        self.created = 0
        self.first_uuid: dict[str, str] = {}  # pod uid -> MIG UUID first seen
        self.seen_failed: set[str] = set()
        self.flagged: set[str] = set()
        self.fire_at: float | None = None
        self.down: Down | None = None  # the plugin killed last, until it is back
        self.back_at = 0.0
        self.kill_node: str | None = None  # where the armed kill should land (None: any node)
        for runtime in lab.nodes.values():
            _watch_busy(runtime.nvml, self._busy_handover, self._processes_ended)

    # ---- the run

    def run(self, timeout: float = 900.0) -> Report:
        started = time.monotonic()
        deadline = started + timeout
        while (self.created < self.total or self.live) and time.monotonic() < deadline:
            now = time.monotonic()
            pods = {p["metadata"]["name"]: p for p in self.kit.pods()}
            if now - self.last_load >= 10.0:
                self.report.load.append(round(os.getloadavg()[0], 1))
                self.last_load = now
            self._advance(pods, now)
            self._create(now)
            self._check()
            if self.down is not None:
                self._watch_restart(now)
            elif self._kill_due() and self.mode in ("anywhere", "startup") and self.fire_at is None:
                self.fire_at = now + self.rng.uniform(0.0, 0.5)
            if self.down is None and self._kill_due() and self.fire_at is not None and now >= self.fire_at:
                self._kill(self.mode)
                self.fire_at = None
            time.sleep(0.05)
        if self.reuse:
            self._audit_at_the_last_delete()
        while self.report.kills < self.kills or self.down is not None:  # the rest land on an idle node
            if self.down is None:
                self._kill(self.mode)
            self._watch_restart(time.monotonic())
            time.sleep(0.05)
        self._finish()
        self.report.seconds = round(time.monotonic() - started, 1)
        return self.report

    @property
    def mode(self) -> str:
        return self.modes[self.report.kills % len(self.modes)]

    def _kill_due(self) -> bool:
        """Kills are spread evenly over the pod stream: the k-th once k/(kills+1) of the pods exist
        (storm: on a clock, every `storm` seconds, as soon as the plugin is up again)."""
        if self.report.kills >= self.kills:
            return False
        if self.storm:
            return time.monotonic() - self.started >= (self.report.kills + 1) * self.storm
        if time.monotonic() - self.back_at < 1.5:
            return False
        return self.created >= (self.report.kills + 1) * self.total // (self.kills + 1)

    def _arm(self, low: float, high: float, mode: str) -> None:
        if self.mode == mode and self.fire_at is None and self._kill_due():
            self.fire_at = time.monotonic() + self.rng.uniform(low, high)

    # ---- workload

    def _create(self, now: float) -> None:
        made = 0
        while (
            self.created < self.total
            and len(self.live) < self.concurrency
            and (self.down is None or self.storm)
        ):
            name = f"chaos-{self.created:04d}"
            self.kit.create(gpu_pod(name, self.rng.choice(self.memory)))
            # most pods are short; a quarter run long enough to keep their GPU busy across a restart
            hold = (
                self.rng.uniform(0.2, 1.5) if self.rng.random() < 0.75 else self.rng.uniform(*self.long_hold)
            )
            self.live[name] = Live(name, now, hold)
            self.created += 1
            made += 1
        if made:
            self._arm(0.02, 0.4, "allocate")
            if self.mode == "reuse" and self.fire_at is None and self._kill_due():
                kept = self._idle_nodes()
                if kept:  # a hand-over is likely in flight on one of them
                    self.kill_node = self.rng.choice(kept)
                    self._arm(0.0, 0.3, "reuse")

    def _advance(self, pods: dict[str, dict[str, Any]], now: float) -> None:
        for name, live in list(self.live.items()):
            pod = pods.get(name)
            if pod is None:
                if live.deleted:
                    del self.live[name]
                continue
            phase = (pod.get("status") or {}).get("phase") or "Pending"
            if phase == "Failed":
                self._failed(pod)
            if live.deleted:
                continue
            if phase == "Running" and live.running_since is None:
                live.running_since = now
                self.ever_running.add(name)
                self.report.ever_running = len(self.ever_running)
            due = (phase == "Running" and now - (live.running_since or now) >= live.hold) or phase in (
                "Failed",
                "Succeeded",
            )
            if phase == "Pending" and now - live.created > 60:
                self.report.stuck_pending += 1
                why = next(
                    (
                        e.get("message", "")
                        for e in reversed(self.kit.events(name))
                        if e.get("reason") in ("FailedScheduling", "FilteringFailed")
                    ),
                    "",
                )
                self.report.details.append(f"{name} Pending for 60s: {why[:300]}")
                due = True
            if due:
                self._delete(name)
                live.deleted = True
                self._arm(0.0, 0.3, "after-delete")

    def _delete(self, name: str) -> None:
        """Delete a pod gracefully, as a user or its controller does (the last wave too: a pod
        force-deleted while its workload still runs frees its slices in the API before its process
        ends, so the next pod can be placed on an instance still in use and fail; with idle reuse the
        plugin keeps a terminating pod's instance and parks it once the pod is gone, so the audit at
        the last delete still has what it kept to audit)."""
        self.deleted_at.setdefault(name, self._now())
        self.kit.delete(name, wait=False)

    def _failed(self, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        if uid in self.seen_failed:
            return
        self.seen_failed.add(uid)
        message = (pod.get("status") or {}).get("message") or ""
        reason = failure_reason(message, deleted=bool(pod["metadata"].get("deletionTimestamp")))
        self.report.failed_by_reason[reason] = self.report.failed_by_reason.get(reason, 0) + 1
        if reason == "plugin-unavailable":
            node = (pod.get("spec") or {}).get("nodeName") or ""
            since = time.monotonic() - self.killed_at.get(node, float("-inf"))
            if since <= KUBELET_WINDOW_S:
                self.report.unavailable_in_window += 1
            else:
                self.report.unavailable_later += 1
            kills = [k for k, _ in self.downs.get(node, [])]
            when = bound_when(self._bound_at(pod), self._now(), kills)
            self.report.unavailable_bound[when] = self.report.unavailable_bound.get(when, 0) + 1
        if self.storm and reason not in ("plugin-unavailable", "killed-mid-allocate"):
            self.report.details.append(f"failed ({reason}) {pod['metadata']['name']}: {message[:300]}")
        if any(sign in message for sign in LEFTOVER_SIGNS):
            self.report.leftover_failures += 1
            self.report.details.append(f"leftover failure {pod['metadata']['name']}: {message[:300]}")
        elif "UNAVAILABLE" in message or "not registered" in message or "unavailable" in message:
            self.report.kill_failures += 1
        else:
            self.report.other_failures += 1
            self.report.details.append(f"other failure {pod['metadata']['name']}: {message[:300]}")

    # ---- kills

    def _idle_nodes(self) -> list[str]:
        """Nodes whose plugin publishes idle instances now."""
        out = []
        for name in sorted(self.lab.nodes):
            with contextlib.suppress(Exception):
                annotations = self.lab.core().read_node(name).metadata.annotations or {}
                if decode_idle(annotations.get(IDLE)):
                    out.append(name)
        return out

    def _kill(self, mode: str) -> None:
        name = self.kill_node or self.rng.choice(sorted(self.lab.nodes))
        self.kill_node = None
        runtime = self.lab.nodes[name]
        view = runtime.kubelet.resource(self.lab.resource)
        self.down = Down(
            name,
            mode,
            runtime.plugin_starts,
            view.registrations if view else 0,
            self.rng.uniform(0.3, 1.2) if mode == "startup" else None,
        )
        _sigkill(runtime.plugin)
        self.killed_at[name] = time.monotonic()
        self.downs.setdefault(name, []).append((self._now(), None))
        self.report.kills += 1
        self.report.kills_by_mode[mode] = self.report.kills_by_mode.get(mode, 0) + 1
        self.echo(f"[chaos] kill -9 #{self.report.kills} ({mode}) of the plugin on {name}")

    def _watch_restart(self, now: float) -> None:
        """Follow the killed plugin until kubelet restarted it and it registered again."""
        down = self.down
        assert down is not None
        runtime = self.lab.nodes[down.node]
        if runtime.plugin_starts <= down.starts:
            down.since = down.since or now
            if now - down.since > 90:
                raise RuntimeError(f"the plugin on {down.node} was not restarted within 90s")
            return
        if down.again_after is not None:  # startup mode: this new process dies during its recovery
            down.started_at = down.started_at or now
            if now - down.started_at >= down.again_after:
                _sigkill(runtime.plugin)
                self.killed_at[down.node] = time.monotonic()
                down.starts, down.again_after, down.since = runtime.plugin_starts, None, None
                self.echo(f"[chaos]   and killed again while it recovers on {down.node}")
            return
        view = runtime.kubelet.resource(self.lab.resource)
        if (
            runtime.plugin is not None
            and runtime.plugin.is_ready()
            and view
            and view.registrations > down.registrations
        ):
            self.echo(f"[chaos]   the plugin on {down.node} is back")
            spans = self.downs.get(down.node) or [(self._now(), None)]
            spans[-1] = (spans[-1][0], self._now())
            self.down = None
            self.back_at = now

    # ---- checks

    def _check(self) -> None:
        before = self.kit.instances()
        pods = self.kit.pods()
        after = self.kit.instances()
        self._check_hardware(after)
        running = [
            p
            for p in pods
            if (p.get("status") or {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
        ]
        self._check_pods(running)
        self._check_lingering(after, pods)
        present = {i.mig_uuid for i in before} | {i.mig_uuid for i in after}
        for pod in running:
            for a in _allocations(pod):
                if a.migUUID is None:
                    continue
                uid = pod["metadata"]["uid"]
                last = self.owner_of.get(a.migUUID)
                if last != uid:
                    if last is not None:
                        self.report.handovers += 1
                    self.owner_of[a.migUUID] = uid
                first = self.first_uuid.setdefault(f"{uid}/{a.containerIndex}/{a.deviceIndex}", a.migUUID)
                if first != a.migUUID:
                    self._flag(
                        f"recreated:{uid}",
                        "lost",
                        f"{pod['metadata']['name']}: MIG device re-created ({first} -> {a.migUUID})",
                    )
                elif a.migUUID not in present and self._still_missing(pod["metadata"]["name"], a.migUUID):
                    self._flag(
                        f"lost:{uid}", "lost", f"{pod['metadata']['name']}: {a.migUUID} gone while Running"
                    )

    def _still_missing(self, name: str, mig_uuid: str) -> bool:
        pod = self.kit.pod(name)
        if (
            pod is None
            or pod["metadata"].get("deletionTimestamp")
            or (pod.get("status") or {}).get("phase") != "Running"
        ):
            return False
        return mig_uuid not in {i.mig_uuid for i in self.kit.instances()}

    def _check_lingering(self, instances: list[Any], pods: list[dict[str, Any]]) -> None:
        """Count, per GPU instance, the seconds its node's plugin was up while no active pod (not
        terminal; a terminating one still holds it) reserved its placement; flag it past LINGER_S."""
        now = time.monotonic()
        elapsed, self.last_check = now - self.last_check, now
        self.report.slowest_look = round(max(self.report.slowest_look, elapsed), 1)
        held = {
            (a.gpuUUID, a.placement_value.start, a.placement_value.size)
            for p in pods
            if (p.get("status") or {}).get("phase") not in ("Failed", "Succeeded")
            for a in _allocations(p)
        }
        kept = self._kept_idle()
        unheld = self._trace(instances, pods, held)
        published = self._node_publications({i.node for i in instances if i.mig_uuid in unheld})
        seen = set()
        for i in instances:
            key = (i.node, i.gpu_uuid, i.gi)
            seen.add(key)
            if (i.gpu_uuid, i.start, i.size) in held or (i.gpu_uuid, i.start, i.size, i.mig_uuid) in kept:
                self.unheld.pop(key, None)
                continue
            if i.mig_uuid in unheld:
                self._published(i, published.get(i.node, {}))
            if i.busy:  # its pod gone (force-deleted), its workload still running: never destroyable
                self.unheld.pop(key, None)
                if key not in self.busy_unheld:
                    self.busy_unheld.add(key)
                    self.report.busy_without_pod += 1
                continue
            up = self.down is None or self.down.node != i.node
            self.unheld[key] = unheld_after(self.unheld.get(key), elapsed, up)
            trace = self.traces[i.mig_uuid]
            trace.unheld_s = max(trace.unheld_s, self.unheld[key])
            if self.unheld[key] > LINGER_S:
                if f"linger:{key}:{i.mig_uuid}" not in self.flagged:
                    self.lingered.append(i.mig_uuid)
                    self.traces[i.mig_uuid].journal = self._journal_entry(i)
                self._flag(
                    f"linger:{key}:{i.mig_uuid}",
                    "linger",
                    f"{i.profile}@{i.start}:{i.size} GI {i.gi} on {i.node}/{i.gpu_uuid} held by no "
                    f"active pod for {self.unheld[key]:.0f}s of plugin-up time "
                    f"({now - self.started:.0f}s into the run)",
                )
        for key in [k for k in self.unheld if k not in seen]:
            del self.unheld[key]

    # ---- timelines of lingering instances

    def _bound_at(self, pod: dict[str, Any]) -> float:
        """Seconds into the run when the pod was bound (its PodScheduled=True condition); -1 unknown."""
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "True":
                with contextlib.suppress(TypeError, ValueError):
                    when = datetime.fromisoformat(str(cond.get("lastTransitionTime")).replace("Z", "+00:00"))
                    return when.timestamp() - self.wall0
        return -1.0

    def _now(self) -> float:
        """Seconds into the run (wall clock, as the plugin's log)."""
        return time.time() - self.wall0

    def _trace(
        self, instances: list[Any], pods: list[dict[str, Any]], held: set[tuple[str, int, int]]
    ) -> set[str]:
        """Follow every instance: its last holder, that pod's end, its destruction. Returns the MIG
        UUIDs no active pod holds now."""
        now = self._now()
        holder: dict[tuple[str, int, int], str] = {}
        phase: dict[str, str] = {}
        for p in pods:
            name = p["metadata"]["name"]
            phase[name] = (p.get("status") or {}).get("phase") or "Pending"
            for a in _allocations(p):
                where = (a.gpuUUID, a.placement_value.start, a.placement_value.size)
                if where not in holder or phase[name] not in ("Failed", "Succeeded"):
                    holder[where] = name
        unheld: set[str] = set()
        alive = set()
        for i in instances:
            alive.add(i.mig_uuid)
            trace = self.traces.setdefault(
                i.mig_uuid, Trace(i.node, f"{i.profile}@{i.start}:{i.size} GI {i.gi} on {i.gpu_uuid}")
            )
            where = (i.gpu_uuid, i.start, i.size)
            if where in held:
                trace.unheld = None
                trace.published.clear()
            elif trace.unheld is None:
                trace.unheld = now
            if where in holder and holder[where] != trace.pod:
                trace.pod, trace.terminal, trace.gone = holder[where], None, None
            if trace.pod:
                trace.deleted = self.deleted_at.get(trace.pod)
                if trace.terminal is None and phase.get(trace.pod) in ("Failed", "Succeeded"):
                    trace.terminal = now
                if trace.gone is None and trace.pod not in phase:
                    trace.gone = now
            if trace.unheld is not None:
                unheld.add(i.mig_uuid)
        for mig_uuid, trace in self.traces.items():
            if trace.destroyed is None and mig_uuid not in alive:
                trace.destroyed = now
        return unheld

    def _node_publications(self, nodes: set[str]) -> dict[str, dict[tuple[str, int, int], list[str]]]:
        """What each node publishes now about its instances, one read per node per look: placement
        (GPU, start, size) -> `reclaiming`, `unowned` (leftovers) or `idle`. A node that could not be
        read tells nothing."""
        out: dict[str, dict[tuple[str, int, int], list[str]]] = {}
        for node in nodes:
            try:
                annotations = self.lab.core().read_node(node).metadata.annotations or {}
                leftovers = decode_leftovers(annotations.get(LEFTOVERS))
                idle = decode_idle(annotations.get(IDLE))
            except Exception:  # noqa: BLE001 - a look that could not read the node tells nothing
                continue
            said: dict[tuple[str, int, int], list[str]] = {}
            for where, reason in [
                *(((x.gpuUUID, x.placement.start, x.placement.size), x.reason) for x in leftovers),
                *(((y.gpuUUID, y.placement.start, y.placement.size), "idle") for y in idle),
            ]:
                said.setdefault(where, []).append(reason)
            out[node] = said
        return out

    def _published(self, i: Any, said: dict[tuple[str, int, int], list[str]]) -> None:
        """Note the first time the instance's node published it as a leftover or idle."""
        now = self._now()
        for reason in said.get((i.gpu_uuid, i.start, i.size), []):
            self.traces[i.mig_uuid].published.setdefault(reason, now)

    def _processes_ended(self, mig_uuids: list[str]) -> None:
        now = self._now()
        for mig_uuid in mig_uuids:
            if mig_uuid in self.traces:
                self.traces[mig_uuid].stopped = now

    def _journal_entry(self, i: Any) -> str:
        runtime = self.lab.nodes[i.node]
        for e in _journal(runtime):
            if (e.get("gpuUUID"), e.get("start"), e.get("size")) == (i.gpu_uuid, i.start, i.size):
                keep = ("name", "migUUID", "idleSince", "gpuInstanceID", "computeInstanceID")
                return json.dumps({k: e.get(k) for k in keep}, separators=(",", ":"))
        return ""

    def _timelines(self) -> None:
        """Each lingering instance's timeline, with its plugin's log lines about it; and the three
        that came closest without lingering."""
        logs: dict[str, list[str]] = {}
        closest = sorted(
            (t for m, t in self.traces.items() if m not in self.lingered and t.unheld_s > 0),
            key=lambda t: -t.unheld_s,
        )[:3]
        self.report.unheld_over_5s = sum(1 for t in self.traces.values() if t.unheld_s > 5.0)
        self.report.unheld_max = round(max((t.unheld_s for t in self.traces.values()), default=0.0), 1)
        for out, traces in (
            (self.report.timelines, [self.traces[m] for m in self.lingered]),
            (self.report.closest, closest),
        ):
            for trace in traces:
                if trace.node not in logs:
                    with contextlib.suppress(OSError):
                        logs[trace.node] = self.lab.plugin_log(trace.node).splitlines()
                out.append(
                    f"unheld {trace.unheld_s:.1f}s: " + timeline(trace, self.downs.get(trace.node, []))
                )
                out += [f"    {line}" for line in _log_lines(logs.get(trace.node, []), trace, self.wall0)]

    def _kept_idle(self) -> set[tuple[str, int, int, str]]:
        """Instances kept on purpose: journaled idle by their plugin (published to the scheduler as
        free slices, handed to the next pod alike), a warm pool's for as long as the pool keeps them,
        idle reuse's within its TTL. Past that, an idle instance lingers like any other."""
        if not (self.reuse or self.warm):
            return set()
        now = time.time()
        return {
            key
            for key, since in self._idle_journal().items()
            if self.warm or now - since <= IDLE_TTL + LINGER_S
        }

    def _check_hardware(self, instances: list[Any]) -> None:
        by_gpu: dict[str, list[Placement]] = {}
        for i in instances:
            by_gpu.setdefault(i.gpu_uuid, []).append(Placement(i.start, i.size))
        for gpu, placements in by_gpu.items():
            if _overlapping(placements):
                self._flag(
                    f"hw:{gpu}:{sorted(placements)}", "overlap", f"GPU {gpu}: instances overlap {placements}"
                )

    def _check_pods(self, running: list[dict[str, Any]]) -> None:
        by_gpu: dict[str, list[Placement]] = {}
        owners: Counter[str] = Counter()
        for pod in running:
            for a in _allocations(pod):
                if a.migUUID is None:
                    continue
                by_gpu.setdefault(a.gpuUUID, []).append(a.placement_value)
                owners[a.migUUID] += 1
        for gpu, placements in by_gpu.items():
            if _overlapping(placements):
                self._flag(f"pods:{gpu}:{sorted(placements)}", "overlap", f"running pods overlap on {gpu}")
        for mig_uuid, count in owners.items():
            if count > 1:
                self._flag(f"shared:{mig_uuid}", "overlap", f"{mig_uuid} given to {count} running pods")

    def _busy_handover(self, detail: str) -> None:
        self.report.busy_handovers += 1
        self.report.details.append(detail)

    def _flag(self, key: str, kind: str, detail: str) -> None:
        if key in self.flagged:
            return
        self.flagged.add(key)
        if kind == "overlap":
            self.report.overlaps += 1
        elif kind == "linger":
            self.report.lingering += 1
        else:
            self.report.lost_instances += 1
        self.report.details.append(detail)

    # ---- the end

    def _finish(self) -> None:
        self._timelines()
        for pod in self.kit.pods():
            self.kit.delete(pod["metadata"]["name"], wait=False)
        try:
            self.kit.wait(lambda: not self.kit.pods(), 90, "every pod to be gone")
            self.kit.wait(
                lambda: not self._left() and not self.kit.bare_gpu_instances(),
                60,
                "every MIG instance to be reclaimed (a warm pool's kept, journaled idle)",
            )
        except AssertionError as error:
            self.report.details.append(str(error))
        leaked = self._left()
        self.report.leaked_instances = len(leaked) + len(self.kit.bare_gpu_instances())
        self.report.details += [
            f"leaked {i.profile}@{i.start}:{i.size} on {i.node}/{i.gpu_uuid}" for i in leaked
        ]
        with contextlib.suppress(AssertionError):
            self.kit.wait(lambda: self._journal_entries() == 0, 15, "empty journals")
        self.report.journal_entries_left = self._journal_entries()

    def _left(self) -> list[Any]:
        """Instances still on a GPU; with a warm pool, those not journaled idle (the pool keeps its own)."""
        if not self.warm:
            return self.kit.instances()
        idle = self._idle_journal()
        return [i for i in self.kit.instances() if (i.gpu_uuid, i.start, i.size, i.mig_uuid) not in idle]

    def _audit_at_the_last_delete(self) -> None:
        """The workload's last pod is gone: audit what its plugins keep idle now, before the kills
        still due land on the idle node (a restart on a GPU no pod holds cleans it, idle instances
        included, and by then their TTL is over: an audit after them finds nothing to audit)."""
        while self.down is not None:  # a kill in flight: its plugin is back first
            self._watch_restart(time.monotonic())
            time.sleep(0.05)
        with contextlib.suppress(AssertionError):  # the last deletes' instances are parked next pass
            self.kit.wait(self._all_journaled_idle, 10.0, "the last instances journaled idle")
        self._audit_idle()

    def _idle_journal(self) -> dict[tuple[str, int, int, str], float]:
        journaled: dict[tuple[str, int, int, str], float] = {}
        for runtime in self.lab.nodes.values():
            for e in _journal(runtime):
                if e.get("idleSince") is not None:
                    journaled[(e["gpuUUID"], e["start"], e["size"], e.get("migUUID") or "")] = e["idleSince"]
        return journaled

    def _all_journaled_idle(self) -> bool:
        journaled = self._idle_journal()
        return not self.kit.bare_gpu_instances() and all(
            (i.gpu_uuid, i.start, i.size, i.mig_uuid) in journaled for i in self.kit.instances()
        )

    def _audit_idle(self) -> None:
        """Every pod is gone: what is still on a GPU must be journaled idle, within cap and TTL."""
        with contextlib.suppress(AssertionError):  # a create or destroy half done settles first
            self.kit.wait(lambda: not self.kit.bare_gpu_instances(), 20, "no half-made instance")
        journaled = self._idle_journal()
        now = time.time()
        per_gpu: Counter[str] = Counter()
        left = self.kit.instances()
        self.report.idle_after_delete = len(left)
        for i in left:
            since = journaled.get((i.gpu_uuid, i.start, i.size, i.mig_uuid))
            per_gpu[i.gpu_uuid] += 1
            why = (
                "not journaled idle"
                if since is None
                else f"idle {now - since:.0f}s, past its TTL"
                if now - since > IDLE_TTL + 5  # the plugin's reconcile pass runs about every second
                else "a process runs on it"
                if i.busy
                else ""
            )
            if why:
                self.report.idle_unproven += 1
                self.report.details.append(f"{i.profile}@{i.start}:{i.size} on {i.node}/{i.gpu_uuid}: {why}")
        for gpu, n in per_gpu.items():
            if n > IDLE_PER_GPU:
                self.report.idle_unproven += n - IDLE_PER_GPU
                self.report.details.append(f"{gpu}: {n} idle instances over the cap of {IDLE_PER_GPU}")

    def _journal_entries(self) -> int:
        """Journal entries left (with a warm pool: those not idle)."""
        return sum(
            1
            for runtime in self.lab.nodes.values()
            for e in _journal(runtime)
            if not (self.warm and e.get("idleSince") is not None)
        )


def _journal(runtime: Any) -> list[dict[str, Any]]:
    """The entries of a node's ownership journal ([] when absent or unreadable)."""
    path = runtime.state_file.parent / "plugin-state" / "instances.json"
    try:
        entries = json.loads(path.read_text())["entries"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def _watch_busy(nvml: Any, report: Any, ended: Any = None) -> None:
    """Wrap the simulated NVML's `set_busy` (the simulated kubelet starts each pod's workload with
    it): a workload that starts on a compute instance a process already runs on got a busy one.
    And its `clear_busy` (the workload's processes exit): `ended` hears the MIG UUIDs left idle."""
    original = nvml.set_busy
    original_clear = nvml.clear_busy

    def running(gpu_uuid: str) -> dict[tuple[int, int], str]:
        """(GI, CI) -> MIG UUID of the compute instances a process runs on."""
        for gpu in nvml.gpus():
            if gpu.uuid == gpu_uuid:
                busy = {(p.gi_id, p.ci_id) for p in gpu.processes}
                return {
                    (gi.gi_id, ci.ci_id): ci.mig_uuid
                    for gi in gpu.gpu_instances
                    for ci in gi.compute_instances
                    if (gi.gi_id, ci.ci_id) in busy
                }
        return {}

    def clear_busy(gpu_uuid: str, pids: Any = None) -> None:
        before = running(gpu_uuid) if ended is not None else {}
        original_clear(gpu_uuid, pids)
        if ended is not None:
            after = running(gpu_uuid)
            ended([m for where, m in before.items() if where not in after])

    nvml.clear_busy = clear_busy

    def set_busy(
        gpu_uuid: str, pids: Any = (4242,), *, gi_id: Any = None, ci_id: Any = None, **kw: Any
    ) -> None:
        if gi_id is not None and ci_id is not None:
            for gpu in nvml.gpus():
                if gpu.uuid != gpu_uuid:
                    continue
                there = [p.pid for p in gpu.processes if (p.gi_id, p.ci_id) == (gi_id, ci_id)]
                if there and not set(there) & set(pids):
                    report(f"{gpu_uuid} GI {gi_id} CI {ci_id}: workload {list(pids)} started beside {there}")
        original(gpu_uuid, pids, gi_id=gi_id, ci_id=ci_id, **kw)

    nvml.set_busy = set_busy


def _log_lines(lines: list[str], trace: Trace, wall0: float, most: int = 12) -> list[str]:
    """The plugin's log lines about one instance (its profile@placement on its GPU), from 10 s before
    it was unheld to its destruction, with their time into the run."""
    profile_at, _, rest = trace.where.partition(" GI ")
    gpu = rest.partition(" on ")[2]
    needle = f"{profile_at} on {gpu}"
    low = (trace.unheld or 0.0) - 10.0
    high = (trace.destroyed if trace.destroyed is not None else float("inf")) + 2.0
    out = []
    for line in lines:
        if needle not in line:
            continue
        try:
            stamp = datetime.strptime(line[:23], "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=UTC)
        except ValueError:
            continue
        t = stamp.timestamp() - wall0
        if low <= t <= high:
            out.append(f"{t:.1f}s {line[24:][:260]}")
    return out[-most:]


def _load(samples: list[float]) -> str:
    """The machine's 1-minute load average over the run: median (min-max)."""
    if not samples:
        return "-"
    ordered = sorted(samples)
    return f"{ordered[len(ordered) // 2]:g} ({ordered[0]:g}-{ordered[-1]:g})"


def _sigkill(child: Any) -> None:
    if child is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.process.pid, signal.SIGKILL)
    child.process.wait(10)


def _allocations(pod: dict[str, Any]) -> tuple[Any, ...]:
    try:
        return decode_allocations((pod["metadata"].get("annotations") or {}).get(MIG_ALLOCATIONS))
    except AnnotationError:
        return ()


def _overlapping(placements: list[Placement]) -> bool:
    seen = 0
    for p in placements:
        if p.mask & seen:
            return True
        seen |= p.mask
    return False


def run(
    nodes: str,
    pods: int,
    kills: int,
    concurrency: int,
    seed: int,
    echo=print,
    workdir: Path | None = None,
    long_hold: tuple[float, float] = (8.0, 20.0),
    reuse: bool = False,
    storm: float = 0.0,
    warm: int = 0,
) -> Report:
    """`long_hold`: how long (seconds, from-to) the quarter of long-running pods run; `reuse`: the
    plugins run with idle reuse on (TTL `IDLE_TTL`, cap `IDLE_PER_GPU`), the pods mostly alike;
    `warm`: each plugin keeps a warm pool of that many instances (idle reuse on for it)."""
    env = {
        "DYNMIG_IDLE_TTL": f"{IDLE_TTL:g}" if reuse or warm else "0",
        "DYNMIG_IDLE_PER_GPU": str(IDLE_PER_GPU),
        "DYNMIG_WARM_POOL": str(warm),
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the plugin processes inherit the lab's environment
    try:
        with Lab(parse_nodes(nodes), workdir=workdir, reconcile_interval=1.0) as lab:
            return Chaos(lab, pods, kills, concurrency, seed, echo, long_hold, reuse, storm, warm).run()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="chaos-a=2xA100-SXM4-40GB;chaos-b=2xA100-SXM4-40GB")
    parser.add_argument("--pods", type=int, default=300)
    parser.add_argument("--kills", type=int, default=24)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workdir", type=Path, help="keep the lab's logs and state here")
    parser.add_argument("--reuse", action="store_true", help="the plugins run with idle reuse on")
    parser.add_argument(
        "--storm",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="a kill every SECONDS on a clock, pods created while a plugin is down (as users do)",
    )
    parser.add_argument("--warm", type=int, default=0, metavar="N", help="a warm pool of N per node")
    parser.add_argument(
        "--serve-failover",
        action="store_true",
        help="two scheduler replicas, kill -9 of the leader during a burst of --pods (bench/failover.py)",
    )
    parser.add_argument("--set", action="append", default=[], help="a chart value (with --serve-failover)")
    parser.add_argument(
        "--kill",
        choices=("pod", "serve"),
        default="pod",
        help="with --serve-failover: the leader's pod (a lost node) or only its serve process",
    )
    args = parser.parse_args()
    if args.serve_failover:
        return _serve_failover(args)
    report = run(
        args.nodes,
        args.pods,
        args.kills,
        args.concurrency,
        args.seed,
        workdir=args.workdir,
        reuse=args.reuse,
        storm=args.storm,
        warm=args.warm,
    )
    summary = {k: v for k, v in asdict(report).items() if k != "details"}
    print(json.dumps(summary, indent=2))
    for line in report.details[:40]:
        print("  ", line)
    for line in report.timelines:
        print("   lingering:", line)
    for line in report.closest:
        print("   closest:", line)
    print(
        f"chaos: unheld plugin-up seconds: {report.unheld_over_5s} instance(s) over 5s, "
        f"the most {report.unheld_max:g}s"
    )
    results = RESULTS_REUSE if args.reuse else RESULTS
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps({**summary, "details": report.details}, indent=2))
    print(
        f"chaos: kills {report.kills}, pods {report.pods}, ever Running {report.ever_running}, "
        f"Failed by reason {dict(sorted(report.failed_by_reason.items()))}, lingering > {LINGER_S:g}s "
        f"{report.lingering}, lost {report.lost_instances}, overlaps {report.overlaps}, "
        f"left {report.leaked_instances}; plugin-unavailable within {KUBELET_WINDOW_S:g}s of the "
        f"node's kill {report.unavailable_in_window}, later {report.unavailable_later} (by binding: "
        f"{dict(sorted(report.unavailable_bound.items()))}); "
        f"in use with their pod gone {report.busy_without_pod}; load {_load(report.load)}, slowest look "
        f"{report.slowest_look:g}s; {report.seconds:.0f}s"
    )
    print(
        f"chaos: {report.kills} kill -9 during {report.pods} pods: {report.overlaps} overlaps, "
        f"{report.lost_instances} lost, {report.leftover_failures} Allocate failures from leftovers, "
        f"{report.leaked_instances} leaked, {report.journal_entries_left} journal entries left "
        f"({report.kill_failures} Allocates failed while a plugin was dead) in {report.seconds}s"
        + (
            f"; reuse: {report.handovers} hand-overs, {report.busy_handovers} busy, "
            f"{report.idle_after_delete} idle after the last delete ({report.idle_unproven} unproven)"
            if report.reuse
            else ""
        )
    )
    return 0 if report.clean else 1


def _serve_failover(args: argparse.Namespace) -> int:
    from bench import failover

    result = failover.run(
        args.nodes, args.pods, args.seed, workdir=args.workdir, values=tuple(args.set), kill=args.kill
    )
    for line in result.details[:40]:
        print("  ", line)
    print(result.line())
    return 0 if result.clean else 1


if __name__ == "__main__":
    sys.exit(main())
