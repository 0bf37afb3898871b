"""Extender filter and bind over HTTP, with the cache fed by the simulated API server's watches."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from waiting_testkit import eventually
from webhooks_testkit import gpu_pod, node

from mig.annotations import (
    BIND_PHASE,
    DEVICES_ALLOCATED,
    DEVICES_TO_ALLOCATE,
    MIG_ALLOCATIONS,
    NODE_LOCK,
    VGPU_NODE,
    decode_allocations,
)
from mig.types import Placement
from webhooks.filter import pod_request
from webhooks.fleet import Asking


def seed(apiserver, service, *objs):
    created = [apiserver.create(o) for o in objs]
    for o in created:
        kind, name = o["kind"], o["metadata"]["name"]
        if kind == "Node":
            assert eventually(lambda n=name: service.cache.node(n) is not None)
        else:
            ns = o["metadata"]["namespace"]
            assert eventually(lambda ns=ns, n=name: service.cache.pod(ns, n) is not None)
    return created


def filter_args(pod: dict, nodes: list[str]) -> dict:
    return {"Pod": pod, "Nodes": None, "NodeNames": nodes}


def post_filter(extender, service, pod: dict, nodes: list[str]) -> dict:
    return extender.post("/filter", json=filter_args(pod, nodes)).json()


def schedule(extender, service, pod: dict, nodes: list[str]) -> str:
    """Filter then bind, as kube-scheduler does: the node the pod is bound to (its record is on it)."""
    (chosen,) = post_filter(extender, service, pod, nodes)["NodeNames"]
    assert post_bind(extender, pod, chosen) == {"Error": ""}
    return chosen


def post_bind(extender, pod: dict, node_name: str) -> dict:
    meta = pod["metadata"]
    body = {"PodName": meta["name"], "PodNamespace": "team", "PodUID": meta["uid"], "Node": node_name}
    return extender.post("/bind", json=body).json()


def stored_pod(apiserver, name: str, namespace: str = "team") -> dict:
    return apiserver.get("pods", name, namespace)


def events(apiserver, reason: str, namespace: str = "team") -> list[dict]:
    core = client.CoreV1Api(apiserver.api_client("admin"))
    found = core.list_namespaced_event(namespace, _preload_content=False)
    return [e for e in json.loads(found.data)["items"] if e["reason"] == reason]


def test_a_pod_asking_for_8000_mib_gets_a_1g_10gb_on_an_a100_80gb_recorded_on_the_pod_by_its_bind(
    apiserver, service, extender
):
    _, pod = seed(apiserver, service, node("n1"), gpu_pod("p1", memory=8000))
    out = post_filter(extender, service, pod, ["n1"])
    assert out["Error"] == "" and out["NodeNames"] == ["n1"]
    assert VGPU_NODE not in (stored_pod(apiserver, "p1")["metadata"].get("annotations") or {})
    assert post_bind(extender, pod, "n1") == {"Error": ""}
    ann = stored_pod(apiserver, "p1")["metadata"]["annotations"]
    (alloc,) = decode_allocations(ann[MIG_ALLOCATIONS])
    assert (alloc.containerIndex, alloc.deviceIndex, alloc.gpuUUID, alloc.profile) == (
        0,
        0,
        "GPU-n1-0",
        "1g.10gb",
    )
    assert ann[VGPU_NODE] == "n1"
    assert ann[DEVICES_TO_ALLOCATE] == ann[DEVICES_ALLOCATED] == "GPU-n1-0,NVIDIA,9728,15:;"


def test_bind_takes_the_node_lock_marks_allocating_and_binds(apiserver, service, extender):
    _, pod = seed(apiserver, service, node("n1"), gpu_pod("p1"))
    post_filter(extender, service, pod, ["n1"])
    uid = pod["metadata"]["uid"]
    out = extender.post(
        "/bind", json={"PodName": "p1", "PodNamespace": "team", "PodUID": uid, "Node": "n1"}
    ).json()
    assert out == {"Error": ""}
    stored = stored_pod(apiserver, "p1")
    assert stored["spec"]["nodeName"] == "n1"
    assert stored["metadata"]["annotations"][BIND_PHASE] == "allocating"
    lock = apiserver.get("nodes", "n1")["metadata"]["annotations"][NODE_LOCK]
    assert lock.endswith(",team,p1")


def test_a_pod_that_fits_nowhere_gets_mig_reasons_per_node_and_a_warning_event(apiserver, service, extender):
    _, _, pod = seed(
        apiserver, service, node("n1", "A30"), node("n2", "A100-SXM4-40GB"), gpu_pod("big", memory=60000)
    )
    out = post_filter(extender, service, pod, ["n1", "n2", "n3"])
    assert out["Error"] == "" and not out["NodeNames"]
    assert set(out["FailedNodes"]) == {"n1", "n2", "n3"}
    assert "no allowlisted profile has 60000 MiB" in out["FailedNodes"]["n1"]
    assert "no MIG GPUs" in out["FailedNodes"]["n3"]
    warned = eventually(lambda: events(apiserver, "FilteringFailed"))
    assert warned and "60000 MiB" in warned[0]["message"] and warned[0]["type"] == "Warning"


def test_a_fragmented_gpu_names_its_free_slices(apiserver, service, extender):
    reserved = [
        {
            "containerIndex": 0,
            "deviceIndex": i,
            "gpuUUID": "GPU-n1-0",
            "profile": "1g.10gb",
            "placement": {"start": s, "size": 1},
        }
        for i, s in enumerate((1, 3, 5))
    ]
    holder = gpu_pod("holder")
    holder["metadata"]["annotations"] = {
        VGPU_NODE: "n1",
        MIG_ALLOCATIONS: json.dumps(reserved),
        DEVICES_ALLOCATED: "GPU-n1-0,NVIDIA,9728,15:" * 3 + ";",
    }
    _, _, pod = seed(apiserver, service, node("n1"), holder, gpu_pod("p", memory=19000))
    out = post_filter(extender, service, pod, ["n1"])
    assert "fragmented: free slices 0,2,4,6,7" in out["FailedNodes"]["n1"]


def test_full_node_objects_are_answered_with_node_objects(apiserver, service, extender):
    n1, n2, pod = seed(apiserver, service, node("n1"), node("n2"), gpu_pod("p1"))
    body = {"Pod": pod, "Nodes": {"items": [n1, n2]}, "NodeNames": None}
    out = extender.post("/filter", json=body).json()
    assert out["NodeNames"] is None
    assert [n["metadata"]["name"] for n in out["Nodes"]["items"]] in (["n1"], ["n2"])


def test_a_pod_without_gpus_keeps_every_candidate(apiserver, service, extender):
    pod = {
        "metadata": {"name": "web", "namespace": "team", "uid": "u1"},
        "spec": {"containers": [{"name": "c"}]},
    }
    out = post_filter(extender, service, pod, ["a", "b"])
    assert out["NodeNames"] == ["a", "b"] and out["Error"] == ""


def test_a_body_asking_for_no_gpu_keeps_every_candidate_even_when_the_clusters_pod_asks_for_one(
    apiserver, service, extender
):
    _, pod = seed(apiserver, service, node("n1"), gpu_pod("p1", memory=8000))
    body = json.loads(json.dumps(pod))
    body["spec"]["containers"][0]["resources"] = {}
    out = post_filter(extender, service, body, ["n1", "n2"])
    assert out["NodeNames"] == ["n1", "n2"] and out["Error"] == ""
    assert service.fleet.placements()["GPU-n1-0"] == []  # nothing reserved for it
    assert post_filter(extender, service, pod, ["n1"])["NodeNames"] == ["n1"]  # its own body is placed


def test_refiltering_a_pod_replaces_its_reservation_instead_of_adding_one(apiserver, service, extender):
    _, pod = seed(apiserver, service, node("n1"), gpu_pod("p1", memory=40000))
    for _ in range(3):
        out = post_filter(extender, service, pod, ["n1"])
        assert out["NodeNames"] == ["n1"], out
    holders = service.fleet.placements()["GPU-n1-0"]
    assert len(holders) == 1


def test_filters_for_pods_that_do_not_exist_reserve_nothing_and_block_no_node(apiserver, service, extender):
    _, real = seed(apiserver, service, node("n1"), gpu_pod("real"))
    for i in range(2):
        ghost = gpu_pod(f"ghost-{i}")
        ghost["metadata"]["uid"] = f"never-created-{i}"
        out = extender.post("/filter", json=filter_args(ghost, ["n1"])).json()
        assert out["Error"] == f"pod team/ghost-{i} does not exist in the cluster"
    assert service.fleet.placements()["GPU-n1-0"] == []
    assert post_filter(extender, service, real, ["n1"])["NodeNames"] == ["n1"]  # n1 is not held for a ghost


def test_a_pod_whose_binding_fails_is_not_bound_and_frees_its_node_and_placement(
    apiserver, service, extender
):
    _, pod = seed(apiserver, service, node("n1"), gpu_pod("p1"))
    assert post_filter(extender, service, pod, ["n1"])["NodeNames"] == ["n1"]
    apiserver.faults.fail_next(verb="create", resource="pods/binding", code=500)
    assert "failed" in post_bind(extender, pod, "n1")["Error"]
    stored = stored_pod(apiserver, "p1")
    assert stored["spec"].get("nodeName") is None
    assert VGPU_NODE not in (stored["metadata"].get("annotations") or {})
    assert NODE_LOCK not in apiserver.get("nodes", "n1")["metadata"]["annotations"]
    assert service.fleet.placements()["GPU-n1-0"] == []
    assert eventually(lambda: events(apiserver, "BindingFailed"))


def test_a_bind_without_this_schedulers_reservation_fails_so_kube_scheduler_filters_again(
    apiserver, service, extender
):
    _, pod = seed(apiserver, service, node("n1"), gpu_pod("p1"))  # never filtered (or before a restart)
    out = post_bind(extender, pod, "n1")
    assert "holds no MIG reservation for the pod" in out["Error"]
    assert stored_pod(apiserver, "p1")["spec"].get("nodeName") is None
    assert NODE_LOCK not in apiserver.get("nodes", "n1")["metadata"]["annotations"]


def test_a_bind_to_another_node_than_the_reservations_fails(apiserver, service, extender):
    _, _, pod = seed(apiserver, service, node("n1"), node("n2"), gpu_pod("p1"))
    chosen = post_filter(extender, service, pod, ["n1"])["NodeNames"]
    assert chosen == ["n1"]
    assert "reservation is on node n1, not n2" in post_bind(extender, pod, "n2")["Error"]
    assert stored_pod(apiserver, "p1")["spec"].get("nodeName") is None


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_bind_after_the_fleet_let_the_reservation_expire_fails(apiserver, start_service):
    service = start_service(reservation_ttl=120.0)
    service.fleet.clock = clock = Clock()
    from starlette.testclient import TestClient

    _, pod = seed(apiserver, service, node("n1"), gpu_pod("p1"))
    with TestClient(service.extender_app) as http:
        assert post_filter(http, service, pod, ["n1"])["NodeNames"] == ["n1"]
        clock.now += 120.0  # its slices may now go to another pod: the bind must not record them
        assert "holds no MIG reservation for the pod" in post_bind(http, pod, "n1")["Error"]
    assert stored_pod(apiserver, "p1")["spec"].get("nodeName") is None


def test_a_reservation_the_pod_never_shows_expires(apiserver, start_service):
    service = start_service(reservation_ttl=120.0)
    service.fleet.clock = clock = Clock()
    seed(apiserver, service, node("n1"))
    pod = apiserver.create(gpu_pod("p1"))
    request = pod_request(pod, service.device_config.get().resources)
    assert request is not None
    service.fleet.decide(request, None, Asking(pod["metadata"]["uid"], "team", "p1"))
    assert service.fleet.placements()["GPU-n1-0"]
    clock.now += 120.0
    service.fleet.sweep()
    assert service.fleet.placements()["GPU-n1-0"] == []


def test_a_finished_or_deleted_pod_frees_its_placement(apiserver, service, extender):
    _, _, p1, p2 = seed(
        apiserver, service, node("n1"), node("n2"), gpu_pod("p1", memory=40000), gpu_pod("p2", memory=40000)
    )

    def held() -> int:
        return sum(len(v) for v in service.fleet.placements().values())

    for pod in (p1, p2):
        (chosen,) = post_filter(extender, service, pod, ["n1", "n2"])["NodeNames"]
        assert post_bind(extender, pod, chosen) == {"Error": ""}
    assert eventually(lambda: held() == 2 and not service.fleet._reserved)
    core = client.CoreV1Api(apiserver.api_client("admin"))
    core.patch_namespaced_pod_status("p1", "team", {"status": {"phase": "Succeeded"}})
    assert eventually(lambda: held() == 1)
    core.delete_namespaced_pod("p2", "team", grace_period_seconds=0)
    apiserver.finish_deletions()
    assert eventually(lambda: held() == 0)


def test_a_node_chosen_for_a_pod_waits_for_its_bind_before_taking_another(apiserver, service, extender):
    _, p1, p2 = seed(apiserver, service, node("n1", gpus=2), gpu_pod("p1"), gpu_pod("p2"))
    assert post_filter(extender, service, p1, ["n1"])["NodeNames"] == ["n1"]
    out = post_filter(extender, service, p2, ["n1"])
    assert out["NodeNames"] == [] and "bind is in progress" in out["FailedNodes"]["n1"]
    bind = {"PodName": "p1", "PodNamespace": "team", "PodUID": p1["metadata"]["uid"], "Node": "n1"}
    assert extender.post("/bind", json=bind).json() == {"Error": ""}
    out = post_filter(extender, service, p2, ["n1"])
    assert "node lock held by team/p1" in out["FailedNodes"]["n1"]  # until the device plugin releases it


def test_a_device_without_a_reservation_fails_the_gpu_closed(apiserver, service, extender):
    legacy = gpu_pod("legacy")
    legacy["metadata"]["annotations"] = {VGPU_NODE: "n1", DEVICES_ALLOCATED: "GPU-n1-0,NVIDIA,9728,15:;"}
    _, _, pod = seed(apiserver, service, node("n1"), legacy, gpu_pod("p"))
    out = post_filter(extender, service, pod, ["n1"])
    assert "unhealthy" in out["FailedNodes"]["n1"]
    assert "team/legacy has a device on this MIG GPU without a reservation" in out["FailedNodes"]["n1"]


def release_lock(apiserver, service, node_name: str) -> None:
    core = client.CoreV1Api(apiserver.api_client("admin"))
    core.patch_node(node_name, {"metadata": {"annotations": {NODE_LOCK: None}}})
    assert eventually(lambda: node_name not in service.cache.locks)


def test_a_restarted_server_rebuilds_the_same_occupancy(apiserver, start_service):
    first = start_service()
    seed(apiserver, first, node("n1", gpus=2), node("n2", "H100-SXM5-80GB", gpus=2))
    from starlette.testclient import TestClient

    with TestClient(first.extender_app) as http:
        for i, mem in enumerate([8000, 20000, 40000, 8000, 70000, 15000]):
            pod = apiserver.create(gpu_pod(f"p{i}", memory=mem))
            assert eventually(lambda n=f"p{i}": first.cache.pod("team", n))
            (chosen,) = http.post("/filter", json=filter_args(pod, ["n1", "n2"])).json()["NodeNames"]
            assert post_bind(http, pod, chosen) == {"Error": ""}
            release_lock(apiserver, first, chosen)  # as the device plugin does after Allocate
    assert eventually(lambda: not first.fleet._reserved)
    before = {k: sorted(v) for k, v in first.fleet.placements().items()}
    first.stop()
    second = start_service()
    assert {k: sorted(v) for k, v in second.fleet.placements().items()} == before
    assert sum(len(v) for v in before.values()) == 6


def test_the_cache_relists_after_its_watch_history_is_gone(apiserver, service):
    seed(apiserver, service, node("n1"))
    relists = service.cache.pods_reflector.relists
    apiserver.compact()
    apiserver.faults.cut_watches()
    apiserver.create(gpu_pod("late"))
    assert eventually(lambda: service.cache.pod("team", "late") is not None)
    assert service.cache.pods_reflector.relists >= relists


def test_bind_fails_while_another_live_pod_holds_the_node_lock(apiserver, service, extender):
    import datetime as dt

    from mig.annotations import encode_node_lock

    _, _, pod = seed(apiserver, service, node("n1"), gpu_pod("owner"), gpu_pod("p1"))
    assert post_filter(extender, service, pod, ["n1"])["NodeNames"] == ["n1"]
    # another scheduler (or a device plugin's stale lock) locks the node between filter and bind
    lock = encode_node_lock(dt.datetime.now(dt.UTC), "team", "owner")
    client.CoreV1Api(apiserver.api_client("admin")).patch_node(
        "n1", {"metadata": {"annotations": {NODE_LOCK: lock}}}
    )
    out = extender.post(
        "/bind",
        json={"PodName": "p1", "PodNamespace": "team", "PodUID": pod["metadata"]["uid"], "Node": "n1"},
    ).json()
    assert "node lock contention" in out["Error"]
    assert stored_pod(apiserver, "p1")["spec"].get("nodeName") is None
    assert service.fleet.reservation(pod["metadata"]["uid"]) is None
    assert eventually(lambda: events(apiserver, "BindingFailed"))


@pytest.mark.parametrize("lock_age,owner", [(10, "owner"), (0, "gone")])
def test_bind_takes_over_an_expired_lock_or_one_whose_owner_is_gone(
    apiserver, service, extender, lock_age, owner
):
    import datetime as dt

    from mig.annotations import encode_node_lock

    n1 = node("n1")
    taken = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=lock_age)
    n1["metadata"]["annotations"][NODE_LOCK] = encode_node_lock(taken, "team", owner)
    _, _, pod = seed(apiserver, service, n1, gpu_pod("owner"), gpu_pod("p1"))
    post_filter(extender, service, pod, ["n1"])
    out = extender.post(
        "/bind",
        json={"PodName": "p1", "PodNamespace": "team", "PodUID": pod["metadata"]["uid"], "Node": "n1"},
    ).json()
    assert out == {"Error": ""}
    assert apiserver.get("nodes", "n1")["metadata"]["annotations"][NODE_LOCK].endswith(",team,p1")


def test_a_follower_replica_refuses_to_schedule(apiserver, start_service):
    from starlette.testclient import TestClient

    from webhooks.leader import LeaseFollower

    svc = start_service()
    svc.server.extender.leader = LeaseFollower(svc.kube, "dynmig", "dynmig-scheduler", "other")
    with TestClient(svc.extender_app) as http:
        out = http.post("/filter", json=filter_args(gpu_pod("p"), ["n1"])).json()
        assert out["Error"].startswith("not the leader")
        assert http.post("/bind", json={"PodName": "p", "PodNamespace": "team", "Node": "n1"}).json()["Error"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"nope", "not JSON"),
        (b"[]", "must be a JSON object"),
        (b'{"Pod": 3}', "Pod: must be an object"),
        (b'{"Pod": {"metadata": {"uid": ["x"]}}}', "Pod.metadata.uid: must be a string"),
    ],
)
def test_a_body_that_is_not_extender_args_gets_http_400_naming_the_field(extender, body, message):
    reply = extender.post("/filter", content=body, headers={"content-type": "application/json"})
    assert reply.status_code == 400 and message in reply.text


def test_binding_args_without_a_pod_name_are_an_error_in_the_reply(extender):
    reply = extender.post("/bind", content=b"{}", headers={"content-type": "application/json"})
    assert reply.status_code == 200 and "PodName" in reply.json()["Error"]


def test_placements_never_overlap_and_match_the_pod_records(apiserver, service, extender):
    seed(apiserver, service, node("n1", gpus=2))
    for i in range(10):
        pod = apiserver.create(gpu_pod(f"p{i}", memory=9000))
        assert eventually(lambda n=f"p{i}": service.cache.pod("team", n))
        assert post_filter(extender, service, pod, ["n1"])["NodeNames"] == ["n1"]
        assert post_bind(extender, pod, "n1") == {"Error": ""}
        release_lock(apiserver, service, "n1")
    by_gpu: dict[str, list[Placement]] = {}
    for i in range(10):
        ann = stored_pod(apiserver, f"p{i}")["metadata"].get("annotations") or {}
        for a in decode_allocations(ann.get(MIG_ALLOCATIONS)):
            by_gpu.setdefault(a.gpuUUID, []).append(a.placement_value)
    assert sum(map(len, by_gpu.values())) == 10  # 2 A100s × 7 one-slice placements hold 10 pods
    for placements in by_gpu.values():
        assert all(not a.overlaps(b) for i, a in enumerate(placements) for b in placements[i + 1 :])


def _profile_of(apiserver, name: str) -> str:
    (alloc,) = decode_allocations(stored_pod(apiserver, name)["metadata"]["annotations"][MIG_ALLOCATIONS])
    return alloc.profile


def test_a_pod_asking_8k_gets_the_same_profile_as_one_asking_8000(apiserver, service, extender):
    p8k = gpu_pod("p8k", memory=None)
    p8k["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] = "8k"
    _, _, p8000, p8k = seed(apiserver, service, node("n1"), node("n2"), gpu_pod("p8000", memory=8000), p8k)
    for pod, where in ((p8000, "n1"), (p8k, "n2")):
        assert schedule(extender, service, pod, [where]) == where
    assert _profile_of(apiserver, "p8k") == _profile_of(apiserver, "p8000") == "1g.10gb"


def test_gpumem_percentage_25_on_an_a100_40gb_node_gets_a_3g_20gb(apiserver, service, extender):
    pod = gpu_pod("quarter", memory=None)
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem-percentage"] = "25"
    _, pod = seed(apiserver, service, node("n40", "A100-SXM4-40GB"), pod)
    assert schedule(extender, service, pod, ["n40"]) == "n40"
    assert _profile_of(apiserver, "quarter") == "3g.20gb"


def test_a_pod_with_a_bad_quantity_gets_an_error_naming_container_and_resource(apiserver, service, extender):
    _, pod = seed(apiserver, service, node("n1"), gpu_pod("bad", memory=None))
    # kube-apiserver refuses to store "8K", so only the scheduler's ExtenderArgs can carry it.
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] = "8K"
    out = extender.post("/filter", json=filter_args(pod, ["n1"])).json()
    assert out["Error"].startswith("container main: nvidia.com/gpumem: '8K' has an unknown suffix 'K'")
