"""Content negotiation as kube-apiserver does it, for a server that speaks JSON only.

kube-apiserver serves JSON, YAML and protobuf; this simulation decodes and encodes JSON alone. A
client that sends a body it cannot decode gets what kube-apiserver answers for an unknown body
format (415 UnsupportedMediaType, listing what it accepts); a client whose Accept names nothing it
can produce gets 406 NotAcceptable. client-go lists `application/json` after protobuf in Accept, so
its reads are served in JSON. kubectl's typed clients send protobuf bodies and do not retry in JSON
on a 415, so the few kinds they create are decoded (protobuf.py); other protobuf bodies get 415.
"""

from __future__ import annotations

from functools import lru_cache

from sim.apiserver.errors import ApiError

JSON = "application/json"
# What a body may be in. Patches carry their own media types (patches.py).
PROTOBUF = "application/vnd.kubernetes.protobuf"
DECODABLE = (JSON, PROTOBUF)
ENCODABLE = (JSON,)


@lru_cache(maxsize=64)  # clients send the same few Accept headers on every request
def _media_types(header: str) -> tuple[tuple[str, dict[str, str]], ...]:
    """(media type, parameters) of each entry of an Accept header; read-only (shared)."""
    out = []
    for part in header.split(","):
        fields = [f.strip() for f in part.split(";")]
        if not fields[0]:
            continue
        params = {k.strip(): v.strip() for k, _, v in (f.partition("=") for f in fields[1:])}
        out.append((fields[0].lower(), params))
    return tuple(out)


def body_media_type(content_type: str) -> str:
    """The media type of a request body, or 415 when it is not one this server decodes."""
    kind = (content_type.split(";")[0].strip().lower()) or JSON
    if kind not in DECODABLE:
        raise ApiError(
            415,
            f"the body of the request was in an unknown format - accepted media types "
            f"include: {', '.join(DECODABLE)}",
            "UnsupportedMediaType",
        )
    return kind


def accepts_json(accept: str) -> bool:
    """True when the Accept header allows JSON (no header, */*, application/*, application/json)."""
    types = _media_types(accept)
    if not types:
        return True
    return any(t in ("*/*", "application/*", JSON) for t, _ in types)


def check_accept(accept: str) -> None:
    """406 when the Accept header names only media types this server cannot produce."""
    if not accepts_json(accept):
        raise ApiError(
            406, f"only the following media types are accepted: {', '.join(ENCODABLE)}", "NotAcceptable"
        )


def wants_table(accept: str) -> bool:
    """True when the client asks for a meta.k8s.io Table (kubectl get) before any plain type."""
    for kind, params in _media_types(accept):
        if params.get("as") == "Table" and kind == JSON:
            return True
        if kind in (JSON, "*/*", "application/*") and "as" not in params:
            return False
    return False
