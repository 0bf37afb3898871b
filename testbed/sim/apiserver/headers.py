"""An HTTP/1.1 request's header block, read as the standard library's `http.server` reads it, without
its `email` parser (which costs more CPU than most of the API server's own work on a request).

Same reading as `http.client.parse_headers` with the `email` compat32 policy: lines of at most
65,536 bytes and at most 100 of them (else `TooLarge`, which the handler answers 431), ISO-8859-1
text, a name up to the first colon, the value without its leading blanks and trailing line end, a
line starting with a blank continuing the previous value, and the block ending at the empty line
or at the first line that is neither a header nor a continuation. A name repeated keeps every value;
`get` answers the first, case-insensitively, as `email.message.Message.get` does.
"""

from __future__ import annotations

import re
from typing import Protocol

MAX_LINE = 65536  # http.client._MAXLINE
MAX_HEADERS = 100  # http.client._MAXHEADERS
# email.feedparser's test of a header line: an mbox envelope line, a name of printable characters but
# ':' then ':', or a continuation (a leading blank); and its split into lines
_HEADER_LINE = re.compile(r"^(From |[\041-\071\073-\176]*:|[\t ])")
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")
# a block of plain `Name: value` lines only (what every client sends), read without the general case
_PLAIN_BLOCK = re.compile(rb"(?:[\041-\071\073-\176]+:[^\r\n]*\r?\n)*(?:\r?\n)?")
_PLAIN_FIELD = re.compile(rb"([\041-\071\073-\176]+):[ \t]*([^\r\n]*)\r?\n")


class Lines(Protocol):
    """What the headers are read from: a buffered socket reader (`rfile`)."""

    def readline(self, size: int = -1, /) -> bytes: ...


class TooLarge(Exception):
    """A header line longer than MAX_LINE, or more than MAX_HEADERS lines: `reason` says which."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason


class Headers:
    """A request's headers: `get(name, default)`, case-insensitive, the first value of a repeated name."""

    __slots__ = ("_first", "fields")

    def __init__(self, fields: list[tuple[str, str]]):
        self.fields = fields  # (name as sent, value), in order
        self._first: dict[str, str] = {}
        for name, value in fields:
            self._first.setdefault(name.lower(), value)

    def get(self, name: str, default: str | None = None) -> str | None:
        return self._first.get(name.lower(), default)

    def __getitem__(self, name: str) -> str | None:
        return self._first.get(name.lower())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._first

    def get_all(self, name: str) -> list[str]:
        key = name.lower()
        return [v for n, v in self.fields if n.lower() == key]

    def items(self) -> list[tuple[str, str]]:
        return list(self.fields)


def read(rfile: Lines) -> Headers:
    """The header block at the reader's position, up to and including its empty line."""
    lines: list[bytes] = []
    while True:
        line = rfile.readline(MAX_LINE + 1)
        if len(line) > MAX_LINE:
            raise TooLarge("Line too long", "header line")
        lines.append(line)
        if len(lines) > MAX_HEADERS:
            raise TooLarge("Too many headers", f"got more than {MAX_HEADERS} headers")
        if line in (b"\r\n", b"\n", b""):
            break
    block = b"".join(lines)
    if _PLAIN_BLOCK.fullmatch(block) and not block.startswith(b"From "):
        return Headers(
            [(n.decode("iso-8859-1"), v.decode("iso-8859-1")) for n, v in _PLAIN_FIELD.findall(block)]
        )
    return Headers(_fields(block))


def _fields(block: bytes) -> list[tuple[str, str]]:
    """The email parser's reading of the block: its own line split (a bare CR ends a line too),
    header lines up to the first other one, then names and values."""
    collected: list[str] = []
    for line in _LINE.findall(block.decode("iso-8859-1")):
        if not _HEADER_LINE.match(line):
            break  # the empty line, or the start of what the email parser takes as a body
        collected.append(line)
    fields: list[tuple[str, list[str]]] = []
    current: list[str] | None = None  # the lines of the header a continuation continues
    for line in collected:
        if line[0] in " \t":
            if current is not None:
                current.append(line)
            continue  # nothing to continue: dropped, as a defect
        current = None
        if line.startswith("From "):
            continue  # an mbox envelope line: set aside
        name, value = line.split(":", 1)
        if not name:
            continue  # a line starting with a colon names nothing: dropped, as a defect
        current = [value.lstrip(" \t")]
        fields.append((name, current))
    return [(name, "".join(parts).rstrip("\r\n")) for name, parts in fields]
