"""How the slice map reads in a terminal: the bar, the segment lines, colour only when wanted, and
cluster text that cannot drive the terminal."""

from __future__ import annotations

import io

import pytest
from test_slicemap import alloc, gpu

from dynmig.status.main import use_color
from dynmig.status.render import Style, bar, clean, gpu_lines, render
from mig.slicemap import Holding, PendingPod, fleet_map, gpu_map, node_map
from mig.types import Placement

PLAIN = Style(color=False, width=100)


def one_gpu(*holdings: Holding, closed: str = ""):
    state = gpu(*(h.allocation.placement_value for h in holdings))
    return gpu_map(state, holdings, closed=closed)


def test_the_bar_labels_each_segment_and_numbers_each_free_slice():
    g = one_gpu(Holding("ml", "train", alloc("3g.20gb", 4, 4, mig="MIG-1")))
    text = bar(g, Style(width=60))  # 6 characters per slice
    assert text == "..0.....1.....2.....3...[#3g.20gb ml/train#####]"


def test_a_reserved_segment_and_a_realized_one_are_told_apart_without_colour():
    g = one_gpu(
        Holding("ml", "a", alloc("1g.5gb", 0, 1)), Holding("ml", "b", alloc("1g.5gb", 1, 1, mig="MIG-b"))
    )
    lines = gpu_lines(g, PLAIN)
    assert (
        lines[1]
        == "    [=1g.5gb …][#1g.5gb …].....2..........3..........4..........5..........6..........7....."
    )
    assert "    0:1   1g.5gb      reserved   ml/a" in lines
    assert "    1:1   1g.5gb      realized   ml/b" in lines
    assert lines[-1].startswith("    free slices 2,3,4,5,6,7   still fits: 1g.5gb 5  2g.10gb 2  3g.20gb 1")


def test_a_closed_gpu_says_why_instead_of_what_fits():
    lines = gpu_lines(one_gpu(closed="unreadable: pod ml/x: bad annotation"), PLAIN)
    assert lines[-1] == "    closed: unreadable: pod ml/x: bad annotation"


def test_overlapping_segments_from_a_bad_record_are_pointed_out():
    a, b = alloc("3g.20gb", 0, 4), alloc("1g.5gb", 1, 1)
    g = gpu_map(gpu(Placement(0, 4)), [Holding("ml", "a", a), Holding("ml", "b", b)], closed="overlap")
    assert "    overlapping segments: 1:1" in gpu_lines(g, PLAIN)


def test_text_from_the_cluster_cannot_move_the_cursor_or_recolour_the_terminal():
    hostile = "evil\x1b[2J\x1b]0;title\x07\u202ename"
    g = one_gpu(Holding("ml", hostile, alloc("1g.5gb", 0, 1)))
    out = render(fleet_map([node_map("n\x1b[31m1", [g])]), PLAIN)
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "ml/evil?[2J?]0;title??name" in out
    assert clean("x" * 1000, 10) == "x" * 9 + "…"


def test_colour_is_ansi_only_when_asked():
    g = one_gpu(Holding("ml", "a", alloc("1g.5gb", 0, 1, mig="MIG-a")))
    fleet = fleet_map([node_map("n1", [g])])
    assert "\x1b[" not in render(fleet, PLAIN)
    coloured = render(fleet, Style(color=True))
    assert "\x1b[42;30m[1g.5gb" in coloured


def test_a_pending_pod_reads_as_one_line_then_its_fix_and_advice():
    pending = PendingPod(
        "ml", "big", "1 × 80000 MiB", "0/2 nodes: " + "x" * 300, "ask for less", "evict ml/a"
    )
    out = render(fleet_map([], [pending]), Style(width=80)).splitlines()
    row = next(i for i, line in enumerate(out) if "ml/big" in line)
    assert len(out[row]) == 80 and out[row].endswith("…")
    assert out[row + 1 : row + 3] == ["      fix: ask for less", "      advice: evict ml/a"]
    assert "no node publishes MIG GPUs" in "\n".join(out)


class _Stream(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize(
    ("choice", "tty", "environ", "expected"),
    [
        ("auto", True, {}, True),
        ("auto", False, {}, False),
        ("auto", True, {"NO_COLOR": "1"}, False),
        ("auto", True, {"NO_COLOR": ""}, True),
        ("auto", True, {"TERM": "dumb"}, False),
        ("always", False, {"NO_COLOR": "1"}, True),
        ("never", True, {}, False),
    ],
)
def test_colour_follows_the_flag_the_terminal_and_no_color(choice, tty, environ, expected):
    assert use_color(choice, _Stream(tty), environ) is expected
