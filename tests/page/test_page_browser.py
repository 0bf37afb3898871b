"""The live page in a real headless browser (Debian's chromium over CDP) against the whole lab:
`dynmig serve` runs with the chart's `server.page.enabled=true`, pods are created and deleted
through the API, and the page, never reloaded, shows each change once its script has run.

Skipped, saying why, without helm (`make tools`) or chromium (`make browser`, root + apt-get).
Set DYNMIG_PAGE_SCREENSHOT=path.png to keep the screenshot (the README's comes from this test).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser_testkit import Chromium, Tab, chromium_binary, is_png
from lab.chart import ChartError, helm_binary
from lab.cluster import Lab
from lab.kit import Kit, gpu_pod
from lab.nodes import parse_nodes

pytestmark = pytest.mark.timeout(300)
# one node of two A100s: three pods fill it and the third waits for a reason the engine gives
NODES = "gpu-a100=2xA100-SXM4-40GB"
WHOLE_A100 = 40000  # MiB: only 7g.40gb, a whole GPU, holds it


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    if not chromium_binary():
        pytest.skip("chromium is not installed: `make browser` installs it (as root, with apt-get)")
    try:
        helm_binary()
    except ChartError as error:
        pytest.skip(str(error))
    started = Lab(parse_nodes(NODES), tmp_path_factory.mktemp("lab"), page=True).start()
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
def tab(lab: Lab, tmp_path: Path) -> Iterator[Tab]:
    with Chromium(tmp_path) as browser:
        yield browser.open(lab.page_url)


def segment(tab: Tab, pod: str) -> dict | None:
    """The drawn segment of `default/<pod>` as the rendered DOM has it, or None."""
    return tab.evaluate(
        f"""(() => {{
          const g = document.querySelector('g.segment[data-pod="default/{pod}"]');
          return g && {{profile: g.dataset.profile, phase: g.dataset.phase, placement: g.dataset.placement,
                        gpu: g.closest('div.gpu').dataset.gpu, text: g.textContent}};
        }})()"""
    )


def pending_row(tab: Tab, pod: str) -> dict | None:
    return tab.evaluate(
        f"""(() => {{
          const tr = document.querySelector('tr.pending-pod[data-pod="default/{pod}"]');
          return tr && {{reason: tr.querySelector('.reason').textContent,
                         fix: tr.querySelector('.fix').textContent}};
        }})()"""
    )


def test_the_page_shows_pods_as_they_come_and_go_and_a_pending_pod_with_its_reason(lab: Lab, tab: Tab):
    kit = Kit(lab)
    try:
        gpus = tab.wait_for("document.querySelectorAll('div.gpu').length", what="the GPUs to be drawn")
        assert gpus == sum(n.gpu_count for n in lab.specs)
        assert tab.wait_for("document.getElementById('live').dataset.state === 'live'", what="the stream")
        tab.evaluate("window.dynmigSamePage = true")  # gone if the page were reloaded

        kit.create(gpu_pod("train", 5000))
        kit.wait_phase("train")
        (reserved,) = kit.allocations("train")
        drawn = tab.wait_for(
            "(() => { const g = document.querySelector('g.segment[data-pod=\"default/train\"]');"
            " return g && g.dataset.phase === 'realized'; })()",
            what="train's segment, realized",
        )
        assert drawn
        shown = segment(tab, "train")
        placement = f"{reserved.placement.start}:{reserved.placement.size}"
        assert (shown["profile"], shown["placement"], shown["gpu"]) == (
            reserved.profile,
            placement,
            reserved.gpuUUID,
        )
        assert "train" in shown["text"] and reserved.profile in shown["text"]

        kit.create(gpu_pod("whole", WHOLE_A100))
        kit.wait_phase("whole")
        kit.create(gpu_pod("waits", WHOLE_A100))  # both A100s hold something now: it waits
        row = tab.wait_for(
            "(() => { const tr = document.querySelector('tr.pending-pod[data-pod=\"default/waits\"]');"
            " return tr && !tr.querySelector('.reason').textContent.includes('not tried'); })()",
            what="waits to be listed as pending with the scheduler's reason",
        )
        assert row
        pending = pending_row(tab, "waits")
        assert pending["reason"] and "wait for a MIG pod to end" in pending["fix"]
        png = tab.screenshot(1180, 480)  # the page as a person sees it now: three pods, one waiting
        assert is_png(png) and len(png) > 1000
        if os.environ.get("DYNMIG_PAGE_SCREENSHOT"):
            Path(os.environ["DYNMIG_PAGE_SCREENSHOT"]).write_bytes(png)

        kit.delete("train")  # its GPU is free again: the segment goes, and the waiting pod gets it
        tab.wait_for(
            "document.querySelector('g.segment[data-pod=\"default/train\"]') === null",
            what="train's segment to disappear",
        )
        kit.wait_phase("waits", timeout=60)
        tab.wait_for(
            "document.querySelector('tr.pending-pod[data-pod=\"default/waits\"]') === null"
            " && document.querySelector('g.segment[data-pod=\"default/waits\"]') !== null",
            what="waits to move from the pending list onto a GPU",
        )

        assert tab.evaluate("window.dynmigSamePage === true")  # every change came without a reload
        errors = [e for e in tab.log if e.get("level") == "error"]
        assert errors == []  # no script error and no Content-Security-Policy violation
    finally:
        kit.delete_all()
