"""The lab's scripted scenarios: the tour, the eight checks of the migration guide, and DRA mode
(`lab.dra_scenario`, on a node started with `@dra`).

Each scenario is a function `(run: Run) -> None` that drives the lab as a person would (pods through
the official client) and records checks on what dynmig wrote (the allocation annotation, events)
and what the simulated GPUs hold. Scenarios start from an empty cluster and leave one behind.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from lab import hami, report
from lab.dra_scenario import dra_mode
from lab.handover_scenario import hami_handover
from lab.kit import Instance, Kit, gpu_pod
from lab.scenario import Run, ScenarioFailed
from mig.annotations import MIG_ALLOCATIONS, USE_GPU_TYPE, USE_GPU_UUID, WEBHOOK_IGNORE_LABEL, MigAllocation

RTX = "RTX PRO 6000"
A100 = "A100"


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    needs: tuple[str, ...]  # GPU model substrings the nodes must have
    run: Callable[[Run], None]
    dra: bool = False  # needs a node in DRA mode (`@dra` in --nodes)
    # what its lab is installed with: a device config's text (unless --policy gives one) and
    # `--set-json` chart values
    policy_text: str | None = None
    json_values: tuple[str, ...] = ()


SCENARIOS: dict[str, Scenario] = {}


def scenario(
    name: str,
    title: str,
    needs: tuple[str, ...] = (RTX,),
    dra: bool = False,
    policy_text: str | None = None,
    json_values: tuple[str, ...] = (),
) -> Callable[[Callable[[Run], None]], Callable[[Run], None]]:
    def register(fn: Callable[[Run], None]) -> Callable[[Run], None]:
        SCENARIOS[name] = Scenario(name, title, needs, fn, dra, policy_text, json_values)
        return fn

    return register


# ---- shared steps ----------------------------------------------------------------------------------


def _running(run: Run, name: str, timeout: float = 30.0) -> None:
    run.wait(lambda: run.kit.wait_phase(name, "Running", timeout), f"{name} is Running")


def _start(run: Run, *pods: dict[str, Any]) -> list[str]:
    """Create every pod first (so they are scheduled side by side), then wait for each to run."""
    for pod in pods:
        run.kit.create(pod)
    names = [pod["metadata"]["name"] for pod in pods]
    for name in names:
        _running(run, name)
    return names


def _one(run: Run, name: str) -> MigAllocation | None:
    entries = run.kit.allocations(name)
    return entries[0] if len(entries) == 1 else None


def _the_one(run: Run, name: str) -> MigAllocation:
    """The pod's one reservation; without exactly one the scenario cannot go on."""
    a = _one(run, name)
    if a is None:
        raise ScenarioFailed(f"{name} has not exactly one reservation in {MIG_ALLOCATIONS}")
    return a


def _event(run: Run, name: str, reason: str, timeout: float = 10.0) -> dict[str, Any] | None:
    """The pod's first event with this reason (events are written in the background), or None."""
    try:
        return run.kit.wait_event(name, reason, timeout)
    except AssertionError:
        return None


def _instance_of(run: Run, mig_uuid: str | None) -> Instance | None:
    return next((i for i in run.kit.instances() if i.mig_uuid == mig_uuid), None)


def _reclaimed(run: Run, mig_uuid: str | None, text: str, what: str = "reclaim") -> None:
    """Wait until the device plugin has destroyed this MIG instance, its GPU instance included (the
    CI goes first, so the MIG device vanishes before the GI does); a timeout fails the scenario."""
    run.wait(
        lambda: run.kit.wait(
            lambda: _instance_of(run, mig_uuid) is None and not run.kit.bare_gpu_instances(), 30, what
        ),
        text,
    )


def _identities(run: Run, node: str) -> set[tuple[str, int, int, str]]:
    """Who each MIG instance on the node is: (GPU UUID, GI ID, CI ID, MIG UUID)."""
    return {(i.gpu_uuid, i.gi, i.ci, i.mig_uuid) for i in run.kit.instances(node)}


def _check_realized(run: Run, name: str, profile: str, model: str) -> MigAllocation | None:
    """The pod got one MIG device of `profile` on a `model` GPU, realized on the hardware as recorded."""
    a = _one(run, name)
    if (
        not run.check(
            a is not None,
            f"{name} has one reservation in {MIG_ALLOCATIONS}",
            f"got {len(run.kit.allocations(name))} entries",
        )
        or a is None
    ):
        return None
    node, gpu = run.kit.gpu(a.gpuUUID)
    run.check(
        a.profile == profile and model.lower() in gpu.name.lower(),
        f"{name} gets a {profile} on an {model}",
        f"{a.profile} at start {a.placement.start} on {gpu.name} GPU {gpu.index} of {node}",
    )
    inst = _instance_of(run, a.migUUID)
    run.check(
        inst is not None
        and (inst.gpu_uuid, inst.profile, inst.start, inst.size, inst.gi, inst.ci)
        == (a.gpuUUID, a.profile, a.placement.start, a.placement.size, a.gpuInstanceID, a.computeInstanceID),
        f"{name}'s MIG instance exists exactly as recorded",
        f"{a.migUUID} GI {a.gpuInstanceID} CI {a.computeInstanceID} at ({a.placement.start},{a.placement.size})"
        if inst
        else f"NVML has no instance {a.migUUID}",
    )
    return a


def _realized(run: Run, name: str, profile: str, model: str) -> MigAllocation:
    """`_check_realized` for a step that goes on with the reservation: without one the scenario stops."""
    a = _check_realized(run, name, profile, model)
    if a is None:
        raise ScenarioFailed(f"{name} has no reservation to go on with")
    return a


def _show(
    run: Run, names: list[str], nodes: list[str] | None = None, events: list[str] | None = None
) -> None:
    run.show("allocations (hami.io/vgpu-mig-allocations)", report.allocations(run.kit, names))
    run.show("pods", report.pods(run.kit, names))
    if events is None or events:
        run.show("events", report.events(run.kit, names if events is None else events))
    run.show("simulated GPUs", report.nvidia_smi(run.kit, nodes, only_used=True))


# ---- the tour ------------------------------------------------------------------------------------------


@scenario("tour", "dynmig in one minute: sizes, packing, a MIG reason, mixing, reclaim, restart")
def tour(run: Run) -> None:
    k = run.kit
    run.step("1. One pod asks for 8000 MiB of GPU memory on an RTX PRO 6000")
    k.create(gpu_pod("tour-1", 8000, annotations={USE_GPU_TYPE: RTX}))
    _running(run, "tour-1")
    first = _realized(run, "tour-1", "1g.24gb", RTX)
    node = run.kit.gpu(first.gpuUUID)[0]
    gpu_uuid = first.gpuUUID
    _show(run, ["tour-1"], [node])

    run.step(f"2. Three more 8000 MiB pods pinned to the same GPU ({USE_GPU_UUID}) fill it")
    _start(run, *(gpu_pod(f"tour-{i}", 8000, annotations={USE_GPU_UUID: gpu_uuid}) for i in (2, 3, 4)))
    starts = sorted(a.placement.start for i in range(1, 5) for a in k.allocations(f"tour-{i}"))
    run.expect(starts, [0, 3, 6, 9], "four 1g.24gb fill the RTX PRO 6000 at starts 0, 3, 6, 9")
    _, gpu = k.gpu(gpu_uuid)
    run.expect(len(gpu.gpu_instances), 4, "NVML shows four GPU instances on that GPU")

    run.step("3. A fifth pod pinned to the full GPU stays Pending, and the event says why in MIG terms")
    k.create(gpu_pod("tour-5", 8000, annotations={USE_GPU_UUID: gpu_uuid}))
    event = run.wait(
        lambda: k.wait_event("tour-5", "FailedScheduling", contains="free slices"),
        "tour-5 gets a FailedScheduling event",
    )
    run.check(
        k.phase("tour-5") == "Pending" and not k.allocations("tour-5"),
        "tour-5 is Pending with no reservation",
    )
    why = report.gpu_reason(event["message"], gpu_uuid)
    run.check(
        "free slices" in why,
        "the reason for the full GPU speaks MIG (free slices), not CardTimeSlicingExhausted",
        why,
    )
    summary = _event(run, "tour-5", "FilteringFailed")
    if summary is not None:
        run.say(f"FilteringFailed (dynmig): {summary['message'].split('. ')[0]}")
    run.say(f"FailedScheduling (kube-scheduler), for {gpu_uuid}: {why}")

    run.step("4. Relax the pin: tour-5 lands on another GPU")
    k.annotate("tour-5", {USE_GPU_UUID: None, USE_GPU_TYPE: RTX})
    _running(run, "tour-5")
    fifth = _realized(run, "tour-5", "1g.24gb", RTX)
    run.check(
        fifth is not None and fifth.gpuUUID != gpu_uuid,
        "tour-5 is on a different GPU than the full one",
        fifth.gpuUUID if fifth else "",
    )

    run.step("5. A 30000 MiB pod on tour-5's card: 1g.24gb and 2g.48gb mixed on one GPU")
    k.create(gpu_pod("tour-6", 30000, annotations={USE_GPU_UUID: fifth.gpuUUID}))
    _running(run, "tour-6")
    _check_realized(run, "tour-6", "2g.48gb", RTX)
    _, card = k.gpu(fifth.gpuUUID)
    run.expect(
        sorted(gi.profile for gi in card.gpu_instances),
        ["1g.24gb", "2g.48gb"],
        "that GPU now holds a 1g.24gb and a 2g.48gb",
    )
    names = [f"tour-{i}" for i in range(1, 7)]
    _show(run, names, [node], events=["tour-5", "tour-6"])

    run.step("6. Delete tour-2: only its instance is reclaimed")
    gone = _the_one(run, "tour-2").migUUID
    others = {i.mig_uuid for i in k.instances()} - {gone}
    k.delete("tour-2")
    _reclaimed(run, gone, "tour-2's MIG instance is destroyed", what="tour-2's instance to be destroyed")
    run.check(_instance_of(run, gone) is None, "tour-2's MIG instance is gone from NVML", f"{gone}")
    left = {i.mig_uuid for i in k.instances()}
    run.expect(left, others, "every other pod's MIG instance is untouched", f"{len(left)} instances remain")

    run.step(f"7. Restart the device plugin on {node}: it adopts what runs, destroys nothing")
    before = _identities(run, node)
    events_before = len(k.nvml_events(node))
    run.lab.restart_plugin(node)
    after = _identities(run, node)
    run.expect(after, before, "same MIG UUIDs, GI and CI IDs after the restart", f"{len(after)} instances")
    mutations = [e for e in k.nvml_events(node)[events_before:] if e["op"].startswith(("destroy", "create"))]
    run.check(
        not mutations,
        "the restart created and destroyed nothing",
        f"{len(mutations)} NVML create/destroy calls during the restart",
    )
    run.check(all(i.busy for i in k.instances(node)), "every workload process still runs on its instance")
    names = [n for n in names if n != "tour-2"]
    for n in names:
        run.check(k.phase(n) == "Running", f"{n} is still Running")
    _show(run, names, [node], events=[])

    run.step("8. Clean up")
    k.delete_all()
    run.check(
        not k.instances() and not k.bare_gpu_instances(), "all pods deleted: every MIG instance reclaimed"
    )


# ---- the migration guide's eight checks ------------------------------------------------------------------


def _gpu_of(run: Run, model: str, i: int = 0) -> tuple[str, str]:
    """(node, GPU UUID) of the i-th GPU of a model on an extender node (a DRA node has no device plugin)."""
    dra = set(run.lab.dra_nodes)
    node, gpu = [(n, g) for n, g in run.kit.gpus_of_model(model) if n not in dra][i]
    return node, gpu.uuid


def _pinned(name: str, memory: int, gpu_uuid: str, **extra: str) -> dict[str, Any]:
    return gpu_pod(name, memory, annotations={USE_GPU_UUID: gpu_uuid, **extra})


def _ops(run: Run, node: str, since: int, prefix: str = "") -> list[str]:
    return [
        e["op"]
        for e in run.kit.nvml_events(node)[since:]
        if e["op"].startswith(prefix or ("create", "destroy"))
    ]


@scenario("create-delete", "1. a 1g is created for a pod and destroyed when the pod is deleted")
def create_delete(run: Run) -> None:
    k = run.kit
    node, gpu_uuid = _gpu_of(run, RTX)
    since = len(k.nvml_events(node))
    run.step("Create a pod asking for 8000 MiB")
    k.create(_pinned("one-1g", 8000, gpu_uuid))
    _running(run, "one-1g")
    a = _realized(run, "one-1g", "1g.24gb", RTX)
    run.expect(
        _ops(run, node, since), ["create_gi", "create_ci"], "the plugin created one GI and one CI in NVML"
    )
    env = run.lab.nodes[node].agent.pods_by_name("default", "one-1g").env.get("main")
    run.expect(env, a.migUUID if a else None, "the container gets NVIDIA_VISIBLE_DEVICES=<its MIG UUID>")
    inst = _instance_of(run, a.migUUID)
    run.check(inst is not None and inst.busy, "the workload's process runs on that MIG instance")
    _show(run, ["one-1g"], [node])
    run.step("Delete the pod")
    since = len(k.nvml_events(node))
    k.delete("one-1g")
    run.wait(
        lambda: k.wait(
            lambda: not k.instances(node) and not k.bare_gpu_instances(), 30, "the instance to be destroyed"
        ),
        "the MIG instance is destroyed after the delete",
    )
    run.expect(
        _ops(run, node, since),
        ["destroy_ci", "destroy_gi"],
        "the plugin destroyed exactly that CI, then its GI",
    )
    run.show("simulated GPUs", report.nvidia_smi(run.kit, [node], only_used=True))


@scenario("several-1g", "2. several 1g instances share one GPU without overlap")
def several_1g(run: Run) -> None:
    k = run.kit
    node, gpu_uuid = _gpu_of(run, RTX)
    run.step(f"Four 8000 MiB pods pinned to {gpu_uuid}")
    names = _fill(run, gpu_uuid, "share")
    got = [_the_one(run, n) for n in names]
    run.check(
        all(a.gpuUUID == gpu_uuid and a.profile == "1g.24gb" for a in got),
        "every pod has one 1g.24gb on that GPU",
    )
    run.expect(
        sorted(a.placement.start for a in got), [0, 3, 6, 9], "placements do not overlap: starts 0, 3, 6, 9"
    )
    run.expect(len({a.migUUID for a in got}), 4, "four distinct MIG UUIDs")
    _, gpu = k.gpu(gpu_uuid)
    run.expect(
        sorted((gi.placement.start, gi.placement.size) for gi in gpu.gpu_instances),
        [(0, 3), (3, 3), (6, 3), (9, 3)],
        "NVML holds the same four placements",
    )
    _show(run, names, [node], events=[])
    k.delete_all()


@scenario("mixed-1g-2g-3g", "3. 1g, 2g and 3g instances mixed on one A100", needs=(A100,))
def mixed(run: Run) -> None:
    k = run.kit
    node, gpu_uuid = _gpu_of(run, A100)
    wanted = [("mix-1g", 4000, "1g.5gb"), ("mix-2g", 9000, "2g.10gb"), ("mix-3g", 19000, "3g.20gb")]
    run.step(f"Pods asking for 4000, 9000 and 19000 MiB, pinned to one A100 ({gpu_uuid})")
    _start(run, *(_pinned(name, memory, gpu_uuid) for name, memory, _ in wanted))
    for name, _memory, profile in wanted:
        _check_realized(run, name, profile, A100)
    _, gpu = k.gpu(gpu_uuid)
    spans = sorted((gi.placement.start, gi.placement.start + gi.placement.size) for gi in gpu.gpu_instances)
    run.check(
        len(spans) == 3 and all(a[1] <= b[0] for a, b in itertools.pairwise(spans)),
        "three GPU instances on one GPU, none overlapping",
        f"slices {spans}",
    )
    _show(run, [n for n, _, _ in wanted], [node], events=[])
    k.delete_all()


def _fill(run: Run, gpu_uuid: str, prefix: str) -> list[str]:
    """Four 8000 MiB pods pinned to the GPU, running: a 1g.24gb each fills an RTX PRO 6000."""
    return _start(run, *(_pinned(f"{prefix}-{i}", 8000, gpu_uuid) for i in range(1, 5)))


@scenario("exhausted", "4. a pod that cannot fit stays Pending with a MIG reason in its event")
def exhausted(run: Run) -> None:
    k = run.kit
    node, gpu_uuid = _gpu_of(run, RTX)
    run.step(f"Fill {gpu_uuid} with four 1g.24gb pods")
    names = _fill(run, gpu_uuid, "full")
    since = len(k.nvml_events(node))
    run.step("A fifth pod pinned to that GPU")
    k.create(_pinned("full-5", 8000, gpu_uuid))
    event = run.wait(
        lambda: k.wait_event("full-5", "FailedScheduling", contains="free slices"),
        "full-5 gets a FailedScheduling event",
    )
    why = report.gpu_reason(event["message"], gpu_uuid)
    run.check("free slices" in why and "1g.24gb" in why, "the event names the MIG reason for that GPU", why)
    run.check("CardTimeSlicingExhausted" not in event["message"], "no HAMi CardTimeSlicingExhausted")
    filtering = _event(run, "full-5", "FilteringFailed")
    run.check(
        filtering is not None,
        "dynmig's own FilteringFailed event summarises the refusal",
        report.shorten(filtering["message"], 120) if filtering else "no FilteringFailed event",
    )
    run.check(
        k.phase("full-5") == "Pending"
        and not k.allocations("full-5")
        and not k.existing_pod("full-5")["spec"].get("nodeName"),
        "full-5 is Pending, unbound, with no reservation",
    )
    run.expect(_ops(run, node, since), [], "nothing was created or destroyed for it")
    cond: dict[str, Any] = next(
        (
            c
            for c in k.existing_pod("full-5")["status"].get("conditions") or []
            if c["type"] == "PodScheduled"
        ),
        {},
    )
    run.expect(cond.get("reason"), "Unschedulable", "PodScheduled=False, reason Unschedulable")
    _show(run, [*names, "full-5"], [node], events=["full-5"])
    k.delete_all()


@scenario("reuse-after-delete", "5. a deleted pod's placement is reused by the next pod")
def reuse(run: Run) -> None:
    k = run.kit
    node, gpu_uuid = _gpu_of(run, RTX)
    run.step(f"Fill {gpu_uuid} with four 1g.24gb pods, then delete reuse-2")
    names = _fill(run, gpu_uuid, "reuse")
    freed = _the_one(run, "reuse-2")
    k.delete("reuse-2")
    _reclaimed(run, freed.migUUID, "reuse-2's instance is reclaimed")
    run.step("A new pod pinned to the same GPU")
    k.create(_pinned("reuse-5", 8000, gpu_uuid))
    _running(run, "reuse-5")
    new = _realized(run, "reuse-5", "1g.24gb", RTX)
    run.expect(
        (new.gpuUUID, new.placement.start),
        (gpu_uuid, freed.placement.start),
        "it takes the freed placement",
        f"start {new.placement.start}",
    )
    run.say(
        "MIG UUID "
        + (
            "reappeared (same GI at the same placement, as on real hardware)"
            if new.migUUID == freed.migUUID
            else f"is new: {new.migUUID}"
        )
    )
    _, gpu = k.gpu(gpu_uuid)
    run.expect(len(gpu.gpu_instances), 4, "the GPU holds four instances again")
    _show(run, [n for n in names if n != "reuse-2"] + ["reuse-5"], [node], events=[])
    k.delete_all()


@scenario("plugin-restart", "6. restarting the device plugin while workloads run changes nothing")
def plugin_restart(run: Run) -> None:
    k = run.kit
    node, gpu_uuid = _gpu_of(run, RTX)
    run.step("Two workloads on one GPU and one on another")
    _start(
        run,
        _pinned("work-1", 8000, gpu_uuid),
        _pinned("work-2", 30000, gpu_uuid),
        _pinned("work-3", 8000, _gpu_of(run, RTX, 1)[1]),
    )
    before = {(i.gpu_uuid, i.profile, i.start, i.gi, i.ci, i.mig_uuid) for i in k.instances(node)}
    since = len(k.nvml_events(node))
    run.step(f"Restart dynmig device-plugin on {node}: delete its DaemonSet pod (kubectl delete pod)")
    run.lab.restart_plugin(node)
    after = {(i.gpu_uuid, i.profile, i.start, i.gi, i.ci, i.mig_uuid) for i in k.instances(node)}
    run.expect(
        after,
        before,
        "every MIG instance is still there with the same UUID, GI and CI",
        f"{len(after)} instances",
    )
    run.expect(_ops(run, node, since), [], "the restart created and destroyed nothing")
    run.check(all(i.busy for i in k.instances(node)), "every workload process still runs")
    log = run.lab.plugin_log(node).split("startup: busy=")[-1]
    run.check(
        "adopted=3" in log,
        "the new plugin adopted the three instances",
        "startup: busy=" + log.split("\n")[0][:160],
    )
    run.step("After the restart: a new pod is served, a deleted pod is reclaimed")
    k.create(_pinned("work-4", 8000, gpu_uuid))
    _running(run, "work-4")
    _check_realized(run, "work-4", "1g.24gb", RTX)
    gone = _the_one(run, "work-1").migUUID
    k.delete("work-1")
    _reclaimed(run, gone, "the adopted instance of a deleted pod is reclaimed")
    run.check(
        _instance_of(run, gone) is None, "work-1's adopted instance is reclaimed after its pod is deleted"
    )
    _show(run, ["work-2", "work-3", "work-4"], [node], events=[])
    k.delete_all()


@scenario("bad-annotation", "7. a missing or partial allocation annotation fails safe: nothing is destroyed")
def bad_annotation(run: Run) -> None:
    k = run.kit
    node, gpu_uuid = _gpu_of(run, RTX)
    run.step(f"Missing: a GPU pod placed on {node} directly (spec.nodeName), not through dynmig")
    since = len(k.nvml_events(node))
    pod = gpu_pod("no-reservation", 8000)
    pod["spec"]["nodeName"] = node
    try:
        k.create(pod)
        denied = ""
    except client.ApiException as error:
        denied = json.loads(error.body or "{}").get("message", str(error))
    run.check(
        "spec.nodeName" in denied,
        "admission denies it: dynmig must choose the node and placement",
        report.shorten(denied, 140),
    )
    run.step(
        "... and if the webhook is bypassed (label hami.io/webhook=ignore), the device plugin refuses it"
    )
    pod["metadata"]["labels"] = {WEBHOOK_IGNORE_LABEL: "ignore"}
    k.create(pod)
    run.wait(lambda: k.wait_phase("no-reservation", "Failed"), "no-reservation fails admission on the node")
    status = k.existing_pod("no-reservation")["status"]
    run.expect(
        status.get("reason"),
        "UnexpectedAdmissionError",
        "kubelet fails the pod: UnexpectedAdmissionError",
        report.shorten(status.get("message", ""), 140),
    )
    warning = _event(run, "no-reservation", "UnexpectedAdmissionError")
    run.check(warning is not None and warning["type"] == "Warning", "a Warning event says so")
    # creates only: a reclaim the previous step's pods still have due may land in this window
    run.expect(_ops(run, node, since, "create"), [], "no MIG instance was created for it")
    k.delete("no-reservation")

    run.step("Partial: a running pod's annotation loses computeInstanceID; another pod is deleted")
    _start(run, _pinned("keeper", 8000, gpu_uuid), _pinned("leaver", 8000, gpu_uuid))
    keeper, leaver = _the_one(run, "keeper"), _the_one(run, "leaver")
    good = k.existing_pod("keeper")["metadata"]["annotations"][MIG_ALLOCATIONS]
    entries = json.loads(good)
    for entry in entries:
        entry.pop("computeInstanceID", None)  # migUUID and GI stay: a partial runtime identity
    partial = json.dumps(entries, separators=(",", ":"))
    scheduler = Kit(run.lab, identity="scheduler")  # only dynmig's controllers may write it
    scheduler.annotate("keeper", {MIG_ALLOCATIONS: partial})
    run.check(
        not k.allocations("keeper"),
        "keeper's annotation no longer decodes (partial runtime identity)",
        report.shorten(partial, 140),
    )
    since = len(k.nvml_events(node))
    k.delete("leaver")
    waited = _wait_log(run, node, "skipping every destroy")
    run.check(
        waited,
        "the device plugin skips every destroy while an annotation is unreadable",
        "log: reconcile: skipping every destroy this pass (...)",
    )
    run.check(
        _instance_of(run, leaver.migUUID) is not None and _instance_of(run, keeper.migUUID) is not None,
        "both instances are still there (the deleted pod's too: fail closed)",
    )
    run.expect(_ops(run, node, since), [], "nothing was destroyed")
    run.step("Repair the annotation: reclaim resumes")
    scheduler.annotate("keeper", {MIG_ALLOCATIONS: good})
    _reclaimed(
        run, leaver.migUUID, "the deleted pod's instance is reclaimed once the annotation is whole again"
    )
    run.check(_instance_of(run, keeper.migUUID) is not None, "keeper's instance is untouched")
    _show(run, ["keeper"], [node], events=[])
    k.delete_all()


def _wait_log(run: Run, node: str, text: str, timeout: float = 15.0) -> bool:
    try:
        run.kit.wait(lambda: text in run.lab.plugin_log(node), timeout, text)
        return True
    except AssertionError:
        return False


@scenario("api-down", "8. while the API server is down nothing is destroyed, even across a plugin restart")
def api_down(run: Run) -> None:
    import time

    k = run.kit
    node, gpu_uuid = _gpu_of(run, RTX)
    run.step("Two workloads running")
    _start(run, _pinned("steady-1", 8000, gpu_uuid), _pinned("steady-2", 30000, gpu_uuid))
    before = _identities(run, node)
    since = len(k.nvml_events(node))
    log_size = len(run.lab.plugin_log(node))
    run.step("The API server goes down (connections refused); the device plugin restarts meanwhile")
    run.lab.apiserver.down("refuse")
    try:
        time.sleep(3 * run.lab.reconcile_interval + 0.5)
        run.lab.restart_plugin(node, delete_pod=False)  # no API: kubelet restarts the process in its pod
        time.sleep(3 * run.lab.reconcile_interval + 0.5)
        run.expect(_ops(run, node, since), [], "nothing was created or destroyed while the API was down")
        run.expect(
            _identities(run, node), before, "every MIG instance is still there", f"{len(before)} instances"
        )
        tail = run.lab.plugin_log(node)[log_size:]
        run.check(
            "skipping every destroy" in tail or "busy=" in tail,
            "the plugin said it held back (reconcile skipped / startup treated GPUs as busy)",
        )
    finally:
        run.lab.apiserver.up()
    run.step("The API server is back")
    run.wait(
        lambda: k.wait(lambda: "adopted=2" in run.lab.plugin_log(node)[log_size:], 30, "adoption"),
        "the restarted plugin adopts both instances once it can list pods",
    )
    run.expect(_identities(run, node), before, "after the outage: same instances, same UUIDs")
    for n in ("steady-1", "steady-2"):
        run.expect(k.phase(n), "Running", f"{n} is still Running")
    gone = _the_one(run, "steady-1").migUUID
    k.delete("steady-1")
    _reclaimed(run, gone, "a pod deleted after the outage is reclaimed")
    run.check(_instance_of(run, gone) is None, "steady-1's instance is reclaimed after the outage")
    _show(run, ["steady-2"], [node], events=[])
    k.delete_all()


# ---- DRA mode (a node started with @dra) ------------------------------------------------------------

scenario(
    "dra",
    "DRA mode: claims get their allocated placement, delete, plugin restart, kill -9 mid-prepare",
    needs=(A100,),
    dra=True,
)(dra_mode)

scenario(
    "hami-handover",
    "the handover from HAMi: a hami-scheduler pod run at HAMi's placement, adopted, reclaimed",
    needs=(A100,),
    policy_text=hami.HANDOVER_DEVICE_CONFIG,
    json_values=(f"allocationWriters={json.dumps(list(hami.ALLOCATION_WRITERS))}",),
)(hami_handover)
