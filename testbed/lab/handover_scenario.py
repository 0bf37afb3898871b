"""The `hami-handover` scenario: docs/migrating-from-hami.md's handover, performed on the lab.

dynmig is installed as the guide says while HAMi still runs: `allocationWriters` names HAMi's
scheduler and device plugin service accounts, and the device config is the allowlist a HAMi user
brings (`lab.hami.HANDOVER_DEVICE_CONFIG`). Then a pod that names `hami-scheduler` is left alone by
dynmig's webhook and scheduler; HAMi's scheduler (its service account, through the API) writes
its reservation in HAMi's format and binds the pod; dynmig's device plugin creates exactly that
instance at HAMi's placement; restarted, it adopts it; deleted, the pod's instance is reclaimed.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from sim.apiserver.identities import service_account

from lab import hami
from lab.kit import Kit, gpu_pod
from lab.scenario import Run

if TYPE_CHECKING:
    from lab.cluster import Lab

POD = "from-hami"
PROFILE, START, SIZE, MEMORY = "1g.5gb", 6, 1, 4000  # an A100-40GB 1g.5gb at HAMi's chosen start
HANDLE = "hami-scheduler"  # the lab's API identity of HAMi's scheduler service account


def _hami_scheduler(run: Run) -> Kit:
    """HAMi's scheduler as the API sees it: its service account in HAMi's namespace."""
    api = run.lab.apiserver
    if HANDLE not in api.identities:
        api.add_identity(service_account(HANDLE, hami.NAMESPACE, hami.SCHEDULER_ACCOUNT))
    return Kit(run.lab, identity=HANDLE)


def _placed(run: Run, node: str) -> list[tuple[str, str, int, int, int, int, str]]:
    return sorted(
        (i.gpu_uuid, i.profile, i.start, i.size, i.gi, i.ci, i.mig_uuid) for i in run.kit.instances(node)
    )


def _brought(lab: Lab) -> str:
    if lab.policy_text is None and lab.policy is not None:
        return f"--policy {lab.policy}"
    if lab.policy_text == hami.V2_10_DEVICE_CONFIG:
        return "HAMi v2.10's chart default (lab.hami.V2_10_DEVICE_CONFIG)"
    if lab.policy_text is not None:
        return "lab.hami.HANDOVER_DEVICE_CONFIG"
    return "the chart's default (HAMi v2.10's default profiles with model strings that match)"


def hami_handover(run: Run) -> None:
    k = run.kit
    lab = run.lab
    run.step("dynmig is installed as the migration guide says, beside HAMi")
    args = [str(a) for a in lab.serve.process.args] if lab.serve is not None else []
    for user in hami.ALLOCATION_WRITERS:
        run.check(
            f"--privileged-user={user}" in args,
            f"dynmig serve runs with {user} among the allocation writers (allocationWriters)",
        )
    run.say(f"allowlist brought: {_brought(lab)}")
    path = next((a.split("=", 1)[1] for a in args if a.startswith("--device-config=")), "")
    loaded = Path(path).read_text() if path else ""
    run.expect(
        loaded.strip(),
        lab.rendered.device_config_text.strip(),
        "dynmig serve runs with the device config the release installed",
        path,
    )

    (node, gpu), *_ = k.gpus_of_model("A100")
    run.step("A pod names hami-scheduler: dynmig's webhook and scheduler leave it to HAMi")
    pod = gpu_pod(POD, MEMORY)
    pod["spec"]["schedulerName"] = hami.SCHEDULER_NAME
    k.create(pod)
    time.sleep(2.0)  # a scheduling pass of dynmig's scheduler
    created = k.pod(POD) or {}
    run.expect(
        created.get("spec", {}).get("schedulerName"),
        hami.SCHEDULER_NAME,
        "its schedulerName stays hami-scheduler",
    )
    run.check(not created.get("spec", {}).get("nodeName"), "dynmig's scheduler does not bind it")

    run.step(f"HAMi's scheduler reserves a {PROFILE} at start {START} on {node} and binds the pod")
    scheduler = _hami_scheduler(run)
    scheduler.annotate(POD, hami.reservation(node, gpu.uuid, PROFILE, START, SIZE, MEMORY))
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": POD, "namespace": "default", "uid": created["metadata"]["uid"]},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    scheduler.core.create_namespaced_pod_binding(POD, "default", binding, _preload_content=False)
    run.wait(lambda: k.wait_phase(POD, "Running", 60), f"{POD} is Running")
    (done,) = k.allocations(POD) or [None]
    run.expect(
        (done.gpuUUID, done.profile, done.placement_value.start) if done else None,
        (gpu.uuid, PROFILE, START),
        "dynmig's device plugin realized HAMi's reservation: same GPU, profile and start",
    )
    placed = [p for p in _placed(run, node) if done and p[-1] == done.migUUID]
    run.expect(
        [p[:4] for p in placed],
        [(gpu.uuid, PROFILE, START, SIZE)],
        "the simulated GPU holds that instance at HAMi's placement",
    )

    run.step(f"Restart dynmig's device plugin on {node}: it adopts the instance, destroys nothing")
    before = _placed(run, node)
    since = len(k.nvml_events(node))
    lab.restart_plugin(node)
    run.expect(_placed(run, node), before, "the same instance, GI, CI and MIG UUID after the restart")
    ops = [e["op"] for e in k.nvml_events(node)[since:] if e["op"].startswith(("create", "destroy"))]
    run.expect(ops, [], "the restart created and destroyed nothing")

    run.step("Delete the pod: its instance is reclaimed")
    k.delete(POD)
    run.wait(
        lambda: k.wait(lambda: not k.instances(node), 30, "the instance to be destroyed"),
        "the handed-over pod's instance is destroyed after its delete",
    )
    k.delete_all()
