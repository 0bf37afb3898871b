"""Request bodies sent in chunks (Go clients streaming stdin do): read whole, bounded, or refused."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
from urllib.parse import urlsplit

from sim.apiserver.rest import MAX_BODY

PATH = "/api/v1/namespaces/default/configmaps"


def connect(apiserver) -> http.client.HTTPConnection:
    url = urlsplit(apiserver.url)
    if url.scheme == "https":
        ctx = ssl.create_default_context(cadata=apiserver.cert_pem.decode())
        ctx.check_hostname = False
        return http.client.HTTPSConnection(url.hostname, url.port, context=ctx, timeout=30)
    return http.client.HTTPConnection(url.hostname, url.port, timeout=30)


def headers(apiserver) -> dict[str, str]:
    token = apiserver.identity("admin").token
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


def config_map(name: str, value: str = "v") -> bytes:
    return json.dumps(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": value}}
    ).encode()


def test_kubectl_create_raw_from_stdin_sends_chunks_and_the_object_is_created(apiserver, run):
    out = run("create", "--raw", PATH, "-f", "-", stdin=config_map("streamed").decode())
    assert json.loads(out)["metadata"]["name"] == "streamed"
    assert apiserver.get("configmaps", "streamed", "default")["data"] == {"k": "v"}


def test_a_body_split_in_many_chunks_is_read_whole_and_the_connection_serves_the_next_request(apiserver):
    body = config_map("pieces", "x" * 5000)
    conn = connect(apiserver)
    conn.request(
        "POST",
        PATH,
        body=(body[i : i + 7] for i in range(0, len(body), 7)),
        headers=headers(apiserver),
        encode_chunked=True,
    )
    reply = conn.getresponse()
    assert reply.status == 201, reply.read()
    reply.read()
    conn.request("GET", PATH + "/pieces", headers=headers(apiserver))
    again = conn.getresponse()
    assert again.status == 200
    assert json.loads(again.read())["data"]["k"] == "x" * 5000


def test_a_chunk_past_the_body_limit_gets_413_before_it_is_sent_and_nothing_is_stored(apiserver):
    before = apiserver.store.rv
    answer = exchange(apiserver, f"{MAX_BODY + 1:x}\r\n".encode())  # the size line alone
    assert answer.startswith(b"HTTP/1.1 413")
    assert str(MAX_BODY).encode() in answer
    assert apiserver.store.rv == before  # nothing was written


def exchange(apiserver, body: bytes) -> bytes:
    """What the server answers a chunked POST whose body bytes are `body`, read until it closes."""
    url = urlsplit(apiserver.url)
    raw = socket.create_connection((url.hostname, url.port), timeout=30)
    if url.scheme == "https":
        ctx = ssl.create_default_context(cadata=apiserver.cert_pem.decode())
        ctx.check_hostname = False
        raw = ctx.wrap_socket(raw, server_hostname=url.hostname)
    token = apiserver.identity("admin").token
    head = (
        f"POST {PATH} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    raw.sendall(head.encode() + body)
    answer = b""
    while chunk := raw.recv(65536):
        answer += chunk
    return answer


def test_a_malformed_chunk_size_gets_400_and_the_connection_is_closed(apiserver):
    answer = exchange(apiserver, b"zz\r\n{}\r\n0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400")
    assert b"chunk size" in answer


def test_an_endless_chunk_size_line_is_refused_without_reading_it_all(apiserver):
    answer = exchange(apiserver, b"1" * 5000)
    assert answer.startswith(b"HTTP/1.1 400")
