"""dynmig serve end to end: real uvicorn over TLS, called by the simulated API server (admission)
and the simulated kube-scheduler (filter, bind), with clients of every patch type and identity."""

from __future__ import annotations

import copy
import datetime as dt
import json
import ssl
import urllib.request

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from prometheus_client.parser import text_string_to_metric_families
from waiting_testkit import eventually
from webhooks_testkit import PluginStandIn, node

from mig.annotations import BIND_PHASE, MIG_ALLOCATIONS, VGPU_NODE, decode_allocations

RESERVATION = json.dumps(
    [
        {
            "containerIndex": 0,
            "deviceIndex": 0,
            "gpuUUID": "GPU-n1-0",
            "profile": "1g.10gb",
            "placement": {"start": 6, "size": 1},
        }
    ]
)


def core(apiserver, who: str = "alice") -> client.CoreV1Api:
    return client.CoreV1Api(apiserver.api_client(who))


def user_pod(name: str, memory: int = 8000, **annotations: str) -> dict:
    """A pod as a user writes it: default scheduler, only memory requested."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "containers": [
                {"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpumem": str(memory)}}}
            ]
        },
    }


def read(apiserver, name: str) -> dict:
    return copy.deepcopy(apiserver.get("pods", name, "team"))  # the store's own object: never mutate it


def test_a_users_gpu_pod_is_admitted_scheduled_and_bound_to_a_mig_placement(apiserver, cluster):
    apiserver.create(node("n1", gpus=2))
    core(apiserver).create_namespaced_pod("team", user_pod("train", memory=30000))
    assert eventually(lambda: read(apiserver, "train")["spec"].get("nodeName") == "n1")
    pod = read(apiserver, "train")
    assert pod["spec"]["schedulerName"] == "dynmig-scheduler"
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    (alloc,) = decode_allocations(pod["metadata"]["annotations"][MIG_ALLOCATIONS])
    assert alloc.profile == "3g.40gb" and alloc.gpuUUID.startswith("GPU-n1-")
    assert pod["metadata"]["annotations"][BIND_PHASE] == "allocating"
    assert pod["metadata"]["annotations"][VGPU_NODE] == "n1"


@pytest.fixture
def plugin(apiserver):
    stand_in = PluginStandIn(apiserver).start()
    yield stand_in
    stand_in.stop()


def test_many_pods_fill_the_gpus_without_overlap_and_the_rest_stay_pending_with_a_reason(
    apiserver, cluster, plugin
):
    apiserver.create(node("n1", gpus=1))
    api = core(apiserver)
    for i in range(9):  # an A100 80GB holds seven 1g.10gb
        api.create_namespaced_pod("team", user_pod(f"p{i}", memory=9000))
    assert eventually(
        lambda: sum(1 for i in range(9) if read(apiserver, f"p{i}")["spec"].get("nodeName")) == 7
    )
    placements = []
    for i in range(9):
        ann = read(apiserver, f"p{i}")["metadata"]["annotations"]
        if read(apiserver, f"p{i}")["spec"].get("nodeName"):
            placements += [a.placement_value for a in decode_allocations(ann[MIG_ALLOCATIONS])]
    assert sorted(p.start for p in placements) == list(range(7))

    def refusals() -> list[str]:
        events = json.loads(
            core(apiserver, "admin").list_namespaced_event("team", _preload_content=False).data
        )
        return [
            e["message"]
            for e in events["items"]
            if e["reason"] == "FilteringFailed" and "not enough free slices" in e["message"]
        ]

    assert eventually(refusals), "no FilteringFailed event names the missing slices"
    assert "1g.10gb needs 1 at one of" in refusals()[-1]


def admin_pod_with_reservation(apiserver, name: str = "held") -> None:
    pod = user_pod(name)
    pod["metadata"]["annotations"] = {MIG_ALLOCATIONS: RESERVATION}
    pod["spec"]["schedulerName"] = "volcano"  # never scheduled: only its annotations matter here
    core(apiserver, "scheduler").create_namespaced_pod("team", pod)


@pytest.mark.parametrize(
    "who,allowed", [("alice", False), ("admin", False), ("scheduler", True), ("device-plugin", True)]
)
def test_only_dynmig_identities_may_create_a_pod_carrying_a_reservation(apiserver, cluster, who, allowed):
    pod = user_pod("p")
    pod["metadata"]["annotations"] = {MIG_ALLOCATIONS: RESERVATION}
    pod["spec"]["schedulerName"] = "volcano"
    if allowed:
        core(apiserver, who).create_namespaced_pod("team", pod)
        assert read(apiserver, "p")["metadata"]["annotations"][MIG_ALLOCATIONS] == RESERVATION
    else:
        with pytest.raises(ApiException) as denied:
            core(apiserver, who).create_namespaced_pod("team", pod)
        assert denied.value.status == 403 and "controller-owned" in denied.value.body


PATCHES = {
    "json-patch": (
        [{"op": "replace", "path": "/metadata/annotations/hami.io~1vgpu-mig-allocations", "value": "[]"}],
        "application/json-patch+json",
    ),
    "json-patch-remove": (
        [{"op": "remove", "path": "/metadata/annotations/hami.io~1vgpu-mig-allocations"}],
        "application/json-patch+json",
    ),
    "merge-patch": ({"metadata": {"annotations": {MIG_ALLOCATIONS: None}}}, "application/merge-patch+json"),
    "strategic-merge-patch": (
        {"metadata": {"annotations": {MIG_ALLOCATIONS: "[]"}}},
        "application/strategic-merge-patch+json",
    ),
}


@pytest.mark.parametrize("kind", sorted(PATCHES))
def test_a_user_cannot_touch_the_reservation_with_any_patch_type(apiserver, cluster, kind):
    admin_pod_with_reservation(apiserver)
    body, content_type = PATCHES[kind]
    with pytest.raises(ApiException) as denied:
        core(apiserver, "alice").patch_namespaced_pod("held", "team", body, _content_type=content_type)
    assert denied.value.status == 403 and "controller-owned" in denied.value.body
    assert read(apiserver, "held")["metadata"]["annotations"][MIG_ALLOCATIONS] == RESERVATION
    core(apiserver, "device-plugin").patch_namespaced_pod("held", "team", body, _content_type=content_type)
    assert read(apiserver, "held")["metadata"]["annotations"].get(MIG_ALLOCATIONS) != RESERVATION


def test_a_user_cannot_touch_the_reservation_with_a_full_update(apiserver, cluster):
    admin_pod_with_reservation(apiserver)
    pod = read(apiserver, "held")
    pod["metadata"]["annotations"][MIG_ALLOCATIONS] = "[]"
    with pytest.raises(ApiException) as denied:
        core(apiserver, "alice").replace_namespaced_pod("held", "team", pod)
    assert denied.value.status == 403
    pod = read(apiserver, "held")
    pod["metadata"]["annotations"]["team"] = "ml"
    core(apiserver, "alice").replace_namespaced_pod("held", "team", pod)  # other edits stay allowed
    assert read(apiserver, "held")["metadata"]["annotations"]["team"] == "ml"


def test_kubectl_annotate_of_the_reservation_is_denied(apiserver, cluster, kubectl):
    import subprocess

    admin_pod_with_reservation(apiserver)
    out = subprocess.run(
        [
            kubectl,
            "--kubeconfig",
            str(apiserver.kubeconfig("alice")),
            "-n",
            "team",
            "annotate",
            "--overwrite",
            "pod",
            "held",
            f"{MIG_ALLOCATIONS}=[]",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert out.returncode != 0 and "controller-owned" in out.stderr


def test_a_bad_preference_is_rejected_at_create_naming_the_allowed_values(apiserver, cluster):
    with pytest.raises(ApiException) as denied:
        core(apiserver).create_namespaced_pod(
            "team", user_pod("p", **{"nvidia.com/mig-profile-preference": "5g"})
        )
    assert denied.value.status == 403
    assert "'5g' matches no profile" in denied.value.body and "3g.40gb" in denied.value.body


def test_a_preference_no_gpu_model_of_the_fleet_offers_is_admitted_with_a_warning(apiserver, cluster):
    apiserver.create(node("a100-node", "A100-SXM4-40GB"))
    # the fleet is what serve's cache has seen: the warning names the fleet's models once the node is in
    eventually(lambda: cluster.service.fleet.models() == {"NVIDIA A100-SXM4-40GB"})
    created = core(apiserver).create_namespaced_pod_with_http_info(
        "team", user_pod("p", **{"nvidia.com/mig-profile-preference": "3g.40gb"}), _preload_content=False
    )
    assert created.status == 201
    warning = created.headers.get("Warning", "")
    assert "3g.40gb is allowed on no profile of the fleet's GPU models" in warning, warning


def test_a_device_config_typo_is_rejected_with_the_policy_checks_message(apiserver, cluster):
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "dynmig-device-config", "labels": {"dynmig.io/device-config": "true"}},
        "data": {
            "device-config.yaml": "nvidia:\n  migProfileAllowlist:\n    - models: [A30]\n      profiles: [x]\n"
        },
    }
    with pytest.raises(ApiException) as denied:
        core(apiserver, "admin").create_namespaced_config_map("dynmig", cm)
    assert denied.value.status == 403 and "nvidia.migProfileAllowlist[0].profiles[0]" in denied.value.body


def test_metrics_report_realized_instances_with_hamis_labels_and_free_slices(apiserver, cluster):
    apiserver.create(node("n1", gpus=1))
    held = user_pod("running")
    held["spec"]["schedulerName"] = "volcano"
    reservation = json.loads(RESERVATION)
    reservation[0].update(migUUID="MIG-abc", gpuInstanceID=13, computeInstanceID=0)
    held["metadata"]["annotations"] = {
        MIG_ALLOCATIONS: json.dumps(reservation),
        VGPU_NODE: "n1",
        "hami.io/vgpu-devices-allocated": "GPU-n1-0,NVIDIA,9728,15:;",
    }
    core(apiserver, "device-plugin").create_namespaced_pod("team", held)
    instance = {
        "node": "n1",
        "device_uuid": "GPU-n1-0",
        "device_index": "0",
        "mig_uuid": "MIG-abc",
        "profile": "1g.10gb",
        "gpu_instance_id": "13",
        "compute_instance_id": "0",
        "placement_start": "6",
        "placement_size": "1",
        "zone": "vGPU",
    }

    def scrape() -> dict[tuple[str, frozenset], float]:
        text = urllib.request.urlopen(cluster.listeners.metrics_url, timeout=5).read().decode()
        return {
            (s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    def value(samples, name, **labels):
        return samples.get((name, frozenset(labels.items())))

    assert eventually(lambda: value(scrape(), "hami_node_gpu_mig_instance_info", **instance) == 1)
    samples = scrape()
    gpu = {"node": "n1", "device_uuid": "GPU-n1-0", "device_index": "0"}
    assert value(samples, "dynmig_gpu_free_slices", **gpu) == 7
    assert value(samples, "dynmig_gpu_used_slices", **gpu) == 1
    assert value(samples, "dynmig_gpu_slices", **gpu) == 8
    # 7g needs slice 6, so the largest placeable is a 3g.40gb
    assert value(samples, "dynmig_gpu_largest_placeable_profile_memory_bytes", **gpu, profile="3g.40gb") == (
        40192 * 1024 * 1024
    )
    hami = {**gpu, "device_type": "NVIDIA A100-SXM4-80GB", "zone": "vGPU"}
    assert value(samples, "hami_gpu_shared_count", **hami) == 1
    assert value(samples, "hami_gpu_memory_allocated_bytes", **hami, device_cores="100") == 9728 * 1024 * 1024
    assert value(samples, "hami_gpu_memory_limit_bytes", **hami) == 81920 * 1024 * 1024
    assert value(samples, "hami_gpu_core_allocated_ratio", **hami) == 15
    assert value(samples, "hami_node_gpu_memory_allocated_ratio", **hami) == 9728 / 81920
    container = {"namespace": "team", "node": "n1", "pod": "running", "container_index": "0"}
    assert value(
        samples, "hami_vgpu_memory_allocated_bytes", **container, device_uuid="GPU-n1-0", zone="vGPU"
    ) == (9728 * 1024 * 1024)
    # the instance with the pod it serves: what joins DCGM exporter's per-instance series to pods
    owner = {"node": "n1", "gpu_uuid": "GPU-n1-0", "gpu_instance_id": "13", "compute_instance_id": "0"}
    owner |= {"profile": "1g.10gb", "mig_uuid": "MIG-abc", "namespace": "team", "pod": "running"}
    assert value(samples, "dynmig_mig_instance_info", **owner) == 1


def test_health_and_readiness_over_tls(cluster):
    ctx = ssl.create_default_context(cadata=cluster.ca.cert_pem().decode())
    for path in ("/healthz", "/readyz"):
        reply = urllib.request.urlopen(cluster.listeners.url + path, context=ctx, timeout=5)
        assert reply.status == 200


def team_events(apiserver, reason: str) -> list[dict]:
    events = json.loads(core(apiserver, "admin").list_namespaced_event("team", _preload_content=False).data)
    return [e for e in events["items"] if e["reason"] == reason]


def test_pods_created_at_once_wait_for_each_others_binds_without_a_dynmig_warning(apiserver, cluster):
    apiserver.create(node("n1", gpus=1))
    api = core(apiserver)
    names = ["pair-small", "pair-medium", "pair-large"]
    for name in names:  # three at once: the second and third filters find n1 locked by the first bind
        api.create_namespaced_pod("team", user_pod(name, memory=9000))
    bound = lambda: [n for n in names if read(apiserver, n)["spec"].get("nodeName")]  # noqa: E731
    assert eventually(lambda: len(bound()) == 1)  # no device plugin yet: the first lock stays
    first = bound()[0]
    waiting = lambda: {e["involvedObject"]["name"] for e in team_events(apiserver, "FailedScheduling")}  # noqa: E731
    assert eventually(lambda: waiting() == set(names) - {first})
    message = team_events(apiserver, "FailedScheduling")[0]["message"]
    # kube-scheduler's words: the node is locked by the first bind, or (when the filter ran between
    # the first pod's filter and its bind) chosen for it
    assert (
        f"1 node lock held by team/{first} (a bind is in progress" in message
        or "1 chosen for another pod whose bind is in progress" in message
    ), message

    plugin = PluginStandIn(apiserver).start()  # Allocate done: each bind's lock is released
    try:
        assert eventually(lambda: len(bound()) == 3)
    finally:
        plugin.stop()
    # a pod that fits nowhere gets dynmig's Warning; the recorder posts in order, so once it shows,
    # any warning about the three would have shown before it
    api.create_namespaced_pod("team", user_pod("too-big", memory=200000))
    assert eventually(lambda: team_events(apiserver, "FilteringFailed"))
    assert {e["involvedObject"]["name"] for e in team_events(apiserver, "FilteringFailed")} == {"too-big"}


def test_a_mig_pod_turning_running_is_timed_from_its_creation_to_its_containers_start(apiserver, cluster):
    created = core(apiserver, "device-plugin").create_namespaced_pod(
        "team", user_pod("starting", **{VGPU_NODE: "n1"})
    )
    born = created.metadata.creation_timestamp
    assert eventually(lambda: cluster.service.cache.pod("team", "starting") is not None)
    started = (born + dt.timedelta(seconds=7)).strftime("%Y-%m-%dT%H:%M:%SZ")
    running = {"name": "main", "image": "cuda", "imageID": "", "restartCount": 0, "ready": True}
    running["state"] = {"running": {"startedAt": started}}
    core(apiserver, "admin").patch_namespaced_pod_status(
        "starting",
        "team",
        {"status": {"phase": "Running", "containerStatuses": [running]}},
        _preload_content=False,
    )

    def timed(suffix: str) -> float | None:
        return cluster.service.metrics.registry.get_sample_value(
            f"dynmig_pod_time_to_running_seconds{suffix}"
        )

    assert eventually(lambda: timed("_count") == 1)
    assert timed("_sum") == 7
    # a later update of the running pod is not a second start
    core(apiserver, "admin").patch_namespaced_pod("starting", "team", {"metadata": {"labels": {"x": "y"}}})
    assert eventually(
        lambda: (cluster.service.cache.pod("team", "starting") or {}).get("metadata", {}).get("labels")
    )
    assert timed("_count") == 1
