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

Writes bench/results/chaos.json. The short version runs in tests/plugin/test_chaos.py.
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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import contextlib

from lab.cluster import Lab
from lab.kit import Kit, gpu_pod
from lab.nodes import parse_nodes

from mig.annotations import MIG_ALLOCATIONS, AnnotationError, decode_allocations
from mig.types import Placement

RESULTS = Path(__file__).resolve().parent / "results" / "chaos.json"
MEMORY = (4000, 4000, 9000, 19000)  # 1g.5gb, 2g.10gb, 3g.20gb on an A100-40GB
KILL_MODES = ("anywhere", "allocate", "after-delete", "startup")
LEFTOVER_SIGNS = ("Insufficient resources", "error 23", "owned-by-another-pod", "instance-busy")


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
    seconds: float = 0.0
    details: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (
            self.overlaps
            or self.lost_instances
            or self.leftover_failures
            or self.leaked_instances
            or self.journal_entries_left
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
    ):
        self.long_hold = long_hold
        self.lab, self.kit = lab, Kit(lab)
        self.total, self.kills, self.concurrency = pods, kills, concurrency
        self.rng = random.Random(seed)
        self.echo = echo
        self.report = Report(pods=pods)
        self.live: dict[str, Live] = {}
        self.created = 0
        self.first_uuid: dict[str, str] = {}  # pod uid -> MIG UUID first seen
        self.seen_failed: set[str] = set()
        self.flagged: set[str] = set()
        self.fire_at: float | None = None
        self.down: Down | None = None  # the plugin killed last, until it is back
        self.back_at = 0.0

    # ---- the run

    def run(self, timeout: float = 900.0) -> Report:
        started = time.monotonic()
        deadline = started + timeout
        while (self.created < self.total or self.live) and time.monotonic() < deadline:
            now = time.monotonic()
            pods = {p["metadata"]["name"]: p for p in self.kit.pods()}
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
        return KILL_MODES[self.report.kills % len(KILL_MODES)]

    def _kill_due(self) -> bool:
        """Kills are spread evenly over the pod stream: the k-th once k/(kills+1) of the pods exist."""
        if self.report.kills >= self.kills or time.monotonic() - self.back_at < 1.5:
            return False
        return self.created >= (self.report.kills + 1) * self.total // (self.kills + 1)

    def _arm(self, low: float, high: float, mode: str) -> None:
        if self.mode == mode and self.fire_at is None and self._kill_due():
            self.fire_at = time.monotonic() + self.rng.uniform(low, high)

    # ---- workload

    def _create(self, now: float) -> None:
        made = 0
        while self.created < self.total and len(self.live) < self.concurrency and self.down is None:
            name = f"chaos-{self.created:04d}"
            self.kit.create(gpu_pod(name, self.rng.choice(MEMORY)))
            # most pods are short; a quarter run long enough to keep their GPU busy across a restart
            hold = (
                self.rng.uniform(0.2, 1.5) if self.rng.random() < 0.75 else self.rng.uniform(*self.long_hold)
            )
            self.live[name] = Live(name, now, hold)
            self.created += 1
            made += 1
        if made:
            self._arm(0.02, 0.4, "allocate")

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
                self.kit.delete(name, wait=False)
                live.deleted = True
                self._arm(0.0, 0.3, "after-delete")

    def _failed(self, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        if uid in self.seen_failed:
            return
        self.seen_failed.add(uid)
        message = (pod.get("status") or {}).get("message") or ""
        if any(sign in message for sign in LEFTOVER_SIGNS):
            self.report.leftover_failures += 1
            self.report.details.append(f"leftover failure {pod['metadata']['name']}: {message[:300]}")
        elif "UNAVAILABLE" in message or "not registered" in message or "unavailable" in message:
            self.report.kill_failures += 1
        else:
            self.report.other_failures += 1
            self.report.details.append(f"other failure {pod['metadata']['name']}: {message[:300]}")

    # ---- kills

    def _kill(self, mode: str) -> None:
        name = self.rng.choice(sorted(self.lab.nodes))
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
        present = {i.mig_uuid for i in before} | {i.mig_uuid for i in after}
        for pod in running:
            for a in _allocations(pod):
                if a.migUUID is None:
                    continue
                uid = pod["metadata"]["uid"]
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

    def _flag(self, key: str, kind: str, detail: str) -> None:
        if key in self.flagged:
            return
        self.flagged.add(key)
        if kind == "overlap":
            self.report.overlaps += 1
        else:
            self.report.lost_instances += 1
        self.report.details.append(detail)

    # ---- the end

    def _finish(self) -> None:
        for pod in self.kit.pods():
            self.kit.delete(pod["metadata"]["name"], wait=False)
        try:
            self.kit.wait(lambda: not self.kit.pods(), 90, "every pod to be gone")
            self.kit.wait(
                lambda: not self.kit.instances() and not self.kit.bare_gpu_instances(),
                60,
                "every MIG instance to be reclaimed",
            )
        except AssertionError as error:
            self.report.details.append(str(error))
        leaked = self.kit.instances()
        self.report.leaked_instances = len(leaked) + len(self.kit.bare_gpu_instances())
        self.report.details += [
            f"leaked {i.profile}@{i.start}:{i.size} on {i.node}/{i.gpu_uuid}" for i in leaked
        ]
        with contextlib.suppress(AssertionError):
            self.kit.wait(lambda: self._journal_entries() == 0, 15, "empty journals")
        self.report.journal_entries_left = self._journal_entries()

    def _journal_entries(self) -> int:
        total = 0
        for runtime in self.lab.nodes.values():
            path = runtime.state_file.parent / "plugin-state" / "instances.json"
            try:
                total += len(json.loads(path.read_text())["entries"])
            except (OSError, ValueError, KeyError):
                continue
        return total


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
) -> Report:
    """`long_hold`: how long (seconds, from-to) the quarter of long-running pods run."""
    with Lab(parse_nodes(nodes), workdir=workdir, reconcile_interval=1.0) as lab:
        return Chaos(lab, pods, kills, concurrency, seed, echo, long_hold).run()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="chaos-a=2xA100-SXM4-40GB;chaos-b=2xA100-SXM4-40GB")
    parser.add_argument("--pods", type=int, default=300)
    parser.add_argument("--kills", type=int, default=24)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workdir", type=Path, help="keep the lab's logs and state here")
    args = parser.parse_args()
    report = run(args.nodes, args.pods, args.kills, args.concurrency, args.seed, workdir=args.workdir)
    summary = {k: v for k, v in asdict(report).items() if k != "details"}
    print(json.dumps(summary, indent=2))
    for line in report.details[:40]:
        print("  ", line)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({**summary, "details": report.details}, indent=2))
    print(
        f"chaos: {report.kills} kill -9 during {report.pods} pods: {report.overlaps} overlaps, "
        f"{report.lost_instances} lost, {report.leftover_failures} Allocate failures from leftovers, "
        f"{report.leaked_instances} leaked, {report.journal_entries_left} journal entries left "
        f"({report.kill_failures} Allocates failed while a plugin was dead) in {report.seconds}s"
    )
    return 0 if report.clean else 1


if __name__ == "__main__":
    sys.exit(main())
