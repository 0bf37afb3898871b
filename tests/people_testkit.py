"""What a person reads from dynmig's CLI and the lab is text for people: `reprs` finds the lines that
hold a Python repr (a dataclass's `Name(field=…` or an `<… object at 0x…>`)."""

from __future__ import annotations

import re

REPR = re.compile(r"\b[A-Z][A-Za-z0-9_]*\([a-z_][a-z0-9_]*=|<[^<>\n]* object at 0x[0-9a-f]+>")


def reprs(text: str) -> list[str]:
    """The lines of `text` that hold a Python repr."""
    return [line for line in text.splitlines() if REPR.search(line)]
