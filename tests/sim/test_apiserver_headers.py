"""The simulated API server reads request headers as the standard library's http.server does (its
own reader, without the email parser's CPU): same values for every header block, same refusals."""

from __future__ import annotations

import http.client
import io
import socket

from hypothesis import given, settings
from hypothesis import strategies as st
from sim.apiserver import headers

_NAMES = st.sampled_from(
    ["Content-Type", "content-type", "Accept", "User-Agent", "X-Odd", "Authorization", "Expect", ""]
)
_TEXT = st.text(
    alphabet=st.one_of(st.characters(min_codepoint=32, max_codepoint=255), st.sampled_from("\r\n\x0b\x85:")),
    max_size=12,
)
_LINE = st.one_of(
    st.builds(lambda n, v: f"{n}:{v}\r\n", _NAMES, _TEXT),  # a header (possibly repeated)
    st.builds(lambda v: f" {v}\r\n", _TEXT),  # a continuation
    st.builds(lambda v: f"\t{v}\n", _TEXT),  # a continuation with a bare line feed
    st.builds(lambda v: f"{v}\r\n", _TEXT),  # anything at all
    st.just("From somebody\r\n"),
    st.just(":no name\r\n"),
)


def _standard(raw: bytes) -> list[tuple[str, str | None]]:
    msg = http.client.parse_headers(io.BytesIO(raw))
    return [(n, msg.get(n)) for n in ("Content-Type", "accept", "User-Agent", "X-Odd", "Expect", "")]


def _ours(raw: bytes) -> list[tuple[str, str | None]]:
    got = headers.read(io.BytesIO(raw))
    return [(n, got.get(n)) for n in ("Content-Type", "accept", "User-Agent", "X-Odd", "Expect", "")]


@settings(max_examples=400, deadline=None)
@given(st.lists(_LINE, max_size=8), st.sampled_from(["\r\n", "\n", ""]))
def test_every_header_block_reads_as_the_standard_library_reads_it(lines, end):
    raw = ("".join(lines) + end).encode("iso-8859-1")
    assert _ours(raw) == _standard(raw)


def test_the_first_of_a_repeated_header_is_the_one_served():
    got = headers.read(io.BytesIO(b"Accept: a\r\naccept: b\r\n\r\n"))
    assert got.get("ACCEPT") == "a"
    assert got.get_all("Accept") == ["a", "b"]


def _raw(apiserver, request: bytes) -> bytes:
    with socket.create_connection((apiserver.host, apiserver.port), timeout=10) as sock:
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
    return out


def test_a_request_with_more_than_a_hundred_headers_is_refused_with_431(apiserver):
    many = b"".join(b"X-H%d: v\r\n" % i for i in range(101))
    reply = _raw(apiserver, b"GET /version HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n")
    assert reply.startswith(b"HTTP/1.1 431 Too many headers")


def test_a_header_line_over_64_kib_is_refused_with_431(apiserver):
    reply = _raw(apiserver, b"GET /version HTTP/1.1\r\nX-Long: " + b"a" * 70000 + b"\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 431 Line too long")


def test_an_http_2_request_line_is_refused_with_505(apiserver):
    reply = _raw(apiserver, b"GET /version HTTP/2.0\r\n\r\n")  # answered as HTTP/0.9: no status line
    assert b"Invalid HTTP version (2.0)" in reply
    assert b"505" in reply


def test_a_bad_request_line_is_refused_with_400(apiserver):
    assert b"Bad request version ('HTTP/x.y')" in _raw(apiserver, b"GET /version HTTP/x.y\r\n\r\n")
    assert _raw(apiserver, b"GET a b HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 400 Bad request syntax")


def test_a_request_on_a_kept_alive_connection_is_answered_after_the_first(apiserver):
    one = b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n"
    reply = _raw(apiserver, one + b"GET /version HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert reply.count(b"HTTP/1.1 200 OK") == 2


def test_expect_100_continue_is_answered_before_the_body(apiserver):
    token = apiserver.identity("admin").token.encode()
    body = b'{"metadata":{"name":"expects"}}'
    reply = _raw(
        apiserver,
        b"POST /api/v1/namespaces HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + token
        + b"\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nConnection: close\r\n"
        + b"Content-Length: %d\r\n\r\n" % len(body)
        + body,
    )
    assert reply.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201")
