"""The lab scenario that proves DRA mode (issue 32's "Done when"), on a node started with `@dra`.

Pods ask for MIG devices with ResourceClaimTemplates (examples/dra-claim.yaml, its profile changed
to one the node's GPUs have); kube-scheduler (simulated) allocates each claim from the ResourceSlices
`dynmig dra-plugin` publishes and kubelet (simulated) prepares it through the plugin. Every check
compares three independent records: the claim's `status.allocation` (what the scheduler chose), the
ResourceSlice's device attributes (what that device is: parent GPU, profile, placement) and the
simulated NVML (what exists on the GPUs), plus the environment the container was started with.
"""

from __future__ import annotations

import copy
import os
import shutil
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml
from kubernetes import client

from kube.rest import json_object
from lab import chart, dra_node, report
from lab.kit import Instance, WaitTimeout
from lab.scenario import Run, ScenarioFailed
from lab.supervisor import python_argv

EXAMPLE = chart.ROOT / "examples" / "dra-claim.yaml"
GROUP, VERSION = "resource.k8s.io", "v1"
PROFILES = {"dra-1g": "1g.5gb", "dra-3g": "3g.20gb"}  # template -> profile (A100-40GB names)


@dataclass(frozen=True)
class Allocated:
    """The device a pod's claim was allocated, as its ResourceSlice describes it."""

    claim: str
    device: str
    gpu_uuid: str
    profile: str
    start: int
    size: int


# ---- objects, from the example ----------------------------------------------------------------------


def _example() -> tuple[dict[str, Any], dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if isinstance(d, dict)]
    template = next(d for d in docs if d.get("kind") == "ResourceClaimTemplate")
    pod = next(d for d in docs if d.get("kind") == "Pod")
    return template, pod


def claim_template(name: str, profile: str) -> dict[str, Any]:
    """examples/dra-claim.yaml's ResourceClaimTemplate, named `name`, selecting `profile` by name
    (the example selects by memory)."""
    template = copy.deepcopy(_example()[0])
    template["metadata"] = {"name": name}
    for request in template["spec"]["spec"]["devices"]["requests"]:
        driver = request["exactly"]["deviceClassName"]  # the chart's class is named after the driver
        request["exactly"]["selectors"] = [
            {"cel": {"expression": f'device.attributes["{driver}"].profile == "{profile}"'}}
        ]
    return template


def claim_pod(name: str, template: str) -> dict[str, Any]:
    """examples/dra-claim.yaml's Pod, named `name`, its claim made from `template`."""
    pod = copy.deepcopy(_example()[1])
    pod["metadata"] = {"name": name}
    for claim in pod["spec"]["resourceClaims"]:
        claim["resourceClaimTemplateName"] = template
    pod["spec"]["terminationGracePeriodSeconds"] = 2
    return pod


# ---- what the API and the GPUs say ---------------------------------------------------------------------


def _custom(run: Run) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(run.lab.api_client())


def _value(attributes: dict[str, Any], name: str, driver: str) -> Any:
    """A device attribute's value, its name qualified by the driver's domain or not."""
    entry = attributes.get(name) or attributes.get(f"{driver}/{name}") or {}
    return next(iter(entry.values()), None) if isinstance(entry, dict) else None


def _int(value: Any) -> int:
    """An int attribute's value; -1 when the device has none (then no placement matches it)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


def slice_device(run: Run, driver: str, pool: str, device: str) -> dict[str, Any] | None:
    """The device of that name in the pool's newest ResourceSlices."""
    slices = _custom(run).list_cluster_custom_object(GROUP, VERSION, "resourceslices")["items"]
    mine = [s for s in slices if s["spec"].get("driver") == driver and s["spec"]["pool"]["name"] == pool]
    newest = max((s["spec"]["pool"].get("generation", 0) for s in mine), default=0)
    for s in mine:
        if s["spec"]["pool"].get("generation", 0) == newest:
            for d in s["spec"].get("devices") or []:
                if isinstance(d, dict) and d.get("name") == device:
                    return d
    return None


def claim_of(run: Run, pod_name: str) -> dict[str, Any] | None:
    """The ResourceClaim made for the pod from its template (as recorded in the pod's status)."""
    pod = run.kit.pod(pod_name)
    statuses = ((pod or {}).get("status") or {}).get("resourceClaimStatuses") or []
    name = next((s.get("resourceClaimName") for s in statuses if s.get("resourceClaimName")), None)
    if name is None:
        return None
    try:
        claim = _custom(run).get_namespaced_custom_object(GROUP, VERSION, "default", "resourceclaims", name)
        return json_object(f"read resourceclaim {name}", claim)
    except client.ApiException:
        return None


def allocated(run: Run, pod_name: str, driver: str) -> Allocated | None:
    """The device the pod's claim was allocated and what its ResourceSlice says it is."""
    claim = claim_of(run, pod_name)
    results = (((claim or {}).get("status") or {}).get("allocation") or {}).get("devices", {}).get("results")
    ours = [r for r in results or [] if r.get("driver") == driver]
    if claim is None or len(ours) != 1:
        return None
    device = slice_device(run, driver, ours[0]["pool"], ours[0]["device"])
    if device is None:
        return None
    attrs = device.get("attributes") or {}
    return Allocated(
        claim["metadata"]["name"],
        ours[0]["device"],
        str(_value(attrs, "parentUUID", driver)),
        str(_value(attrs, "profile", driver)),
        _int(_value(attrs, "placementStart", driver)),
        _int(_value(attrs, "placementSize", driver)),
    )


def instance_at(run: Run, node: str, a: Allocated) -> list[Instance]:
    """The MIG instances on the allocated device's GPU at its placement."""
    return [
        i for i in run.kit.instances(node) if (i.gpu_uuid, i.start, i.size) == (a.gpu_uuid, a.start, a.size)
    ]


def visible_devices(run: Run, node: str, pod_name: str) -> list[str]:
    """NVIDIA_VISIBLE_DEVICES of the pod's containers, as the simulated kubelet started them."""
    agent = run.lab.nodes[node].agent
    records = [r for r in list(agent.pods.values()) if r.name == pod_name and r.namespace == "default"]
    return sorted({v for r in records for v in r.env.values()})


def identities(run: Run, node: str) -> set[tuple[str, int, int, str]]:
    return {(i.gpu_uuid, i.gi, i.ci, i.mig_uuid) for i in run.kit.instances(node)}


def _identity_of(run: Run, node: str, a: Allocated | None) -> set[tuple[str, int, int, str]]:
    """The identity of the instance at an allocated device (empty if there is none)."""
    at = {i.mig_uuid for i in instance_at(run, node, a)} if a else set()
    return {i for i in identities(run, node) if i[3] in at}


def _ops(run: Run, node: str, since: int) -> list[str]:
    return [e["op"] for e in run.kit.nvml_events(node)[since:] if e["op"].startswith(("create", "destroy"))]


# ---- steps ---------------------------------------------------------------------------------------------


def _running(run: Run, name: str, timeout: float = 60.0) -> None:
    run.wait(lambda: run.kit.wait_phase(name, "Running", timeout), f"{name} is Running")


def _wait(run: Run, condition: Callable[[], object], timeout: float, text: str) -> Any:
    return run.wait(lambda: run.kit.wait(condition, timeout, text), text)


def _check_exact(run: Run, node: str, pod_name: str, driver: str, profile: str) -> Allocated | None:
    """The pod's claim got a `profile` device, and the GPUs hold exactly that instance, its workload on it."""
    a = allocated(run, pod_name, driver)
    run.check(a is not None, f"{pod_name}'s claim is allocated one device of {driver}")
    if a is None:
        return None
    run.check(
        a.profile == profile and a.start >= 0 and a.size > 0,
        f"{pod_name}'s device is a {profile} (ResourceSlice attributes)",
        f"{a.device}: {a.profile} at ({a.start},{a.size}) on {a.gpu_uuid}",
    )
    found = instance_at(run, node, a)
    run.check(
        len(found) == 1 and found[0].profile == profile,
        f"{pod_name}'s MIG instance is exactly the allocated device's GPU and placement",
        f"{[(i.profile, i.start, i.size, i.mig_uuid) for i in found]}",
    )
    if found:
        run.expect(
            visible_devices(run, node, pod_name),
            [found[0].mig_uuid],
            f"{pod_name}'s container runs on that MIG device (CDI: NVIDIA_VISIBLE_DEVICES)",
        )
    return a


def _create_templates(run: Run) -> None:
    custom = _custom(run)
    for name, profile in PROFILES.items():
        try:
            custom.create_namespaced_custom_object(
                GROUP, VERSION, "default", "resourceclaimtemplates", claim_template(name, profile)
            )
        except client.ApiException as error:
            if error.status != 409:  # a second run of the scenario on the same lab
                raise


def _leaks(run: Run, node: str) -> list[str]:
    """What DRA left on the node once no pod is left: instances, bare GPU instances, CDI specs,
    claims kubelet still holds prepared."""
    side = run.lab.nodes[node].dra
    out = [f"instance {i.profile}@{i.start} {i.mig_uuid}" for i in run.kit.instances(node)]
    out += [f"bare GPU instance {gi} on {gpu}" for n, gpu, gi in run.kit.bare_gpu_instances() if n == node]
    out += [f"CDI spec {p.name}" for p in sorted(side.cdi_dir.glob("*.json"))]
    out += [f"kubelet still holds claim {c.name}" for c in side.manager.claims()]
    return out


def _tool(name: str) -> str | None:
    tools = os.environ.get("DYNMIG_TOOLS", str(chart.ROOT / ".cache" / "tools"))
    return shutil.which(name, path=f"{tools}{os.pathsep}{os.environ.get('PATH', '')}")


def _kubectl_shows(run: Run, names: list[str]) -> None:
    kubectl = _tool("kubectl")
    if kubectl is None:
        run.say("kubectl not found (make tools): `kubectl get resourceclaims,resourceslices` skipped")
        return
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBECTL_")}
    done = subprocess.run(
        [kubectl, "--kubeconfig", str(run.lab.kubeconfig()), "get", "resourceclaims,resourceslices"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    run.show("kubectl get resourceclaims,resourceslices", (done.stdout + done.stderr).rstrip())
    run.check(
        done.returncode == 0 and all(n in done.stdout for n in names) and "allocated" in done.stdout,
        "kubectl with default settings lists the claims (allocated) and the node's slices",
        report.shorten(done.stderr.strip(), 140) if done.returncode else "",
    )


def _status_shows(run: Run, node: str, pods: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    done = subprocess.run(
        python_argv("-m", "dynmig.cli", "status", "--kubeconfig", str(run.lab.kubeconfig())),
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    run.show("dynmig status", done.stdout.rstrip())
    lines = done.stdout.splitlines()
    run.check(
        done.returncode == 0
        and any(node in line and "DRA" in line for line in lines)
        and all(p in done.stdout for p in pods),
        f"dynmig status shows {node} as a DRA node with {', '.join(pods)}",
        report.shorten(done.stderr.strip(), 140),
    )


def _bare(run: Run, node: str) -> list[tuple[str, str, int]]:
    """The node's GPU instances that have no compute instance yet: a create under way."""
    return [b for b in run.kit.bare_gpu_instances() if b[0] == node]


def _in_flight(run: Run, node: str, claim_prefix: str) -> bool:
    """kubelet has sent NodePrepareResources for a claim of this pod and had no answer yet."""
    side = run.lab.nodes[node].dra
    return any(c.name.startswith(claim_prefix) and not c.prepared for c in side.manager.claims())


# ---- the scenario ----------------------------------------------------------------------------------------


def dra_mode(run: Run) -> None:
    lab, k = run.lab, run.kit
    if not lab.dra_nodes:
        run.check(False, "the lab has a DRA node", "start it with --nodes 'NAME=2xA100-SXM4-40GB@dra'")
        raise ScenarioFailed("no DRA node")
    node = lab.dra_nodes[0]
    driver = dra_node.driver_name(lab.rendered)

    run.step(f"1. Pods with ResourceClaimTemplates (1g.5gb, 1g.5gb, 3g.20gb) on {node}")
    _create_templates(run)
    pods = {"dra-a": "dra-1g", "dra-b": "dra-1g", "dra-c": "dra-3g"}
    for name, template in pods.items():
        k.create(claim_pod(name, template))
    for name in pods:
        _running(run, name)
    got = {name: _check_exact(run, node, name, driver, PROFILES[t]) for name, t in pods.items()}
    run.expect(len(k.instances(node)), 3, f"{node} holds exactly three MIG instances")
    run.show("simulated GPUs", report.nvidia_smi(k, [node], only_used=True))

    run.step("2. kubectl and dynmig status show the claims, the slices and the pods")
    _kubectl_shows(run, [a.claim for a in got.values() if a])
    _status_shows(run, node, list(pods))

    run.step("3. Deleting dra-b destroys exactly its instance")
    before = identities(run, node)
    gone = _identity_of(run, node, got["dra-b"])
    k.delete("dra-b")
    _wait(
        run,
        lambda: identities(run, node) == before - gone,
        30,
        "dra-b's instance is destroyed, the others stay",
    )

    run.step("4. The DRA plugin restarts (its DaemonSet pod deleted): it adopts what runs")
    before, since = identities(run, node), len(k.nvml_events(node))
    lab.restart_dra_plugin(node, delete_pod=True)
    run.check(True, "a new dra-plugin pod registered with kubelet")
    run.expect(identities(run, node), before, "every instance is still there, same UUIDs")
    run.expect(_ops(run, node, since), [], "the restart created and destroyed nothing")
    for name in ("dra-a", "dra-c"):
        run.expect(k.phase(name), "Running", f"{name} is still Running")
    mine = _identity_of(run, node, got["dra-a"])
    k.delete("dra-a")
    _wait(
        run,
        lambda: identities(run, node) == before - mine,
        30,
        "after the restart, deleting dra-a destroys exactly its instance",
    )

    run.step("5. Chaos: kill -9 the plugin while NodePrepareResources is creating an instance")
    _chaos(run, node, driver)

    run.step("6. Every pod deleted: nothing is left behind")
    k.delete_all()
    _wait(run, lambda: not _leaks(run, node), 30, f"no instance, CDI spec or prepared claim left on {node}")


def _chaos(run: Run, node: str, driver: str) -> None:
    lab, k = run.lab, run.kit
    nvml = lab.nodes[node].nvml
    before = identities(run, node)
    nvml.set_timing("driver")  # a GI create takes seconds (sim.nvml drivers/*.yaml timing)
    try:
        k.create(claim_pod("dra-chaos", "dra-1g"))
        try:
            half = k.wait(
                lambda: _bare(run, node) if _in_flight(run, node, "dra-chaos-") else None,
                60,
                "a prepare mid-create",
            )
        except WaitTimeout as error:
            run.check(
                False,
                "kubelet's NodePrepareResources for dra-chaos starts creating a GPU instance",
                str(error),
            )
            raise ScenarioFailed("no prepare in flight") from None
        lab.restart_dra_plugin(node, sig=signal.SIGKILL)
        run.check(
            True,
            "the plugin was killed with SIGKILL mid-prepare (a GPU instance without its compute instance) "
            "and kubelet restarted it",
            f"GI {half[0][2]} on {half[0][1]}",
        )
    finally:
        nvml.set_timing("zero")
    run.wait(
        lambda: k.wait_phase("dra-chaos", "Running", 90), "dra-chaos ends Running (kubelet retried prepare)"
    )
    a = _check_exact(run, node, "dra-chaos", driver, PROFILES["dra-1g"])
    extra = identities(run, node) - before
    run.expect(
        len(extra), 1, "the killed prepare left exactly one new instance: dra-chaos's", f"{sorted(extra)}"
    )
    if a is not None:
        run.check(not k.bare_gpu_instances(), "no half-made GPU instance is left")
