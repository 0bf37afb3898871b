"""How deep JSON text nests, measured without recursion (so before `json.loads` recurses into it).

On the UTF-8 bytes: escape pairs and every byte but brackets and quotes are dropped, then what lies
between quotes (strings), and innermost pairs are removed one level per pass (each step runs at C
speed); anything left after `limit` passes is deeper than `limit`. Text with fewer brackets than
`limit` is not scanned at all.
"""

from __future__ import annotations

import re

_ESCAPE = re.compile(rb"\\.", re.DOTALL)  # inside a string an escape pair means nothing structural
_KEEP = b'[]{}"'
_DROP = bytes(b for b in range(256) if b not in _KEEP)  # UTF-8 never hides these bytes in a character
_OPEN_CLOSE = bytes.maketrans(b"[{]}", b"(())")


def nesting_depth_exceeds(text: str | bytes, limit: int) -> bool:
    """True if brackets (outside strings) nest deeper than `limit`.

    Unbalanced text that stays shallow is left to the decoder to refuse with its own message.
    """
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if data.count(b"[") + data.count(b"{") <= limit:  # fewer brackets than levels: cannot be deeper
        return False
    skeleton = _ESCAPE.sub(b"", data).translate(None, _DROP)  # only brackets and quotes are left
    skeleton = skeleton.replace(b'""', b"")  # most strings hold no bracket: they are gone now
    if b'"' in skeleton:  # the rest: keep what lies outside quotes
        skeleton = b"".join(skeleton.split(b'"')[::2])
    brackets = skeleton.translate(_OPEN_CLOSE)  # brackets outside strings, as ( and )
    for depth in range(limit):
        if not brackets:
            return False
        shorter = brackets.replace(b"()", b"")
        if len(shorter) == len(brackets):  # unbalanced: only unmatched brackets are left
            return depth + brackets.count(b"(") > limit
        brackets = shorter
    return bool(brackets)
