"""A burst of claims allocated from one steered publication packs as dynmig's engine would place it.

kube-scheduler schedules a burst (a Job, a Deployment scale-up) one pod per cycle from the slices it
has, each cycle counting the devices the cycles before it allocated, with no republish in between
(sim.dra.scheduler `Scheduler.burst`). The reference is the engine placing the same claims one by one:
the same allocator with the node's pool republished after every claim, whose first candidate of a
profile is the engine's own choice (tests/mig/test_dra.py).
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from sim.dra.scheduler import Scheduler, SliceStore

from base.policyfiles import default_allowlist
from mig.catalog import find_model
from mig.dra import Gpu, Instance, steered_slices
from mig.dra.devices import by_name

DRIVER = "mig.dynmig.io"
NODE = "gpu-dra"
CLASSES = {
    "mig.dynmig.io": {"spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}
}
SMALLEST = {"A100-SXM4-40GB": "1g.5gb", "H100-SXM5-80GB": "1g.10gb"}
WHOLE = {"A100-SXM4-40GB": "7g.40gb", "H100-SXM5-80GB": "7g.80gb"}
MIXED = {
    "A100-SXM4-40GB": ("1g.5gb", "2g.10gb", "3g.20gb"),
    "H100-SXM5-80GB": ("1g.10gb", "2g.20gb", "3g.40gb"),
}


def claim(profile: str, i: int) -> dict[str, Any]:
    sel = f'device.attributes["{DRIVER}"].profile == "{profile}"'
    request = {
        "name": "mig",
        "exactly": {"deviceClassName": "mig.dynmig.io", "selectors": [{"cel": {"expression": sel}}]},
    }
    return {
        "metadata": {"namespace": "default", "name": f"c{i}"},
        "spec": {"devices": {"requests": [request]}},
    }


class Node:
    """One DRA node: its GPUs with the instances allocated so far, and its published pool."""

    def __init__(self, model: str, count: int, allowed: tuple[str, ...] = ()):
        m = find_model(model)
        allowed = allowed or default_allowlist().profiles_for(m.nvml_name)
        self.gpus = [Gpu(i, f"GPU-{model}-{i}", m, allowed) for i in range(count)]
        self.names = by_name(self.gpus)
        self.store = SliceStore()
        self.generation = 0
        self.allocated: set[tuple[str, str, str]] = set()
        self.publish()

    def publish(self) -> None:
        self.generation += 1
        self.store.replace_pool(NODE, DRIVER, steered_slices(NODE, DRIVER, self.gpus, self.generation))

    def burst(self, profiles: list[str], republish_each: bool = False) -> list[str | None]:
        """The claims allocated in a row (from one publication, or republished after each)."""
        sched, out = Scheduler(random.Random(1)), []
        pods = [[claim(p, i)] for i, p in enumerate(profiles)]
        for got in (
            sched.burst(pods, [NODE], self.store, CLASSES, self.allocated) if not republish_each else ()
        ):
            out.append(self._take(got))
        for pod in pods if republish_each else ():
            out.append(self._take(sched.schedule(pod, [NODE], self.store, CLASSES, self.allocated)))
            self.publish()
        return out

    def _take(self, got: tuple[str, list[dict[str, Any]]] | None) -> str | None:
        if got is None:
            return None
        (result,) = got[1][0]["devices"]["results"]
        gpu, dev = self.names[result["device"]]
        i = next(k for k, g in enumerate(self.gpus) if g.minor == gpu.minor)
        g = self.gpus[i]
        assert not g.mask & dev.placement.mask, f"{dev.name} overlaps a live instance"
        self.gpus[i] = Gpu(
            g.minor, g.uuid, g.model, g.allowed, (*g.instances, Instance(dev.profile, dev.placement))
        )
        self.allocated.add((DRIVER, NODE, dev.name))
        return dev.name

    def whole_gpus(self) -> int:
        return sum(1 for g in self.gpus if not g.instances)


@pytest.mark.parametrize("model", sorted(SMALLEST))
@pytest.mark.parametrize(("gpus", "n"), [(2, 5), (2, 7), (2, 14), (4, 5), (4, 7), (4, 14)])
def test_a_burst_of_identical_claims_from_one_publication_lands_where_the_engine_places_them_one_by_one(
    model, gpus, n
):
    burst, engine = Node(model, gpus), Node(model, gpus)
    got = burst.burst([SMALLEST[model]] * n)
    assert got == engine.burst([SMALLEST[model]] * n, republish_each=True)
    assert {d.split("-mig-")[0] for d in got} == {f"gpu-{i}" for i in range(-(-n // 7))}  # fullest first
    assert burst.whole_gpus() == gpus - -(-n // 7)


@pytest.mark.parametrize("model", sorted(SMALLEST))
@pytest.mark.parametrize(("gpus", "n"), [(2, 5), (2, 7), (4, 14)])
def test_a_whole_gpu_claim_after_a_burst_fits_where_a_packing_left_a_gpu_whole(model, gpus, n):
    node = Node(model, gpus)
    node.burst([SMALLEST[model]] * n)
    whole = gpus - -(-n // 7)
    assert node.burst([WHOLE[model]] * whole) == [
        f"gpu-{i}-mig-{WHOLE[model].replace('.', '')}-0-0" for i in range(gpus - whole, gpus)
    ]


@pytest.mark.parametrize("model", sorted(MIXED))
@pytest.mark.parametrize(("gpus", "n", "seed"), [(2, 5, 1), (2, 7, 2), (4, 7, 3), (4, 14, 4), (4, 14, 5)])
def test_a_mixed_burst_from_one_publication_leaves_as_many_whole_gpus_as_the_engine_one_by_one(
    model, gpus, n, seed
):
    rng = random.Random(seed)
    profiles = [rng.choice(MIXED[model]) for _ in range(n)]
    burst, engine = Node(model, gpus), Node(model, gpus)
    got = burst.burst(profiles)
    want = engine.burst(profiles, republish_each=True)
    assert got.count(None) <= want.count(None)
    assert burst.whole_gpus() >= engine.whole_gpus()


@pytest.mark.parametrize("model", sorted(SMALLEST))
def test_republishing_after_a_burst_keeps_the_next_burst_packing(model):
    node, engine = Node(model, 4), Node(model, 4)
    first = node.burst([SMALLEST[model]] * 5)
    node.publish()  # the plugin republishes after the prepares, with the five instances occupied
    second = node.burst([SMALLEST[model]] * 5)
    assert first + second == engine.burst([SMALLEST[model]] * 10, republish_each=True)
    assert node.whole_gpus() == 2


def by_memory(gib: int) -> str:
    return f'device.capacity["{DRIVER}"].memory.compareTo(quantity("{gib}Gi")) >= 0'


@pytest.mark.parametrize(
    ("model", "allowed", "gib", "profile"),
    [
        ("H100-SXM5-80GB", (), 9, "1g.10gb"),
        ("A100-SXM4-40GB", (), 9, "2g.10gb"),
        ("A100-SXM4-40GB", ("1g.10gb", "1g.5gb", "2g.10gb"), 4, "1g.5gb"),  # 1g.10gb sorts first by name
    ],
)
def test_a_claim_asking_by_memory_gets_the_smallest_allowed_profile_that_holds_it(
    model, allowed, gib, profile
):
    node = Node(model, 2, allowed)
    selector = {"cel": {"expression": by_memory(gib)}}
    request = {"name": "mig", "exactly": {"deviceClassName": "mig.dynmig.io", "selectors": [selector]}}
    claim = {"metadata": {"namespace": "default", "name": "m"}, "spec": {"devices": {"requests": [request]}}}
    (got,) = Scheduler(random.Random(1)).burst([[claim]], [NODE], node.store, CLASSES, node.allocated)
    assert got is not None
    device = got[1][0]["devices"]["results"][0]["device"]
    assert node.names[device][1].profile == profile
