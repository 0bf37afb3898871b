"""The filter's decision is one call to the fleet (`Fleet.decide`): a refused pod's answer names
each candidate node's own reason, and deciding for one pod never touches another pod's reservation."""

from __future__ import annotations

from waiting_testkit import eventually
from webhooks_testkit import gpu_pod, node

from mig.allowlist import ResourceNames
from mig.placement import PodRequest
from mig.pods import gpu_request
from webhooks.fleet import CHOSEN, Asking, Fleet, Placed
from webhooks.refusal import DOWN_TEXT, NODES_PREFIX, Refused

RESOURCE = "nvidia.com/gpu"


def request(memory: int) -> PodRequest:
    asked = gpu_request(gpu_pod("p", memory), ResourceNames())
    assert asked is not None
    return asked


def serving(name: str, gpus: int) -> dict:
    doc = node(name, "A100-SXM4-40GB")
    doc["status"]["allocatable"][RESOURCE] = str(gpus)
    return doc


def test_a_refused_pods_answer_names_each_candidate_nodes_own_reason():
    f = Fleet()
    for name in ("locked", "chosen", "small"):
        f.set_node(serving(name, 7))
    f.set_node(serving("down", 0))  # its device plugin is not serving: kubelet counts no GPU
    assert isinstance(f.decide(request(40000), ["chosen"], Asking("other", "team", "other")), Placed)

    out = f.decide(
        request(60000),  # more than any A100-40GB profile: no node could place it now
        ["locked", "chosen", "down", "small"],
        Asking("p", "team", "p"),
        {"locked": "node lock held by a bind in progress"},
        resource=RESOURCE,
    )

    assert isinstance(out, Refused) and out.event is not None
    assert out.failed["locked"] == "node lock held by a bind in progress"
    assert out.failed["chosen"] == CHOSEN
    assert out.failed["down"] == DOWN_TEXT
    assert out.failed["small"].startswith(NODES_PREFIX)  # the engine's own refusal: no profile that large
    assert f.refused("p")


def test_a_decision_never_changes_another_pods_reservation():
    f = Fleet(hold_chosen=False)
    f.set_node(node("n1", "A100-SXM4-40GB", gpus=2))
    first = f.decide(request(20000), None, Asking("a", "team", "a"))
    assert isinstance(first, Placed)
    before = f.placements()

    placed = f.decide(request(20000), None, Asking("b", "team", "b"))
    again = f.decide(request(4000), None, Asking("b", "team", "b"))  # b filtered again
    refused = f.decide(request(80000), None, Asking("c", "team", "c"))

    assert isinstance(placed, Placed) and isinstance(again, Placed) and isinstance(refused, Refused)
    assert f.reservation("a") is first.reservation
    ours = {u: [(uid, p) for uid, p in held if uid == "a"] for u, held in f.placements().items()}
    assert ours == {u: [(uid, p) for uid, p in held if uid == "a"] for u, held in before.items()}


def test_the_filters_answer_for_a_refused_pod_names_each_nodes_reason_on_the_wire(
    apiserver, service, extender
):
    for name, gpus in (("chosen", 7), ("down", 0), ("small", 7)):
        apiserver.create(serving(name, gpus))
    names = ["chosen", "down", "small"]
    assert eventually(lambda: all(service.fleet.occupancy(n) is not None for n in names))
    assert eventually(lambda: service.fleet.not_serving("down", RESOURCE))
    first, big = (
        apiserver.create(gpu_pod("first", memory=4000)),
        apiserver.create(gpu_pod("big", memory=60000)),
    )
    assert eventually(lambda: service.cache.pod("team", "big") is not None)
    assert eventually(lambda: service.cache.pod("team", "first") is not None)
    placed = extender.post("/filter", json={"Pod": first, "Nodes": None, "NodeNames": ["chosen"]}).json()
    assert placed["NodeNames"] == ["chosen"]  # its bind is still to come: the node is chosen for it

    refused = extender.post("/filter", json={"Pod": big, "Nodes": None, "NodeNames": names}).json()

    assert refused["NodeNames"] == [] and set(refused["FailedNodes"]) == set(names)
    assert refused["FailedNodes"]["chosen"] == CHOSEN
    assert refused["FailedNodes"]["down"] == DOWN_TEXT
    assert refused["FailedNodes"]["small"].startswith(NODES_PREFIX)
