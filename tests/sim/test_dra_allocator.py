"""sim/dra: kube-scheduler's structured allocator, as upstream's allocator source behaves.

The slices here are written by hand (a toy driver with a 4-slice counter set), so the simulation is
tested without any fact from dynmig.
"""

from __future__ import annotations

import ast
import random
from pathlib import Path

import pytest
from sim.dra.allocator import AllocationError, Allocator, parse_slice
from sim.dra.scheduler import Scheduler, SliceStore

DRIVER = "toy.example.com"
CLASS = {
    "toy": {
        "metadata": {"name": "toy"},
        "spec": {"selectors": [{"cel": {"expression": f'device.attributes["{DRIVER}"].kind == "part"'}}]},
    }
}


def part(name: str, size: str, start: int, width: int, kind: str = "part") -> dict:
    return {
        "name": name,
        "attributes": {"kind": {"string": kind}, "size": {"string": size}},
        "consumesCounters": [
            {
                "counterSet": "set-0",
                "counters": {f"s{i}": {"value": "1"} for i in range(start, start + width)},
            }
        ],
    }


def pool(node: str, devices: list[list[dict]], generation: int = 1, count: int | None = None) -> list[dict]:
    slices = [
        {"sharedCounters": [{"name": "set-0", "counters": {f"s{i}": {"value": "1"} for i in range(4)}}]}
    ]
    slices += [{"devices": d} for d in devices]
    n = count if count is not None else len(slices)
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{generation}-{i}"},
            "spec": {
                "driver": DRIVER,
                "nodeName": node,
                "pool": {"name": node, "generation": generation, "resourceSliceCount": n},
                **s,
            },
        }
        for i, s in enumerate(slices)
    ]


def claim(size: str, count: int = 1) -> dict:
    expr = f'device.attributes["{DRIVER}"].size == "{size}"'
    return {
        "metadata": {"name": "c"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "r",
                        "exactly": {
                            "deviceClassName": "toy",
                            "count": count,
                            "selectors": [{"cel": {"expression": expr}}],
                        },
                    }
                ]
            }
        },
    }


def allocate(slices: list[dict], c: dict, node: str = "n1", allocated=()) -> list[str] | None:
    got = Allocator([parse_slice(s) for s in slices], CLASS, allocated).allocate(node, [c])
    return None if got is None else [r["device"] for r in got[0]["devices"]["results"]]


HALVES = [part("big-0", "big", 0, 2), part("big-2", "big", 2, 2)]
QUARTERS = [part(f"small-{i}", "small", i, 1) for i in range(4)]


def test_first_fit_takes_the_first_matching_device_in_slice_order():
    assert allocate(pool("n1", [[*QUARTERS]]), claim("small")) == ["small-0"]
    assert allocate(pool("n1", [list(reversed(QUARTERS))]), claim("small")) == ["small-3"]


def test_an_allocated_devices_counters_block_the_devices_overlapping_it():
    slices = pool("n1", [[*HALVES, *QUARTERS]])
    held = {(DRIVER, "n1", "small-1")}
    assert allocate(slices, claim("big"), allocated=held) == ["big-2"]
    assert allocate(slices, claim("small"), allocated=held) == ["small-0"]


def test_an_allocated_device_missing_from_the_slices_frees_its_counters():
    # upstream only subtracts counters for allocated devices it finds listed in the pool
    held = {(DRIVER, "n1", "small-1")}
    assert allocate(pool("n1", [[*HALVES]]), claim("big"), allocated=held) == ["big-0"]


def test_a_request_for_two_devices_backtracks_past_a_first_choice_that_leaves_no_second():
    # small-x spans slices 1-2 and is listed first: taking it leaves no second disjoint pair
    devices = [part("small-x", "pair", 1, 2), part("pair-0", "pair", 0, 1), part("pair-3", "pair", 3, 1)]
    assert allocate(pool("n1", [devices]), claim("pair", 2)) == ["small-x", "pair-0"]
    devices = [part("wide", "pair", 0, 3), part("p-0", "pair", 0, 1), part("p-3", "pair", 3, 1)]
    assert allocate(pool("n1", [devices]), claim("pair", 2)) == ["wide", "p-3"]
    devices = [part("wide", "pair", 0, 4), part("p-0", "pair", 0, 1), part("p-3", "pair", 3, 1)]
    assert allocate(pool("n1", [devices]), claim("pair", 2)) == ["p-0", "p-3"]


def test_a_pool_with_fewer_slices_than_its_count_is_not_allocated_from():
    assert allocate(pool("n1", [QUARTERS], count=3), claim("small")) is None


def test_the_newest_generation_replaces_the_older_slices():
    old = pool("n1", [QUARTERS], generation=1)
    new = pool("n1", [[part("small-9", "small", 3, 1)]], generation=2)
    assert allocate(old + new, claim("small")) == ["small-9"]
    assert allocate(new + old, claim("small")) == ["small-9"]


def test_duplicate_device_names_make_the_pool_invalid_and_the_failure_an_error():
    slices = pool("n1", [[QUARTERS[0]], [QUARTERS[0]]])
    with pytest.raises(AllocationError, match="invalid resource pools"):
        allocate(slices, claim("small"))


def test_a_device_consuming_an_unknown_counter_makes_the_pool_invalid():
    bad = part("odd", "small", 0, 1)
    bad["consumesCounters"][0]["counters"] = {"nope": {"value": "1"}}
    with pytest.raises(AllocationError):
        allocate(pool("n1", [[bad]]), claim("small"))


def test_slices_of_other_nodes_are_not_used():
    assert allocate(pool("n2", [QUARTERS]), claim("small"), node="n1") is None


def test_a_cel_runtime_error_is_fatal_but_the_class_selector_is_checked_first():
    no_size = {"name": "x", "attributes": {"kind": {"string": "part"}}}
    with pytest.raises(AllocationError, match="CEL runtime error"):
        allocate(pool("n1", [[no_size]]), claim("small"))
    other_kind = {"name": "x", "attributes": {"kind": {"string": "gpu"}}}
    assert allocate(pool("n1", [[other_kind, QUARTERS[0]]]), claim("small")) == ["small-0"]


def test_an_allocated_device_is_never_given_again_even_if_its_counters_look_free():
    held = {(DRIVER, "n1", "small-0")}
    free_counters = {
        "name": "small-0",
        "attributes": {"kind": {"string": "part"}, "size": {"string": "small"}},
    }
    assert allocate(pool("n1", [[free_counters, QUARTERS[1]]]), claim("small"), allocated=held) == ["small-1"]


def test_the_scheduler_picks_among_feasible_nodes_at_random_and_never_an_infeasible_one():
    store = SliceStore()
    store.replace_pool("n1", DRIVER, pool("n1", [QUARTERS]))
    store.replace_pool("n2", DRIVER, pool("n2", [QUARTERS]))
    store.replace_pool("n3", DRIVER, pool("n3", [[part("big-0", "big", 0, 2)]]))
    chosen = set()
    for seed in range(40):
        got = Scheduler(random.Random(seed)).schedule(
            [claim("small")], ["n1", "n2", "n3"], store, CLASS, set()
        )
        assert got is not None
        chosen.add(got[0])
    assert chosen == {"n1", "n2"}


def test_a_burst_is_scheduled_one_pod_per_cycle_each_counting_the_devices_allocated_before_it():
    store = SliceStore()
    store.replace_pool("n1", DRIVER, pool("n1", [[part("half-0", "half", 0, 2), *QUARTERS]]))
    pods = [[claim("small")], [claim("half")], [claim("small")], [claim("small")], [claim("small")]]
    got = Scheduler(random.Random(1)).burst(pods, ["n1"], store, CLASS, set())
    devices = [g[1][0]["devices"]["results"][0]["device"] if g else None for g in got]
    assert devices == ["small-0", None, "small-1", "small-2", "small-3"]  # the half overlaps small-0
    assert len(store.list()) == 2  # nothing was republished


def test_republishing_a_pool_replaces_all_its_slices_in_the_store():
    store = SliceStore()
    store.replace_pool("n1", DRIVER, pool("n1", [QUARTERS], generation=1))
    store.replace_pool("n1", DRIVER, pool("n1", [[QUARTERS[3]]], generation=2))
    assert sorted(s.generation for s in store.list()) == [2, 2]


def test_the_simulated_allocator_takes_no_facts_from_dynmig():
    for path in (Path(__file__).parents[2] / "testbed" / "sim" / "dra").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            assert not any(n == "mig" or n.startswith("mig.") for n in names), f"{path.name} imports {names}"
