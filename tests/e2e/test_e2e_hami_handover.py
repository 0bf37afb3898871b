"""README "Migrating from HAMi", run against the whole lab: a pod that names HAMi's scheduler is left
alone by dynmig's webhook and scheduler, and once HAMi's scheduler has written its reservation (in
HAMi's annotations) and bound the pod, dynmig's device plugin creates exactly that MIG instance.

In the lab the stand-in for HAMi's scheduler is dynmig's scheduler identity, as in the
bad-annotation scenario: on a cluster, `allocationWriters` lets HAMi's own service accounts write
the annotation during the handover (tests/charts checks that rule in all three places). The
`hami-handover` lab scenario (lab.handover_scenario) performs the handover with those accounts, run
here from the CLI."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from kubernetes import client
from lab.hami import reservation
from lab.kit import Kit, gpu_pod

from mig.annotations import BIND_PHASE, MIG_ALLOCATIONS

ROOT = Path(__file__).resolve().parents[2]


def test_a_pod_scheduled_by_hami_is_run_by_dynmigs_device_plugin_at_hamis_placement(lab, kit):
    (node, gpu), *_ = kit.gpus_of_model("A100")
    pod = gpu_pod("from-hami", 4000)
    pod["spec"]["schedulerName"] = "hami-scheduler"
    kit.create(pod)
    created = kit.pod("from-hami")
    assert created["spec"]["schedulerName"] == "hami-scheduler"  # dynmig's webhook leaves it alone
    assert not created["spec"].get("nodeName")  # and dynmig's scheduler does not schedule it

    hami = Kit(lab, identity="scheduler")
    hami.annotate("from-hami", reservation(node, gpu.uuid, "1g.5gb", start=6, size=1, memory=4864))
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "from-hami", "namespace": "default", "uid": created["metadata"]["uid"]},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    lab.core("scheduler").create_namespaced_pod_binding(
        "from-hami", "default", binding, _preload_content=False
    )

    kit.wait_phase("from-hami", "Running", timeout=60)
    (done,) = kit.allocations("from-hami")
    assert (done.gpuUUID, done.profile, done.placement_value.start, done.placement_value.size) == (
        gpu.uuid,
        "1g.5gb",
        6,
        1,
    )
    assert done.migUUID and done.gpuInstanceID is not None and done.computeInstanceID is not None
    (instance,) = [i for i in kit.instances(node) if i.mig_uuid == done.migUUID]
    assert (instance.gpu_uuid, instance.profile, instance.start, instance.size) == (gpu.uuid, "1g.5gb", 6, 1)
    assert kit.pod("from-hami")["metadata"]["annotations"][BIND_PHASE] == "success"


def test_alice_cannot_forge_a_hami_reservation_in_the_lab(lab, kit):
    (node, gpu), *_ = kit.gpus_of_model("A100")
    pod = gpu_pod("forged", 4000)
    pod["spec"]["schedulerName"] = "hami-scheduler"
    kit.create(pod)
    alice = client.CoreV1Api(lab.api_client("alice"))
    patch = {"metadata": {"annotations": reservation(node, gpu.uuid, "1g.5gb", start=0, size=1, memory=4864)}}
    try:
        alice.patch_namespaced_pod("forged", "default", patch)
        denied = ""
    except client.ApiException as error:
        denied = json.loads(error.body or "{}").get("message", "")
    assert MIG_ALLOCATIONS in denied


def test_the_hami_handover_scenario_runs_from_the_cli_with_hamis_accounts_as_allocation_writers(tmp_path):
    """`dynmig lab --scenario hami-handover`: dynmig installed as the migration guide says (HAMi's
    accounts in allocationWriters, reaching the running serve), a hami-scheduler pod reserved and
    bound by HAMi's scheduler account run at HAMi's placement, adopted across a plugin restart."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dynmig.cli",
            "lab",
            "--scenario",
            "hami-handover",
            "--nodes",
            "gpu-a100=2xA100-SXM4-40GB",
            "--workdir",
            str(tmp_path / "lab"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, out[-4000:] + done.stderr[-2000:]
    assert re.search(r"^### hami-handover: PASSED — (\d+)/\1 checks passed", out, re.MULTILINE), out[-4000:]
    for account in ("hami-scheduler", "hami-device-plugin"):
        assert (
            f"PASS  dynmig serve runs with system:serviceaccount:kube-system:{account} among the allocation writers"
            in out
        )
    assert "PASS  dynmig's device plugin realized HAMi's reservation: same GPU, profile and start" in out
    assert "PASS  the same instance, GI, CI and MIG UUID after the restart" in out
