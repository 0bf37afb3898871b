"""The metric names docs/operating.md documents per process, and the names a /metrics page exposes."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

README = Path(__file__).resolve().parent.parent / "docs" / "operating.md"
_SUFFIX = {"counter": "_total"}  # the parser names a counter's family without it


def documented(component: str) -> set[str]:
    """Backticked names in the first column of docs/operating.md's `<!-- metrics: component -->` table."""
    text = README.read_text()
    start = text.index(f"<!-- metrics: {component} -->")
    table = text[start : text.index("<!-- /metrics -->", start)]
    names: set[str] = set()
    for row in table.splitlines():
        cells = row.split(" | ")
        if row.startswith("| `") and cells:
            names.update(re.findall(r"`([a-z_:][a-z0-9_:]*)`", cells[0]))
    return names


def exposed(page: str) -> set[str]:
    """Every metric family on a Prometheus text page, by the name a query uses (counters with
    `_total`, histograms by their base name)."""
    names = {family.name + _SUFFIX.get(family.type, "") for family in text_string_to_metric_families(page)}
    # a counter's or histogram's `_created` sample may parse as a family of its own
    return {n for n in names if not (n.endswith("_created") and names & {n[:-8], n[:-8] + "_total"})}
