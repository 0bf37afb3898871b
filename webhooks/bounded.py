"""Bounded decoding of request bodies: size, encoding and nesting depth are checked before JSON is built.

`json.loads` recurses once per nesting level (a body of `[` × 2000 is a RecursionError), and whatever
it builds is walked again by validation and by the reply encoder. So the depth is measured first,
without recursion (`mig.jsontext`). A lone surrogate escape (`"\\ud800"`: valid JSON, no Unicode
character) decodes to U+FFFD, as kube-apiserver decodes it, so no reply or log line fails to encode.
"""

from __future__ import annotations

from typing import Any

from mig.jsontext import loads, nesting_depth_exceeds

MAX_DEPTH = 64  # a pod is about 10 levels deep; AdmissionReview adds 3


class BadBody(ValueError):
    """A body we will not decode; the message says why (size, encoding, depth, or not JSON)."""


def decode_json(body: bytes, limit_bytes: int, max_depth: int = MAX_DEPTH) -> Any:
    """A JSON document from a body of at most `limit_bytes` UTF-8 bytes nested at most `max_depth` deep."""
    if len(body) > limit_bytes:
        raise BadBody(f"body is {len(body)} bytes; the limit is {limit_bytes}")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BadBody(f"body is not UTF-8 (byte {error.start})") from None
    if nesting_depth_exceeds(body, max_depth):  # the bytes: no second encoding of the text
        raise BadBody(f"body nests deeper than {max_depth} levels (or its brackets do not balance)")
    try:
        return loads(text)  # lone surrogate escapes become U+FFFD, as in kube-apiserver
    except (ValueError, RecursionError) as error:
        raise BadBody(f"body is not JSON: {str(error)[:200]}") from None
