"""A burst onto a node whose pods are bound without HAMi's lock spreads over the node's GPUs while
their creates are in flight (each GPU creates in series, GPUs in parallel), and still packs: the same
node, the same profile, and the GPUs it touched fill before any other."""

from __future__ import annotations

from collections import Counter

from webhooks_testkit import gpu_pod, node

from mig.allowlist import ResourceNames
from mig.annotations import MIG_ALLOCATIONS, VGPU_NODE, encode_allocations
from mig.placement import PodRequest
from mig.pods import gpu_request
from webhooks.fleet import Asking, Fleet
from webhooks.refusal import Refused

ONE_G = 4000  # a 1g.5gb on an A100-40GB


def request(memory: int = ONE_G, devices: int = 1, annotations: dict | None = None) -> PodRequest:
    asked = gpu_request(gpu_pod("p", memory, devices, annotations=annotations), ResourceNames())
    assert asked is not None
    return asked


def fleet(*names: str, gpus: int = 8) -> Fleet:
    f = Fleet(hold_chosen=False)  # decided one after the other without binds
    for name in names:
        f.set_node(node(name, "A100-SXM4-40GB", gpus=gpus))
    return f


def place(f: Fleet, uid: str, asked: PodRequest | None = None, lock_free: bool = True):
    outcome = f.decide(
        asked or request(),
        None,
        Asking(uid, "team", uid),
        lock_free=(lambda n: lock_free) if lock_free else None,
    )
    assert not isinstance(outcome, Refused), uid
    return outcome.plan


def realize(f: Fleet, uid: str) -> None:
    """The pod as the cache shows it once kubelet admitted it: its record names its instance."""
    reservation = f.reservation(uid)
    usage = reservation.usage if reservation else None
    assert usage is not None
    allocations = [
        a.model_copy(update={"gpuInstanceID": 1 + i, "computeInstanceID": 0, "migUUID": f"MIG-{uid}-{i}"})
        for i, a in enumerate(usage.allocations)
    ]
    annotations = {VGPU_NODE: usage.node, MIG_ALLOCATIONS: encode_allocations(allocations) or ""}
    meta = {"uid": uid, "name": uid, "namespace": "team", "annotations": annotations}
    f.set_pod({"metadata": meta, "spec": {"nodeName": usage.node}, "status": {"phase": "Running"}})


def _touch(f: Fleet, gpus: int, asked: PodRequest | None = None) -> set[str]:
    """`gpus` GPUs of the node each holding one realized instance (their creates are done)."""
    touched = set()
    for i in range(gpus):
        touched.add(place(f, f"t{i}", asked, lock_free=False).devices[0].gpu_uuid)
        realize(f, f"t{i}")
    return touched


def test_the_first_pods_of_a_burst_spread_over_the_gpus_already_in_use():
    f = fleet("n1")
    touched = _touch(f, 1)
    for i in range(1, 4):  # three more GPUs in use: a pod each, kept off the GPUs already in use
        elsewhere = request(annotations={"nvidia.com/nouse-gpuuuid": ",".join(touched)})
        place(f, f"u{i}", elsewhere, lock_free=False)
        realize(f, f"u{i}")
        touched = {u for u, holders in f.placements().items() if holders}
    assert len(touched) == 4
    plans = [place(f, f"p{i}") for i in range(4)]
    assert {p.devices[0].gpu_uuid for p in plans} == touched  # one create per GPU in flight
    assert {p.devices[0].profile for p in plans} == {"1g.5gb"}


def test_a_burst_never_breaks_an_untouched_gpu_to_save_a_create():
    f = fleet("n1", gpus=2)
    small = place(f, "pair-small")
    large = place(f, "pair-large", request(18000))  # a 3g.20gb while the 1g's create is in flight
    assert large.devices[0].gpu_uuid == small.devices[0].gpu_uuid  # they share one A100, as packing wants
    whole = f.decide(request(40000), None, Asking("whole", "team", "whole"))
    assert not isinstance(whole, Refused) and whole.plan.devices[0].profile == "7g.40gb"


def test_a_whole_burst_fills_the_node_exactly_as_packing_would():
    spread, packed = fleet("n1"), fleet("n1")
    for i in range(56):
        place(spread, f"p{i}")
        place(packed, f"p{i}", lock_free=False)
    used = {u: sorted(p for _, p in holders) for u, holders in spread.placements().items()}
    assert used == {u: sorted(p for _, p in holders) for u, holders in packed.placements().items()}
    assert all(len(v) == 7 for v in used.values())
    assert isinstance(spread.decide(request(), None, Asking("x", "team", "x")), Refused)


def test_a_node_that_keeps_the_lock_packs_one_gpu_first():
    f = fleet("n1")
    plans = [place(f, f"p{i}", lock_free=False) for i in range(7)]
    assert len({p.devices[0].gpu_uuid for p in plans}) == 1


def test_once_the_creates_are_done_new_pods_fill_the_gpus_the_burst_touched():
    f = fleet("n1")
    first = [place(f, f"p{i}") for i in range(3)]
    touched = {p.devices[0].gpu_uuid for p in first}
    for i in range(3):
        realize(f, f"p{i}")
    later = [place(f, f"q{i}") for i in range(3)]
    assert {p.devices[0].gpu_uuid for p in later} <= touched


def test_the_spread_never_changes_the_node_or_the_profile():
    f = fleet("n1", "n2")
    touched = _touch(f, 1, request(9000))
    place(
        f, "u1", request(9000, annotations={"nvidia.com/nouse-gpuuuid": ",".join(touched)}), lock_free=False
    )
    realize(f, "u1")
    plans = [place(f, f"p{i}", request(9000)) for i in range(2)]  # 2g.10gb: three per GPU
    assert {p.node for p in plans} == {plans[0].node}
    assert {p.devices[0].profile for p in plans} == {"2g.10gb"}
    assert max(Counter(p.devices[0].gpu_uuid for p in plans).values()) == 1


def test_a_pod_that_names_its_gpu_keeps_it():
    f = fleet("n1")
    first = place(f, "p0")
    uuid = first.devices[0].gpu_uuid
    pinned = request(annotations={"nvidia.com/use-gpuuuid": uuid})
    assert place(f, "p1", pinned).devices[0].gpu_uuid == uuid


def test_multi_device_pods_keep_the_engines_plan():
    spread, packed = fleet("n1"), fleet("n1")
    for f, lock_free in ((spread, True), (packed, False)):
        place(f, "p0", lock_free=lock_free)
    two = request(devices=2)
    assert place(spread, "p1", two) == place(packed, "p1", two, lock_free=False)
