"""docs/dra.md's Kueue quota uses counters dynmig's plugin publishes: the named counters are in every
device's consumption and its GPU's counter set, the selector matches the devices, and Kueue's charging
rule (kubernetes-sigs/kueue pkg/dra/counters.go: the largest value of the counter among the devices the
source, class and request selectors match, times the count) gives the slices and memory a claim takes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from sim.apiserver.cel import evaluate
from sim.dra.allocator import QUANTITY_LIBRARY, _activation, parse_slice, quantity

from base.policyfiles import default_allowlist
from mig.catalog import find_model
from mig.dra import Gpu, Instance, steered_slices

DOC = Path(__file__).resolve().parents[2] / "docs" / "dra.md"
DRIVER = "mig.dynmig.io"


def doc_yaml() -> list[dict]:
    text = DOC.read_text()
    section = text[text.index("## Quota with Kueue") :]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block, "docs/dra.md: the Kueue section has its YAML"
    return [d for d in yaml.safe_load_all(block.group(1)) if d]


def mappings() -> list[dict]:
    return doc_yaml()[0]["resources"]["deviceClassMappings"]


def node(model: str) -> list:
    m = find_model(model)
    allowed = default_allowlist().profiles_for(m.nvml_name)
    busy = (Instance(m.profiles[0].name, m.profiles[0].placements[0]),)
    gpus = [Gpu(0, f"GPU-{model}-0", m, allowed, busy), Gpu(1, f"GPU-{model}-1", m, allowed)]
    return [parse_slice(s) for s in steered_slices("n", DRIVER, gpus, 1)]


def matches(expression: str, device) -> bool:
    return evaluate(expression, _activation(DRIVER, device), QUANTITY_LIBRARY) is True


@pytest.mark.parametrize("model", ["A100-SXM4-40GB", "H100-SXM5-80GB"])
def test_every_counter_the_docs_name_is_published_by_the_plugin_and_its_selector_matches(model):
    slices = node(model)
    devices = [d for s in slices for d in s.devices]
    sets = {name: dict(counters) for s in slices for name, counters in s.counter_sets}
    assert devices and sets
    for mapping in mappings():
        assert mapping["deviceClassNames"] == ["mig.dynmig.io"]  # the chart's DeviceClass
        for source in mapping["sources"]:
            counter = source["counter"]
            assert counter["driver"] == DRIVER and re.fullmatch(
                r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", counter["name"]
            )
            for d in devices:
                assert matches(counter["deviceSelector"]["cel"]["expression"], d)
                ((set_name, consumed),) = d.consumes
                assert counter["name"] in dict(consumed), f"{d.name} consumes no {counter['name']}"
                assert counter["name"] in sets[set_name]


def kueue_charge(counter: dict, request_selector: str, count: int, slices: list) -> int:
    """Kueue's computeCounterCharges over the devices its selectors match."""
    values = [
        dict(dict(d.consumes)[d.consumes[0][0]])[counter["name"]]
        for s in slices
        for d in s.devices
        if matches(counter["deviceSelector"]["cel"]["expression"], d) and matches(request_selector, d)
    ]
    return max(values) * count


def test_a_claim_for_two_1g_10gb_on_an_h100_is_charged_two_slices_and_their_memory():
    slices = node("H100-SXM5-80GB")
    asks = f'device.attributes["{DRIVER}"].profile == "1g.10gb"'
    charged = {m["name"]: kueue_charge(m["sources"][0]["counter"], asks, 2, slices) for m in mappings()}
    assert charged == {"mig.dynmig.io/slices": 2, "mig.dynmig.io/memory": quantity("19968Mi")}


def test_the_cluster_queue_covers_exactly_the_mapped_quota_resources():
    queue = next(d for d in doc_yaml() if d.get("kind") == "ClusterQueue")
    (group,) = queue["spec"]["resourceGroups"]
    names = {m["name"] for m in mappings()}
    assert set(group["coveredResources"]) == names
    assert {r["name"] for r in group["flavors"][0]["resources"]} == names
