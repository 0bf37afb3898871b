"""mig/dra/score.py: which node a DRA pod should go to, by the engine's loss, and which claims are read."""

from __future__ import annotations

import pytest

from base.policyfiles import default_allowlist
from mig.catalog import find_model
from mig.dra import Gpu, Instance, steered_slices
from mig.dra.score import MAX_SCORE, Ask, claim_asks, node_gpus, node_key, scores
from mig.types import Placement

DRIVER = "mig.dynmig.io"


def gpu(model: str, minor: int = 0, instances: tuple[Instance, ...] = ()) -> Gpu:
    m = find_model(model)
    return Gpu(minor, f"GPU-{model}-{minor}", m, default_allowlist().profiles_for(m.nvml_name), instances)


def claim(*requests: dict) -> dict:
    return {"metadata": {"name": "c", "namespace": "ns"}, "spec": {"devices": {"requests": list(requests)}}}


def exactly(expression: str, count: int = 1, **extra) -> dict:
    return {
        "name": "gpu",
        "exactly": {
            "deviceClassName": "mig.dynmig.io",
            "count": count,
            "selectors": [{"cel": {"expression": expression}}],
            **extra,
        },
    }


ONE = Ask(frozenset({"1g.5gb"}))


def test_a_small_ask_scores_the_node_with_a_partly_used_gpu_above_an_empty_node():
    half = (gpu("A100-SXM4-40GB", 0, (Instance("3g.20gb", Placement(4, 4)),)), gpu("A100-SXM4-40GB", 1))
    empty = (gpu("A100-SXM4-40GB", 0), gpu("A100-SXM4-40GB", 1))
    points = scores({"used": node_key(half, [ONE]), "empty": node_key(empty, [ONE])})
    assert points["used"] == MAX_SCORE and 0 < points["empty"] < MAX_SCORE


def test_a_node_the_claim_does_not_fit_on_scores_zero_and_every_fitting_node_at_least_one():
    full = (gpu("A100-SXM4-40GB", 0, (Instance("7g.40gb", Placement(0, 8)),)),)
    fits = {
        f"n{i}": node_key((gpu("A100-SXM4-40GB", 0, ()),), [Ask(frozenset({"1g.5gb"}), 1 + i % 7)])
        for i in range(14)
    }
    points = scores({"full": node_key(full, [ONE]), **fits})
    assert points["full"] == 0
    assert all(1 <= points[n] <= MAX_SCORE for n in fits)


def test_equal_losses_prefer_the_fuller_node():
    a100 = "A100-SXM4-40GB"
    busy = (
        gpu(a100, 0, (Instance("1g.5gb", Placement(0, 1)),)),
        gpu(a100, 1, (Instance("7g.40gb", Placement(0, 8)),)),
    )
    idle = (gpu(a100, 0, (Instance("1g.5gb", Placement(0, 1)),)), gpu(a100, 1))
    k_busy, k_idle = node_key(busy, [ONE]), node_key(idle, [ONE])
    assert k_busy is not None and k_idle is not None and k_busy[0] == k_idle[0]
    assert scores({"busy": k_busy, "idle": k_idle}) == {"busy": MAX_SCORE, "idle": MAX_SCORE - 1}


def test_a_claim_for_more_devices_than_the_node_has_free_does_not_fit():
    three_left = (gpu("A100-SXM4-40GB", 0, (Instance("3g.20gb", Placement(0, 4)),)),)  # 1g.5gb at 4, 5, 6
    assert node_key(three_left, [Ask(frozenset({"1g.5gb"}), 3)]) is not None
    assert node_key(three_left, [Ask(frozenset({"1g.5gb"}), 4)]) is None


def test_a_small_request_goes_to_the_model_it_uses_least_of():
    a100, rtx = (gpu("A100-SXM4-40GB"),), (gpu("RTX-PRO-6000"),)
    ask = [Ask(frozenset({"1g.5gb", "1g.24gb"}))]
    points = scores({"a100": node_key(a100, ask), "rtx": node_key(rtx, ask)})
    assert points["a100"] > points["rtx"]  # a seventh of an A100 before a quarter of an RTX PRO 6000


@pytest.mark.parametrize(
    ("expression", "profiles"),
    [
        (f'device.attributes["{DRIVER}"].profile == "1g.5gb"', {"1g.5gb"}),
        (f'device.attributes["{DRIVER}"].profile in ["1g.5gb", "1g.10gb"]', {"1g.5gb", "1g.10gb"}),
        (f' device.attributes[ "{DRIVER}" ].profile in [ "3g.20gb" ] ', {"3g.20gb"}),
    ],
)
def test_the_simple_profile_selectors_are_read(expression, profiles):
    assert claim_asks(claim(exactly(expression, count=2)), DRIVER) == [Ask(frozenset(profiles), 2)]


@pytest.mark.parametrize(
    "expression",
    [
        f'device.attributes["{DRIVER}"].profile != "1g.5gb"',
        f'device.attributes["{DRIVER}"].profile == "1g.5gb" || true',
        'device.attributes["other.io"].profile == "1g.5gb"',
        f'device.attributes["{DRIVER}"].memory == "1g.5gb"',
        f'device.attributes["{DRIVER}"].profile in []',
        f'device.attributes["{DRIVER}"].profile == "1g.5gb"' + " " * 5000,
        "",
    ],
)
def test_any_other_selector_is_not_guessed_at(expression):
    assert claim_asks(claim(exactly(expression)), DRIVER) is None


@pytest.mark.parametrize(
    "bad",
    [
        None,
        "claim",
        {"spec": "x"},
        {"spec": {"devices": {"requests": []}}},
        claim({"name": "g", "firstAvailable": [{"name": "a"}]}),
        claim(exactly(f'device.attributes["{DRIVER}"].profile == "1g.5gb"', allocationMode="All")),
        claim(exactly(f'device.attributes["{DRIVER}"].profile == "1g.5gb"', count=0)),
        claim(exactly(f'device.attributes["{DRIVER}"].profile == "1g.5gb"', count=True)),
        claim(exactly(f'device.attributes["{DRIVER}"].profile == "1g.5gb"', count=10**9)),
        claim({"name": "g", "exactly": {"deviceClassName": "x"}}),
        {
            "spec": {
                "devices": {
                    "requests": [exactly('device.attributes["mig.dynmig.io"].profile == "a"')],
                    "constraints": [{"matchAttribute": "x"}],
                }
            }
        },
    ],
)
def test_malformed_or_unsupported_claims_are_not_scored(bad):
    assert claim_asks(bad, DRIVER) is None


def test_the_gpus_are_read_back_from_the_published_slices_and_the_claims_holding_devices():
    g0, g1 = gpu("A100-SXM4-40GB", 0, (Instance("3g.20gb", Placement(0, 4)),)), gpu("A100-SXM4-40GB", 1)
    slices = steered_slices("node-a", DRIVER, [g0, g1], 3)
    held = next(
        d["name"]
        for s in slices
        for d in s["spec"].get("devices", [])
        if d["attributes"]["profile"]["string"] == "3g.20gb"
        and d["attributes"]["placementStart"]["int"] == 0
        and d["attributes"]["parentUUID"]["string"] == g0.uuid
    )
    claims = [
        {
            "metadata": {"name": "c", "namespace": "ns"},
            "status": {
                "allocation": {"devices": {"results": [{"driver": DRIVER, "pool": "node-a", "device": held}]}}
            },
        }
    ]
    gpus = node_gpus(
        [*slices, "junk", {"spec": None}],
        [*claims, 7],
        DRIVER,
        lambda m: default_allowlist().profiles_for(m.nvml_name),
    )
    assert [(g.minor, g.uuid, g.instances) for g in gpus["node-a"]] == [
        (0, g0.uuid, g0.instances),
        (1, g1.uuid, ()),
    ]
    assert node_key(gpus["node-a"], [ONE]) == node_key((g0, g1), [ONE])
