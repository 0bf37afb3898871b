"""A pod goes onto an idle instance its node's plugin keeps (published in
`dynmig.io/node-idle-instances`) of the profile the engine planned, on the planned node, so its
Allocate creates nothing, and only where the plugin would hand it over: the same namespace as the
last pod that held it (or unknown: a warm-pool instance), at a placement nothing holds."""

from __future__ import annotations

from webhooks_testkit import gpu_pod, node

from mig.allowlist import ResourceNames
from mig.annotations import MIG_ALLOCATIONS, VGPU_NODE, encode_allocations
from mig.idle import IDLE, IdleInstance, encode_idle
from mig.placement import PodRequest
from mig.pods import gpu_request
from mig.types import Placement
from webhooks.fleet import Asking, Fleet
from webhooks.refusal import Refused

ONE_G = 4000  # a 1g.5gb on an A100-40GB


def request(memory: int = ONE_G) -> PodRequest:
    asked = gpu_request(gpu_pod("p", memory), ResourceNames())
    assert asked is not None
    return asked


def a100_node(idle: list[tuple[int, str, int, int]] = ()) -> tuple[dict, list[str]]:
    """The node with 2 GPUs, its plugin keeping `idle` (GPU index, profile, start, size) idle."""
    n = node("n1", "A100-SXM4-40GB", gpus=2)
    f = Fleet(hold_chosen=False)  # decided one after the other without binds
    f.set_node(n)
    uuids = [g.uuid for g in sorted(f.occupancy("n1").gpus, key=lambda g: g.index)]
    if idle:
        kept = [IdleInstance.of(uuids[i], p, Placement(s, z), 1767225600) for i, p, s, z in idle]
        n["metadata"]["annotations"][IDLE] = encode_idle(kept)
    return n, uuids


def fleet_with(n: dict) -> Fleet:
    f = Fleet(hold_chosen=False)  # decided one after the other without binds
    f.set_node(n)
    return f


def place(f: Fleet, uid: str, namespace: str = "team", memory: int = ONE_G):
    outcome = f.decide(request(memory), None, Asking(uid, namespace, uid))
    assert not isinstance(outcome, Refused), uid
    return outcome.plan.devices[0]


def ended(f: Fleet, uid: str, namespace: str = "team") -> None:
    """The pod ran with its reservation (as its record shows it), then succeeded."""
    reservation = f.reservation(uid)
    usage = reservation.usage if reservation else None
    assert usage is not None
    allocations = [
        a.model_copy(update={"gpuInstanceID": 1, "computeInstanceID": 0, "migUUID": "MIG-x"})
        for a in usage.allocations
    ]
    meta = {
        "uid": uid,
        "name": uid,
        "namespace": namespace,
        "annotations": {VGPU_NODE: usage.node, MIG_ALLOCATIONS: encode_allocations(allocations) or ""},
    }
    pod = {"metadata": meta, "spec": {"nodeName": usage.node}, "status": {"phase": "Running"}}
    f.set_pod(pod)
    f.set_pod({**pod, "status": {"phase": "Succeeded"}})


def test_a_pod_goes_onto_a_published_idle_instance_of_its_profile():
    n, uuids = a100_node([(1, "1g.5gb", 3, 1)])
    f = fleet_with(n)
    device = place(f, "p")
    assert (device.gpu_uuid, device.placement) == (uuids[1], Placement(3, 1))


def test_a_churning_services_next_pod_takes_its_predecessors_idle_instance():
    n, _ = a100_node()
    f = fleet_with(n)
    for i in range(3):
        place(f, f"keep{i}")  # the rest of the service keeps running
    first = place(f, "old")
    ended(f, "old")
    n["metadata"]["annotations"][IDLE] = encode_idle(
        [IdleInstance.of(first.gpu_uuid, first.profile, first.placement, 1767225600)]
    )
    f.set_node(n)
    again = place(f, "new")
    assert (again.gpu_uuid, again.placement) == (first.gpu_uuid, first.placement)


def test_an_idle_instance_whose_last_holder_is_unknown_here_goes_to_any_namespace():
    n, _ = a100_node([(0, "1g.5gb", 6, 1)])  # e.g. a warm-pool instance
    assert place(fleet_with(n), "b1", namespace="b").placement == Placement(6, 1)


def test_an_idle_instance_last_held_by_another_namespace_is_not_taken():
    n, _ = a100_node()
    f = fleet_with(n)
    old = place(f, "old", namespace="a")
    engine = place(f, "probe", namespace="b")  # where the engine puts the next pod on its own
    f.release("probe")
    held = {p for _, p in f.placements()[old.gpu_uuid]}
    spot = next(Placement(s, 1) for s in range(7) if Placement(s, 1) not in held | {engine.placement})
    f._last_user[(old.gpu_uuid, old.profile, spot.start, spot.size)] = "a"  # as "a"'s ended pod left it
    n["metadata"]["annotations"][IDLE] = encode_idle([IdleInstance.of(old.gpu_uuid, old.profile, spot, 1)])
    f.set_node(n)
    again = place(f, "b2", namespace="b")
    assert (again.gpu_uuid, again.placement) == (engine.gpu_uuid, engine.placement)
    f.release("b2")
    assert place(f, "a2", namespace="a").placement == spot  # its own namespace: steered


def test_an_idle_instance_of_another_profile_is_not_taken():
    n, uuids = a100_node([(1, "2g.10gb", 4, 2)])
    device = place(fleet_with(n), "small")
    assert (device.gpu_uuid, device.profile) != (uuids[1], "2g.10gb")


def test_an_idle_placement_a_reservation_holds_is_not_taken_twice():
    n, uuids = a100_node([(1, "1g.5gb", 3, 1)])
    f = fleet_with(n)
    assert place(f, "first").placement == Placement(3, 1)
    second = place(f, "second")
    assert (second.gpu_uuid, second.placement) != (uuids[1], Placement(3, 1))


def test_a_burst_never_spreads_a_pod_off_the_idle_instance_it_was_planned_on():
    n, uuids = a100_node([(0, "1g.5gb", 5, 1)])
    f = fleet_with(n)
    spread = lambda node: True  # noqa: E731 - a lock-free node
    first = f.decide(request(), None, Asking("a", "team", "a"), lock_free=spread)
    assert not isinstance(first, Refused)
    second = f.decide(request(), None, Asking("b", "team", "b"), lock_free=spread)
    assert not isinstance(second, Refused)
    taken = {(d.gpu_uuid, d.placement) for placed in (first, second) for d in placed.plan.devices}
    assert (uuids[0], Placement(5, 1)) in taken


def test_a_pod_the_idle_instance_is_not_for_is_planned_around_it():
    n, uuids = a100_node([(0, "2g.10gb", 4, 2), (0, "1g.5gb", 6, 1)])  # the engine's 1g choice is 6
    f = fleet_with(n)
    f._last_user[(uuids[0], "1g.5gb", 6, 1)] = "a"  # left by a pod of namespace "a"
    device = place(f, "b1", namespace="b")
    assert device.gpu_uuid == uuids[0]  # the same GPU: only the placement moved
    assert not device.placement.overlaps(Placement(6, 1)) and not device.placement.overlaps(Placement(4, 2))
