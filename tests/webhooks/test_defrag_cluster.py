"""Defrag advice and opt-in eviction end to end: dynmig serve with the simulated kube-scheduler and
API server (pods/eviction and PodDisruptionBudgets as kube-apiserver does them)."""

from __future__ import annotations

import copy
import json

import pytest
from kubernetes import client
from waiting_testkit import eventually
from webhooks_testkit import PluginStandIn, node

from mig.annotations import DEFRAG_ADVICE, EVICTABLE, MIG_ALLOCATIONS, USE_GPU_UUID, decode_allocations


@pytest.fixture
def plugin(apiserver):
    stand_in = PluginStandIn(apiserver).start()
    yield stand_in
    stand_in.stop()


def admin(apiserver) -> client.CoreV1Api:
    return client.CoreV1Api(apiserver.api_client("admin"))


def gpu_pod(
    name: str, memory: int, priority: int = 0, evictable: bool = False, app: str = "", owned: bool = False
) -> dict:
    """A MIG pod; `owned`: a ReplicaSet controls it (so an eviction is followed by a replacement)."""
    annotations = {EVICTABLE: "true"} if evictable else {}
    owners = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{name}-rs", "uid": f"rs-{name}"}]
    owners[0]["controller"] = True
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "annotations": annotations,
            "labels": {"app": app or name},
            **({"ownerReferences": owners} if owned else {}),
        },
        "spec": {
            "priority": priority,  # what the Priority admission plugin sets from a PriorityClass
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpumem": str(memory)}}}
            ],
        },
    }


def read(apiserver, name: str) -> dict:
    return copy.deepcopy(apiserver.get("pods", name, "team") or {})


def running(apiserver, name: str) -> None:
    """What the kubelet reports once the containers run (the stand-in plugin only finishes Allocate)."""
    assert eventually(lambda: read(apiserver, name).get("spec", {}).get("nodeName"))
    admin(apiserver).patch_namespaced_pod_status(
        name, "team", {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    )


def guard(apiserver, app: str) -> None:
    """A budget that lets no pod of `app` go (minAvailable 1 over its one pod)."""
    client.PolicyV1Api(apiserver.api_client("admin")).create_namespaced_pod_disruption_budget(
        "team",
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": f"{app}-budget"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}},
        },
    )
    apiserver.sync_budgets()


def events(apiserver, reason: str) -> list[dict]:
    items = json.loads(admin(apiserver).list_namespaced_event("team", _preload_content=False).data)["items"]
    return [e for e in items if e["reason"] == reason]


def refused(apiserver, name: str) -> bool:
    """The extender has refused this pod (events of other pods' refusals do not count)."""
    return any(e["involvedObject"]["name"] == name for e in events(apiserver, "FilteringFailed"))


def fill_one_a100(apiserver, loose: int = 20000, owned: bool = False) -> None:
    """An A100-40GB held by a 3g.20gb pod of app 'guarded' under a budget and a 'loose' pod (a 3g.20gb
    unless told), both opted in."""
    apiserver.create(node("n1", "A100-SXM4-40GB", gpus=1))
    api = admin(apiserver)
    api.create_namespaced_pod("team", gpu_pod("guarded", 20000, evictable=True))
    running(apiserver, "guarded")
    api.create_namespaced_pod("team", gpu_pod("loose", loose, evictable=True, owned=owned))
    running(apiserver, "loose")
    guard(apiserver, "guarded")


def test_with_eviction_on_the_controller_moves_the_pod_no_budget_protects_and_the_pending_pod_lands(
    apiserver, cluster, plugin
):
    # n1 (A100): 'guarded' 3g under a budget and 'loose', a ReplicaSet's 1g; n2 (A30) has a 1g of
    # another team's, so the 3g 'urgent' fits nowhere, and loose's replacement fits beside it on n2.
    fill_one_a100(apiserver, loose=4000, owned=True)
    apiserver.create(node("n2", "A30", gpus=1))
    anchor = gpu_pod("anchor", 4000)
    anchor["metadata"]["annotations"]["nvidia.com/use-gputype"] = "A30"
    admin(apiserver).create_namespaced_pod("team", anchor)
    running(apiserver, "anchor")
    assert read(apiserver, "anchor")["spec"]["nodeName"] == "n2"
    defrag = cluster.service.defrag
    defrag.evict = True
    assert defrag.move_only  # the default
    admin(apiserver).create_namespaced_pod("team", gpu_pod("urgent", 20000, priority=100))
    assert eventually(lambda: refused(apiserver, "urgent")), "the pod was never refused"
    done = defrag.pass_once()
    assert done == ["team/urgent: evicted team/loose"]
    assert read(apiserver, "loose")["metadata"].get("deletionTimestamp")
    assert read(apiserver, "guarded")["metadata"].get("deletionTimestamp") is None
    assert eventually(lambda: events(apiserver, "DefragEvicted")), "no event on the evicted pod"
    (evicted,) = events(apiserver, "DefragEvicted")
    assert evicted["involvedObject"]["name"] == "loose" and "to place team/urgent" in evicted["message"]
    assert "its replacement is expected on n2 (1g.6gb" in evicted["message"]
    advice = read(apiserver, "urgent")["metadata"]["annotations"][DEFRAG_ADVICE]
    assert "evicting 1 pod(s) on n1 (team/loose)" in advice and "; moves team/loose to n2 (1g.6gb" in advice
    assert defrag.pass_once() == []  # the victim is still terminating: nothing more is evicted
    assert eventually(lambda: read(apiserver, "urgent")["spec"].get("nodeName") == "n1", timeout=30)
    (alloc,) = decode_allocations(read(apiserver, "urgent")["metadata"]["annotations"][MIG_ALLOCATIONS])
    assert alloc.profile == "3g.20gb"
    # The controller acts on serve's cache, which sees the bind a moment after the API does: within a
    # few passes the advice is gone from the placed pod.
    assert eventually(
        lambda: (
            defrag.pass_once() is not None
            and DEFRAG_ADVICE not in read(apiserver, "urgent")["metadata"]["annotations"]
        )
    ), "the placed pod kept its defrag advice"


def test_when_budgets_block_every_set_nothing_is_evicted_and_the_pod_is_told(apiserver, cluster, plugin):
    fill_one_a100(apiserver)
    guard(apiserver, "loose")
    defrag = cluster.service.defrag
    defrag.evict = True
    admin(apiserver).create_namespaced_pod("team", gpu_pod("urgent", 20000, priority=100))
    assert eventually(lambda: refused(apiserver, "urgent"))
    done = defrag.pass_once()
    assert len(done) == 1 and "no evictable set" in done[0] and "PodDisruptionBudget" in done[0]
    assert not events(apiserver, "DefragEvicted")
    assert all(read(apiserver, n)["metadata"].get("deletionTimestamp") is None for n in ("loose", "guarded"))
    assert eventually(lambda: events(apiserver, "DefragNoSet")), "the pending pod was not told"
    (told,) = events(apiserver, "DefragNoSet")
    assert told["involvedObject"]["name"] == "urgent"
    assert "team/guarded-budget" in told["message"] and "team/loose-budget" in told["message"]


def full_n2_then_one_a100(apiserver) -> None:
    """n2 full with a pod that did not opt in, made first: it is never younger than 'loose', so the
    cheapest set (the youngest pod, ties by node) is 'loose' whether or not a second passes between;
    then n1 as `fill_one_a100` leaves it."""
    apiserver.create(node("n2", "A100-SXM4-40GB", gpus=1))
    admin(apiserver).create_namespaced_pod("team", gpu_pod("whole", 40000))
    running(apiserver, "whole")
    fill_one_a100(apiserver)


def test_without_eviction_the_advice_is_on_the_pod_and_in_the_next_refusal_and_nothing_is_evicted(
    apiserver, cluster, plugin
):
    full_n2_then_one_a100(apiserver)
    defrag = cluster.service.defrag
    admin(apiserver).create_namespaced_pod("team", gpu_pod("urgent", 20000, priority=100))
    assert eventually(lambda: refused(apiserver, "urgent"))
    assert defrag.pass_once() == []
    advice = read(apiserver, "urgent")["metadata"]["annotations"][DEFRAG_ADVICE]
    assert advice.startswith("defrag: removing 1 pod(s) on n1 (team/loose)")
    assert eventually(
        lambda: any(
            "defrag: removing 1 pod(s)" in e["message"] for e in events(apiserver, "FilteringFailed")
        ),
        timeout=30,
    ), "the scheduler's next refusal does not carry the advice"
    assert eventually(
        lambda: any(
            "defrag: removing 1 pod(s)" in e["message"] for e in events(apiserver, "FailedScheduling")
        ),
        timeout=30,
    ), "kube-scheduler's FailedScheduling does not carry the advice for the node it names"
    # both refused nodes carry one text, so kube-scheduler reports one group, the advice before
    # the per-GPU detail (which its 1 KiB cut may shorten)
    (told,) = [
        e["message"] for e in events(apiserver, "FailedScheduling") if "defrag: removing" in e["message"]
    ][-1:]
    assert told.startswith("0/2 nodes are available: 2 node(s) cannot place the pod's MIG devices: "), told
    assert told.index("defrag: removing 1 pod(s) on n1 (team/loose)") < told.index(" Per GPU: "), told
    assert not events(apiserver, "DefragEvicted")
    assert read(apiserver, "loose")["metadata"].get("deletionTimestamp") is None


def test_a_pod_the_scheduler_has_not_tried_gets_no_advice_and_one_it_marked_unschedulable_does(
    apiserver, cluster, plugin
):
    # A restarted server never refused the pod itself: kube-scheduler's PodScheduled condition tells it.
    full_n2_then_one_a100(apiserver)
    cluster.scheduler.stop()  # the new pod waits untried, as in a burst the scheduler has not reached
    defrag = cluster.service.defrag
    admin(apiserver).create_namespaced_pod("team", gpu_pod("urgent", 20000, priority=100))
    assert eventually(lambda: cluster.service.cache.pod("team", "urgent") is not None)
    assert defrag.pass_once() == []
    assert DEFRAG_ADVICE not in read(apiserver, "urgent")["metadata"]["annotations"]
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/2 nodes"}
    admin(apiserver).patch_namespaced_pod_status("urgent", "team", {"status": {"conditions": [condition]}})
    assert eventually(
        lambda: (cluster.service.cache.pod("team", "urgent") or {}).get("status", {}).get("conditions")
    )
    assert defrag.pass_once() == []  # advice only: eviction is off
    advice = read(apiserver, "urgent")["metadata"]["annotations"][DEFRAG_ADVICE]
    assert advice.startswith("defrag: removing 1 pod(s) on n1 (team/loose)")


def test_pods_that_did_not_opt_in_or_matter_as_much_are_never_evicted(apiserver, cluster, plugin):
    apiserver.create(node("n1", "A100-SXM4-40GB", gpus=1))
    api = admin(apiserver)
    api.create_namespaced_pod("team", gpu_pod("unasked", 20000))
    running(apiserver, "unasked")
    api.create_namespaced_pod("team", gpu_pod("peer", 20000, priority=100, evictable=True))
    running(apiserver, "peer")
    defrag = cluster.service.defrag
    defrag.evict = True
    api.create_namespaced_pod("team", gpu_pod("urgent", 20000, priority=100))
    assert eventually(lambda: refused(apiserver, "urgent"))
    done = defrag.pass_once()
    assert len(done) == 1 and "no evictable set" in done[0]
    assert not events(apiserver, "DefragEvicted")


def test_with_move_only_a_pod_with_no_other_home_is_not_evicted_and_the_pending_pod_is_told_why(
    apiserver, cluster, plugin
):
    fill_one_a100(apiserver, owned=True)  # one A100: an evicted 3g has nowhere else to go
    defrag = cluster.service.defrag
    defrag.evict = True
    admin(apiserver).create_namespaced_pod("team", gpu_pod("urgent", 20000, priority=100))
    assert eventually(lambda: refused(apiserver, "urgent"))
    (done,) = defrag.pass_once()
    assert "no evictable set" in done and "team/guarded-budget" in done and "no other home" in done
    assert not events(apiserver, "DefragEvicted")
    assert read(apiserver, "loose")["metadata"].get("deletionTimestamp") is None
    advice = read(apiserver, "urgent")["metadata"]["annotations"][DEFRAG_ADVICE]
    assert advice.endswith("; evicts team/loose (no other home)"), advice


def test_with_move_only_off_the_controller_evicts_a_pod_nothing_recreates_and_says_so(
    apiserver, cluster, plugin
):
    fill_one_a100(apiserver)  # bare pods: no controller recreates them
    defrag = cluster.service.defrag
    defrag.evict, defrag.move_only = True, False
    admin(apiserver).create_namespaced_pod("team", gpu_pod("urgent", 20000, priority=100))
    assert eventually(lambda: refused(apiserver, "urgent"))
    assert defrag.pass_once() == ["team/urgent: evicted team/loose"]
    assert eventually(lambda: events(apiserver, "DefragEvicted")), "no event on the evicted pod"
    (evicted,) = events(apiserver, "DefragEvicted")
    assert "nothing recreates it" in evicted["message"]
    assert eventually(lambda: read(apiserver, "urgent")["spec"].get("nodeName") == "n1", timeout=30)


def test_with_move_only_the_controller_evicts_a_chain_in_an_order_that_works_and_the_pod_lands(
    apiserver, cluster, plugin
):
    # n1 holds two movable 3g jobs, the whole-GPU pod's only room. Elsewhere one free 3g room (n3)
    # and a 1g service (n2) in the way of another; a free 1g room on n4. Freeing n1 alone strands a
    # job; moving the service too gives it n2's room, and the service n4's.
    api = admin(apiserver)
    apiserver.create(node("n1", "A100-SXM4-40GB", gpus=1))
    for name in ("job-a", "job-b"):
        api.create_namespaced_pod("team", gpu_pod(name, 20000, evictable=True, owned=True))
        running(apiserver, name)
    apiserver.create(node("n2", "A100-SXM4-40GB", gpus=1))
    keeper = gpu_pod("keeper-2", 20000)
    keeper["metadata"]["annotations"][USE_GPU_UUID] = "GPU-n2-0"
    api.create_namespaced_pod("team", keeper)
    running(apiserver, "keeper-2")
    api.create_namespaced_pod("team", gpu_pod("svc", 4000, evictable=True, owned=True))
    running(apiserver, "svc")
    apiserver.create(node("n3", "A100-SXM4-40GB", gpus=1))
    apiserver.create(node("n4", "A100-SXM4-40GB", gpus=1))
    for name, memory, gpu in (
        ("keeper-3", 20000, "n3"),
        ("keeper-4", 20000, "n4"),
        ("keeper-4b", 9000, "n4"),
    ):
        pinned = gpu_pod(name, memory)
        pinned["metadata"]["annotations"][USE_GPU_UUID] = f"GPU-{gpu}-0"
        api.create_namespaced_pod("team", pinned)
        running(apiserver, name)
    assert {read(apiserver, n)["spec"]["nodeName"] for n in ("job-a", "job-b")} == {"n1"}
    assert read(apiserver, "svc")["spec"]["nodeName"] == "n2"
    defrag = cluster.service.defrag
    defrag.evict = True
    api.create_namespaced_pod("team", gpu_pod("urgent", 40000, priority=100))
    assert eventually(lambda: refused(apiserver, "urgent")), "the pod was never refused"
    done = defrag.pass_once()
    # the jobs first: their replacements, queued first, take the rooms before the service's could
    # take its own back
    assert done == [f"team/urgent: evicted team/{n}" for n in ("job-a", "job-b", "svc")], done
    advice = read(apiserver, "urgent")["metadata"]["annotations"][DEFRAG_ADVICE]
    assert advice.startswith(
        "defrag: evicting 3 pod(s) (team/job-a, team/job-b on n1; team/svc on n2) would let it be placed on n1"
    ), advice
    assert "; moves team/job-a to n" in advice and "team/svc to n4 (1g.5gb on GPU-n4-0" in advice, advice
    assert eventually(lambda: len(events(apiserver, "DefragEvicted")) == 3), events(
        apiserver, "DefragEvicted"
    )
    expected = {e["involvedObject"]["name"]: e["message"] for e in events(apiserver, "DefragEvicted")}
    assert sorted(expected) == ["job-a", "job-b", "svc"]
    assert "its replacement is expected on n4" in expected["svc"]
    assert {m.split("expected on ")[1][:2] for n, m in expected.items() if n != "svc"} == {"n2", "n3"}
    assert eventually(lambda: read(apiserver, "urgent")["spec"].get("nodeName") == "n1", timeout=30)
    (alloc,) = decode_allocations(read(apiserver, "urgent")["metadata"]["annotations"][MIG_ALLOCATIONS])
    assert alloc.profile == "7g.40gb"


def test_a_pod_pinned_by_node_selector_to_a_full_node_gets_advice_there_though_another_node_is_free(
    apiserver, cluster, plugin
):
    # n1 (A100) holds 'guarded' and 'loose'; n2 (A100) is free, but 'pinned' may only run on n1:
    # kube-scheduler never offers n2, so the advice must be about n1, not "it fits on n2".
    fill_one_a100(apiserver)
    apiserver.create(node("n2", "A100-SXM4-40GB", gpus=1))
    admin(apiserver).patch_node("n1", {"metadata": {"labels": {"pool": "train"}}})
    pinned = gpu_pod("pinned", 20000, priority=100)
    pinned["spec"]["nodeSelector"] = {"pool": "train"}
    admin(apiserver).create_namespaced_pod("team", pinned)
    assert eventually(lambda: refused(apiserver, "pinned")), "the pod was never refused"
    assert cluster.service.defrag.pass_once() == []
    advice = read(apiserver, "pinned")["metadata"]["annotations"].get(DEFRAG_ADVICE, "")
    assert advice.startswith("defrag: removing 1 pod(s) on n1 (team/loose)"), advice


def test_a_node_whose_taint_the_pending_pod_does_not_tolerate_is_left_out_of_its_advice(
    apiserver, cluster, plugin
):
    fill_one_a100(apiserver)
    tainted = node("n2", "A100-SXM4-40GB", gpus=1)
    tainted["spec"] = {"taints": [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]}
    apiserver.create(tainted)
    admin(apiserver).create_namespaced_pod("team", gpu_pod("urgent", 20000, priority=100))
    assert eventually(lambda: refused(apiserver, "urgent")), "the pod was never refused"
    assert cluster.service.defrag.pass_once() == []
    advice = read(apiserver, "urgent")["metadata"]["annotations"].get(DEFRAG_ADVICE, "")
    assert advice.startswith("defrag: removing 1 pod(s) on n1 (team/loose)"), advice
