"""The lab's scripted scenarios: the tour, and the eight checks of the migration guide.

Each scenario is a function `(run: Run) -> None` that drives the lab as a person would (pods through
the official client) and records checks on what dynmig wrote (the allocation annotation, events)
and what the simulated GPUs hold. Scenarios start from an empty cluster and leave one behind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dynmig.lab import report
from dynmig.lab.kit import gpu_pod
from dynmig.lab.scenario import Run
from mig.annotations import MIG_ALLOCATIONS, USE_GPU_TYPE, USE_GPU_UUID

RTX = "RTX PRO 6000"
A100 = "A100"


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    needs: tuple[str, ...]  # GPU model substrings the nodes must have
    run: Callable[[Run], None]


SCENARIOS: dict[str, Scenario] = {}


def scenario(name: str, title: str, needs: tuple[str, ...] = (RTX,)):
    def register(fn: Callable[[Run], None]) -> Callable[[Run], None]:
        SCENARIOS[name] = Scenario(name, title, needs, fn)
        return fn
    return register


# ---- shared steps ----------------------------------------------------------------------------------


def _running(run: Run, name: str, timeout: float = 30.0) -> None:
    run.wait(lambda: run.kit.wait_phase(name, "Running", timeout), f"{name} is Running")


def _one(run: Run, name: str):
    entries = run.kit.allocations(name)
    return entries[0] if len(entries) == 1 else None


def _instance_of(run: Run, mig_uuid: str | None):
    return next((i for i in run.kit.instances() if i.mig_uuid == mig_uuid), None)


def _check_realized(run: Run, name: str, profile: str, model: str) -> object:
    """The pod got one MIG device of `profile` on a `model` GPU, realized on the hardware as recorded."""
    a = _one(run, name)
    if not run.check(a is not None, f"{name} has one reservation in {MIG_ALLOCATIONS}",
                     f"got {len(run.kit.allocations(name))} entries"):
        return None
    node, gpu = run.kit.gpu(a.gpuUUID)
    run.check(a.profile == profile and model.lower() in gpu.name.lower(),
              f"{name} gets a {profile} on an {model}", f"{a.profile} at start {a.placement.start} on {gpu.name} "
              f"GPU {gpu.index} of {node}")
    inst = _instance_of(run, a.migUUID)
    run.check(inst is not None and (inst.gpu_uuid, inst.profile, inst.start, inst.size, inst.gi, inst.ci)
              == (a.gpuUUID, a.profile, a.placement.start, a.placement.size, a.gpuInstanceID, a.computeInstanceID),
              f"{name}'s MIG instance exists exactly as recorded",
              f"{a.migUUID} GI {a.gpuInstanceID} CI {a.computeInstanceID} at ({a.placement.start},{a.placement.size})"
              if inst else f"NVML has no instance {a.migUUID}")
    return a


def _show(run: Run, names: list[str], nodes: list[str] | None = None, events: list[str] | None = None) -> None:
    run.show("allocations (hami.io/vgpu-mig-allocations)", report.allocations(run.kit, names))
    run.show("pods", report.pods(run.kit, names))
    if events is None or events:
        run.show("events", report.events(run.kit, names if events is None else events))
    run.show("simulated GPUs", report.nvidia_smi(run.kit, nodes, only_used=True))


def _rtx_node(run: Run) -> str:
    found = run.kit.gpus_of_model(RTX)
    return found[0][0]


# ---- the tour ------------------------------------------------------------------------------------------


@scenario("tour", "dynmig in one minute: sizes, packing, a MIG reason, mixing, reclaim, restart")
def tour(run: Run) -> None:
    k = run.kit
    run.step("1. One pod asks for 8000 MiB of GPU memory on an RTX PRO 6000")
    k.create(gpu_pod("tour-1", 8000, annotations={USE_GPU_TYPE: RTX}))
    _running(run, "tour-1")
    first = _check_realized(run, "tour-1", "1g.24gb", RTX)
    node = run.kit.gpu(first.gpuUUID)[0]
    gpu_uuid = first.gpuUUID
    _show(run, ["tour-1"], [node])

    run.step(f"2. Three more 8000 MiB pods pinned to the same GPU ({USE_GPU_UUID}) fill it")
    for i in (2, 3, 4):
        k.create(gpu_pod(f"tour-{i}", 8000, annotations={USE_GPU_UUID: gpu_uuid}))
    for i in (2, 3, 4):
        _running(run, f"tour-{i}")
    starts = sorted(a.placement.start for i in range(1, 5) for a in k.allocations(f"tour-{i}"))
    run.expect(starts, [0, 3, 6, 9], "four 1g.24gb fill the RTX PRO 6000 at starts 0, 3, 6, 9")
    _, gpu = k.gpu(gpu_uuid)
    run.expect(len(gpu.gpu_instances), 4, "NVML shows four GPU instances on that GPU")

    run.step("3. A fifth pod pinned to the full GPU stays Pending, and the event says why in MIG terms")
    k.create(gpu_pod("tour-5", 8000, annotations={USE_GPU_UUID: gpu_uuid}))
    event = run.wait(lambda: k.wait_event("tour-5", "FailedScheduling"), "tour-5 gets a FailedScheduling event")
    run.check(k.phase("tour-5") == "Pending" and not k.allocations("tour-5"),
              "tour-5 is Pending with no reservation")
    why = report.gpu_reason(event["message"], gpu_uuid)
    run.check("free slices" in why, "the reason for the full GPU speaks MIG (free slices), "
              "not CardTimeSlicingExhausted", why)
    run.say(f"FailedScheduling: {report.shorten(event['message'], 100)}")
    run.say(f"  ... on {gpu_uuid}: {why}")

    run.step("4. Relax the pin: tour-5 lands on another GPU")
    k.annotate("tour-5", {USE_GPU_UUID: None, USE_GPU_TYPE: RTX})
    _running(run, "tour-5")
    fifth = _check_realized(run, "tour-5", "1g.24gb", RTX)
    run.check(fifth is not None and fifth.gpuUUID != gpu_uuid, "tour-5 is on a different GPU than the full one",
              fifth.gpuUUID if fifth else "")

    run.step("5. A 30000 MiB pod on tour-5's card: 1g.24gb and 2g.48gb mixed on one GPU")
    k.create(gpu_pod("tour-6", 30000, annotations={USE_GPU_UUID: fifth.gpuUUID}))
    _running(run, "tour-6")
    sixth = _check_realized(run, "tour-6", "2g.48gb", RTX)
    _, card = k.gpu(fifth.gpuUUID)
    run.expect(sorted(gi.profile for gi in card.gpu_instances), ["1g.24gb", "2g.48gb"],
               "that GPU now holds a 1g.24gb and a 2g.48gb")
    names = [f"tour-{i}" for i in range(1, 7)]
    _show(run, names, [node], events=["tour-5", "tour-6"])

    run.step("6. Delete tour-2: only its instance is reclaimed")
    gone = _one(run, "tour-2").migUUID
    others = {i.mig_uuid for i in k.instances()} - {gone}
    k.delete("tour-2")
    run.wait(lambda: k.wait(lambda: _instance_of(run, gone) is None, 30, "tour-2's instance to be destroyed"),
             "tour-2's MIG instance is destroyed")
    run.check(_instance_of(run, gone) is None, "tour-2's MIG instance is gone from NVML", gone)
    left = {i.mig_uuid for i in k.instances()}
    run.expect(left, others, "every other pod's MIG instance is untouched", f"{len(left)} instances remain")

    run.step(f"7. Restart the device plugin on {node}: it adopts what runs, destroys nothing")
    before = {(i.gpu_uuid, i.gi, i.ci, i.mig_uuid) for i in k.instances(node)}
    events_before = len(k.nvml_events(node))
    run.lab.restart_plugin(node)
    after = {(i.gpu_uuid, i.gi, i.ci, i.mig_uuid) for i in k.instances(node)}
    run.expect(after, before, "same MIG UUIDs, GI and CI IDs after the restart", f"{len(after)} instances")
    mutations = [e for e in k.nvml_events(node)[events_before:] if e["op"].startswith(("destroy", "create"))]
    run.check(not mutations, "the restart created and destroyed nothing",
              f"{len(mutations)} NVML create/destroy calls during the restart")
    run.check(all(i.busy for i in k.instances(node)), "every workload process still runs on its instance")
    names = [n for n in names if n != "tour-2"]
    for n in names:
        run.check(k.phase(n) == "Running", f"{n} is still Running")
    _show(run, names, [node], events=[])

    run.step("8. Clean up")
    k.delete_all()
    run.check(not k.instances(), "all pods deleted: every MIG instance reclaimed")
