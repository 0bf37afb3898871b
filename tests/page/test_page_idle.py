"""The live page shows the instances the device plugin keeps idle (`dynmig.io/node-idle-instances`,
read from the Node objects of serve's watch cache) as their own segment, free for any pod: the
legend names the phase with its colour, the tooltip says what it means, and a hostile idle list is
said to be unreadable on its node and changes nothing else."""

from __future__ import annotations

from html.parser import HTMLParser
from importlib import resources
from typing import Any

import pytest
from registration_testkit import registration

from mig.allowlist import ResourceNames
from mig.annotations import NODE_REGISTER
from mig.idle import IDLE, IdleInstance, encode_idle
from mig.slicemap import PHASES
from mig.types import Placement
from webhooks.fleet import Fleet
from webhooks.page.render import page
from webhooks.page.view import FleetPage

SINCE = 1767225600  # 2026-01-01 00:00:00 UTC
MEANING = "free for any pod; reused by a matching one"


class Parsed(HTMLParser):
    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)

    def handle_data(self, data):
        self.text.append(data)

    def with_class(self, name: str) -> list[dict[str, str]]:
        return [a for _, a in self.tags if name in a.get("class", "").split()]

    @property
    def shown(self) -> str:
        return "".join(self.text)


def mig_node(name: str, idle: str | None = None) -> dict[str, Any]:
    annotations = {NODE_REGISTER: registration(name, "A100-SXM4-40GB", 1)}
    if idle is not None:
        annotations[IDLE] = idle
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": annotations}}


def kept(gpu: str, profile: str, start: int, size: int) -> str:
    return encode_idle([IdleInstance.of(gpu, profile, Placement(start, size), SINCE)])


def live_page(nodes: list[dict[str, Any]]) -> FleetPage:
    fleet = Fleet()
    fleet.replace_nodes(nodes)
    fleet.replace_pods([])
    return FleetPage(fleet, lambda: [], lambda: True, ResourceNames, "dynmig-scheduler", nodes=lambda: nodes)


def test_an_idle_instance_is_a_segment_of_its_own_whose_tooltip_says_it_is_free_for_any_pod():
    nodes = [mig_node("n1", kept("GPU-n1-0", "2g.10gb", 2, 2))]
    shown = Parsed(live_page(nodes)())
    [segment] = shown.with_class("segment")
    assert (segment["data-phase"], segment["data-profile"], segment["data-placement"]) == (
        "idle",
        "2g.10gb",
        "2:2",
    )
    assert "phase-idle" in segment["class"].split()
    assert f"idle 2g.10gb at slices 2:2 since 2026-01-01 00:00:00 UTC: {MEANING}" in shown.shown
    # its slices stay free for the scheduler: drawn as the idle instance, counted in what fits
    assert sorted(int(a["data-slice"]) for a in shown.with_class("free")) == [0, 1, 4, 5, 6, 7]
    fits = {a["data-profile"]: a["data-count"] for a in shown.with_class("fit")}
    assert fits["7g.40gb"] == "1" and fits["1g.5gb"] == "7"


def test_the_node_is_drawn_again_when_its_idle_list_changes_and_only_then():
    nodes = [mig_node("n1", kept("GPU-n1-0", "1g.5gb", 0, 1))]
    live = live_page(nodes)
    assert [a["data-phase"] for a in Parsed(live()).with_class("segment")] == ["idle"]
    live()
    assert live.nodes_drawn == 1  # nothing changed: reused
    nodes[0] = mig_node("n1")  # the plugin handed it over or destroyed it
    assert Parsed(live()).with_class("segment") == []
    assert live.nodes_drawn == 2


@pytest.mark.parametrize(
    "value",
    [
        "<script>alert(1)</script>",
        '[{"gpuUUID": "GPU-n1-0", "profile": "<b>x</b>", "placement": {"start": 0, "size": 1}}]',
        "[" * 5000,
        '[{"gpuUUID": "GPU-n1-0", "profile": "1g.5gb", "placement": {"start": 0, "size": 1}, '
        '"idleSince": 0}, {"gpuUUID": "GPU-n1-0", "profile": "1g.5gb", "placement": {"start": 0, '
        '"size": 1}, "idleSince": 1}]',
        "x" * 70000,
    ],
)
def test_a_hostile_idle_list_is_said_to_be_unreadable_and_the_gpu_is_drawn_as_before(value):
    shown = Parsed(live_page([mig_node("n1", value)])())
    assert len(shown.with_class("idle-unreadable")) == 1
    text = shown.shown
    assert "idle instances unreadable: dynmig.io/node-idle-instances" in text
    assert {tag for tag, _ in shown.tags} <= {
        "p",
        "section",
        "h2",
        "h3",
        "div",
        "span",
        "svg",
        "g",
        "rect",
        "text",
        "title",
    }
    assert shown.with_class("segment") == []
    assert len(shown.with_class("free")) == 8 and len(shown.with_class("gpu")) == 1
    assert len(text) < 5000  # the reason is cut, never the whole value


def test_the_legend_names_every_phase_with_its_colour_and_says_what_idle_means():
    shown = Parsed(page(""))
    items = {a["data-phase"]: a for a in shown.with_class("legend-item")}
    assert list(items) == [*PHASES, "free"]
    assert f"idle {MEANING}" in shown.shown and "idle idle" not in shown.shown
    css = (resources.files("webhooks.page") / "page.css").read_text()
    for phase in PHASES:  # each swatch takes the colour its segments have
        assert f".phase-{phase} rect {{ fill:" in css
