"""How deep JSON text nests, measured without recursion (so before `json.loads` recurses into it).

Strings are blanked, everything but brackets dropped, and innermost pairs removed one level per
pass (each pass runs at C speed); anything left after `limit` passes is deeper than `limit`.
"""

from __future__ import annotations

import re

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_OPEN_CLOSE = str.maketrans("[{]}", "(())")


def nesting_depth_exceeds(text: str, limit: int) -> bool:
    """True if brackets (outside strings) nest deeper than `limit`.

    Unbalanced text that stays shallow is left to the decoder to refuse with its own message.
    """
    brackets = _NOT_BRACKET.sub("", _STRING.sub('""', text)).translate(_OPEN_CLOSE)
    for depth in range(limit):
        if not brackets:
            return False
        shorter = brackets.replace("()", "")
        if len(shorter) == len(brackets):  # unbalanced: only unmatched brackets are left
            return depth + brackets.count("(") > limit
        brackets = shorter
    return bool(brackets)
