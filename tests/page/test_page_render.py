"""The page's HTML and SVG: every cluster string shown as text (names are hostile input), each
instance a labelled segment, each free slice drawn, and bounded output however long the names."""

from __future__ import annotations

from html.parser import HTMLParser

from mig.annotations import MigAllocation
from mig.catalog import find_model
from mig.leftovers import Leftover
from mig.placement import GpuState
from mig.placement.published import from_catalog
from mig.slicemap import FleetMap, Holding, PendingPod, fleet_map, gpu_map, node_map
from mig.types import Placement
from webhooks.page.render import MAX_PENDING, fragment, page

A100 = find_model("A100-SXM4-40GB")
PROFILES = from_catalog(A100, ("1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb"))
HOSTILE = (
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(2)>',
    "'><svg onload=alert(3)>",
    "]]><!--&amp;",
)


class Parsed(HTMLParser):
    """Tags, attributes and text as a browser's parser sees them (entities decoded)."""

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


def gpu(*occupied: Placement, uuid: str = "GPU-a", node: str = "n1", **kw) -> GpuState:
    return GpuState(node, uuid, A100.nvml_name, PROFILES, occupied, memory_mb=A100.memory_mib, **kw)


def alloc(profile: str, start: int, size: int, mig: str | None = None, uuid: str = "GPU-a") -> MigAllocation:
    runtime = {"migUUID": mig, "gpuInstanceID": 1, "computeInstanceID": 0} if mig else {}
    return MigAllocation.model_validate(
        {
            "containerIndex": 0,
            "deviceIndex": 0,
            "gpuUUID": uuid,
            "profile": profile,
            "placement": {"start": start, "size": size},
            **runtime,
        }
    )


def one_gpu_fleet(*holdings: Holding, leftovers=(), node: str = "n1", pending=()) -> FleetMap:
    occupied = [h.allocation.placement_value for h in holdings] + [x.placement_value for x in leftovers]
    g = gpu_map(gpu(*occupied, node=node), holdings, leftovers)
    return fleet_map([node_map(node, [g])], pending)


def test_hostile_pod_node_and_reason_texts_are_shown_as_text_and_never_become_markup():
    holdings = [
        Holding(HOSTILE[i], HOSTILE[-1 - i], alloc("1g.5gb", i, 1, mig=f"MIG-{i}"))
        for i in range(len(HOSTILE))
    ]
    pending = [PendingPod(name, name, "1 × 5000 MiB", reason=name, fix=name, code=name) for name in HOSTILE]
    html_text = page(fragment(one_gpu_fleet(*holdings, node=HOSTILE[0], pending=pending)))
    parsed = Parsed(html_text)
    assert {tag for tag, _ in parsed.tags} <= {
        "html", "head", "meta", "title", "link", "body", "header", "h1", "h2", "h3", "p", "main", "section",
        "div", "span", "svg", "g", "rect", "text", "table", "thead", "tbody", "tr", "th", "td", "footer",
        "script",
    }  # fmt: skip
    scripts = [a for tag, a in parsed.tags if tag == "script"]
    assert scripts == [{"src": "page.js", "defer": ""}]  # only the page's own script, from its own origin
    assert not [name for _, a in parsed.tags for name in a if name.startswith("on")]
    shown = "".join(parsed.text)
    for name in HOSTILE:
        assert name in shown  # the name, as typed, is text on the page
    pods = {a["data-pod"] for a in parsed.with_class("segment")}
    assert pods == {f"{h.namespace}/{h.name}" for h in holdings}  # and round-trips through attributes


def test_each_instance_is_a_segment_labelled_with_profile_pod_and_phase_and_each_free_slice_is_drawn():
    fleet = one_gpu_fleet(
        Holding("default", "train", alloc("1g.5gb", 0, 1, mig="MIG-1")),
        Holding("default", "infer", alloc("3g.20gb", 4, 4)),
    )
    parsed = Parsed(fragment(fleet))
    segments = {
        a["data-pod"]: (a["data-profile"], a["data-phase"], a["data-placement"])
        for a in parsed.with_class("segment")
    }
    assert segments == {
        "default/train": ("1g.5gb", "realized", "0:1"),
        "default/infer": ("3g.20gb", "reserved", "4:4"),
    }
    assert [a["data-slice"] for a in parsed.with_class("free")] == ["1", "2", "3"]
    text = "".join(parsed.text)
    assert "train" in text and "realized" in text and "reserved" in text
    fits = {a["data-profile"]: int(a["data-count"]) for a in parsed.with_class("fit")}
    assert fits["1g.5gb"] >= 1 and fits["7g.40gb"] == 0  # the counts of the map, shown per profile


def test_a_leftover_overlapping_a_reservation_is_drawn_on_its_own_lane_so_neither_hides_the_other():
    leftover = Leftover.of("GPU-a", "2g.10gb", Placement(0, 2), "unowned")
    fleet = one_gpu_fleet(Holding("ns", "p", alloc("1g.5gb", 0, 1)), leftovers=[leftover])
    parsed = Parsed(fragment(fleet))
    phases = sorted(a["data-phase"] for a in parsed.with_class("segment"))
    assert phases == ["leftover", "reserved"]
    rects = [a for tag, a in parsed.tags if tag == "rect"]
    assert len({r["y"] for r in rects}) >= 2  # two lanes


def test_a_closed_gpu_says_why_and_offers_no_fits():
    g = gpu_map(gpu(cordoned="GPU is cordoned: the node lists it"), (), ())
    parsed = Parsed(fragment(fleet_map([node_map("n1", [g])])))
    assert "no new pods: GPU is cordoned" in "".join(parsed.text)
    assert not [a for a in parsed.with_class("fits") if "fits now:" in str(a)]
    assert [a["data-slice"] for a in parsed.with_class("free")] == [str(i) for i in range(8)]


def test_huge_names_and_many_pending_pods_give_a_bounded_page():
    huge = "x" * 100_000
    pending = [PendingPod("ns", f"{huge}{i}", "1 × 5000 MiB", reason=huge) for i in range(MAX_PENDING * 5)]
    fleet = one_gpu_fleet(Holding(huge, huge, alloc("1g.5gb", 0, 1)), node=huge, pending=pending)
    text = fragment(fleet)
    assert len(text) < 500_000
    parsed = Parsed(text)
    assert len(parsed.with_class("pending-pod")) == MAX_PENDING
    assert f"and {MAX_PENDING * 4} more" in "".join(parsed.text)


def test_a_fleet_without_mig_gpus_says_so():
    assert "no node publishes MIG GPUs yet" in fragment(fleet_map([]))
