"""What the filter sees reaches the engine's demand estimate: each pod is one arrival however often
kube-scheduler filters it, its lifetime runs from its reservation until it is gone, and the engine's
pricing follows the mix the fleet is asked for."""

from __future__ import annotations

from webhooks_testkit import gpu_pod, node

from mig.allowlist import ResourceNames
from mig.placement import PodRequest
from mig.placement.demand import PRIOR
from mig.pods import gpu_request
from webhooks.config import parse_args
from webhooks.demand import MAX_PODS, REFRESH
from webhooks.fleet import Asking, Fleet
from webhooks.refusal import Refused


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def request(memory: int | None) -> PodRequest:
    asked = gpu_request(gpu_pod("p", memory), ResourceNames())
    assert asked is not None
    return asked


def fleet(clock: Clock, gpus: int = 8, node_pricing: bool = False) -> Fleet:
    f = Fleet(clock=clock, node_pricing=node_pricing, hold_chosen=False)  # decided without binds
    f.set_node(node("n1", gpus=gpus))
    return f


def test_a_pod_filtered_again_and_again_is_one_arrival():
    clock = Clock()
    f = fleet(clock, gpus=1)
    for _ in range(5):  # a whole-GPU job refused each time it is retried, after the first fits
        f.decide(request(None), None, Asking("job", "team", "job"))
        clock.now += 1
    f.decide(request(4000), None, Asking("svc", "team", "svc"))
    clock.now += 1
    f.decide(request(4000), None, Asking("svc2", "team", "svc2"))
    asks = dict(f.demand.estimate.mix())
    assert len(asks) == 2 and sum(asks.values()) > 0  # one whole-GPU ask and one 4000 MiB ask


def test_the_engine_is_priced_by_what_the_fleet_is_asked_for_once_enough_pods_arrived():
    clock = Clock()
    f = fleet(clock)
    assert f.index.demand == PRIOR
    for i in range(REFRESH):
        outcome = f.decide(request(None if i % 5 == 0 else 4000), None, Asking(f"p{i}", "team", f"p{i}"))
        assert not isinstance(outcome, Refused) or i % 5 == 0
        clock.now += 1
    mix = dict(f.index.demand)
    assert set(mix) == {None, 4000}, mix  # whole-GPU jobs and 4000 MiB services, as they arrived


def test_a_deleted_pod_tells_the_estimate_how_long_it_ran():
    clock = Clock()
    f = fleet(clock)
    pod = gpu_pod("svc", 4000)
    pod["metadata"]["uid"] = "svc"
    f.decide(request(4000), None, Asking("svc", "team", "svc"))
    clock.now += 300
    f.delete_pod(pod)
    lives = f.demand.estimate._lives[""]  # the lifetimes the estimate has seen per ask
    assert list(lives[4000]) == [300.0]


def test_the_feed_remembers_a_bounded_number_of_pods():
    clock = Clock()
    f = fleet(clock, gpus=1)
    for i in range(MAX_PODS + 10):
        f.demand.arrived(f"p{i}", request(4000))
    assert len(f.demand._pods) == MAX_PODS


def arrive_with_4_gpu_pods(f: Fleet, clock: Clock) -> None:
    """One pod in five asks for 4 whole GPUs on one node, the others 4000 MiB, until the pricing refreshes."""
    for i in range(REFRESH):
        asked = request(4000) if i % 5 else gpu_request(gpu_pod(f"p{i}", None, devices=4), ResourceNames())
        assert asked is not None
        f.decide(asked, None, Asking(f"p{i}", "team", f"p{i}"))
        clock.now += 1


def test_by_default_pods_asking_for_4_whole_gpus_price_no_node_slots():
    clock = Clock()
    f = fleet(clock)
    arrive_with_4_gpu_pods(f, clock)
    assert f.index.demand != PRIOR  # the mix was fed
    assert f.index.node_demand == ()  # serve's default: node slots are not priced


def test_with_node_pricing_pods_asking_for_4_whole_gpus_reach_the_engine_as_demand_for_nodes_with_4_empty_gpus():
    clock = Clock()
    f = fleet(clock, node_pricing=True)
    arrive_with_4_gpu_pods(f, clock)
    assert [n for n, _ in f.index.node_demand] == [4]


def test_serve_prices_node_slots_only_when_asked():
    assert parse_args([], {}).node_pricing is False
    assert parse_args(["--node-pricing=true"], {}).node_pricing is True
    assert parse_args([], {"DYNMIG_NODE_PRICING": "true"}).node_pricing is True
