"""Decoding the Kubernetes protobuf bodies kubectl sends, for the few kinds it sends them for.

kubectl 1.35's typed clients (`kubectl create namespace|configmap|secret|serviceaccount|deployment`)
POST `application/vnd.kubernetes.protobuf` and do not retry in JSON when the server answers 415,
so kube-apiserver's behaviour a client can tell is that these verbs work. The wire format (as
k8s.io/apimachinery's protobuf serializer writes it): the 4-byte magic `k8s\\0`, then a
`runtime.Unknown` {typeMeta{apiVersion, kind}, raw, contentEncoding, contentType} whose `raw` is
the object's own message. Field numbers and types come from Kubernetes' `generated.proto` files,
recorded in protobuf_schema.json (protobuf_schema_gen.py) for the kinds it lists; other kinds get
415 (the client can send JSON instead); unknown fields are skipped, as protobuf decoders do.

Hostile input: every length is checked against what is left of the buffer, varints are at most 10
bytes, and messages nest at most 40 deep.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

from sim.apiserver.errors import ApiError

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"

# The envelope; the objects' own messages come from protobuf_schema.json (protobuf_schema_gen.py).
ENVELOPE = {
    "Unknown": {
        "1": ["typeMeta", "optional", "TypeMeta"],
        "2": ["raw", "optional", "raw"],
        "3": ["contentEncoding", "optional", "string"],
        "4": ["contentType", "optional", "string"],
    },
    "TypeMeta": {"1": ["apiVersion", "optional", "string"], "2": ["kind", "optional", "string"]},
}
_SCHEMA = json.loads((Path(__file__).parent / "protobuf_schema.json").read_text())
MESSAGES: dict[str, dict[str, list[str]]] = {**_SCHEMA["messages"], **ENVELOPE}
KINDS: dict[str, str] = _SCHEMA["kinds"]  # "apps/v1/Deployment" -> message
_VARINTS = ("bool", "int32", "int64")
_SPECIAL = ("time", "duration", "json", "quantity", "intorstring", "stringlist")


class ProtobufError(ValueError):
    pass


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    for i in range(10):
        if pos + i >= len(buf):
            raise ProtobufError("truncated varint")
        byte = buf[pos + i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos + i + 1
        shift += 7
    raise ProtobufError("varint longer than 10 bytes")


def _fields(buf: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, raw value) in order: ints for varints/fixed, bytes for the rest."""
    out, pos = [], 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ProtobufError("field number 0")
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 2:
            length, pos = _varint(buf, pos)
            if length > len(buf) - pos:
                raise ProtobufError(f"field {number}: length {length} runs past the end of the message")
            value, pos = buf[pos : pos + length], pos + length
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if pos + size > len(buf):
                raise ProtobufError(f"field {number}: truncated fixed-size value")
            value, pos = int.from_bytes(buf[pos : pos + size], "little"), pos + size
        else:
            raise ProtobufError(f"field {number}: unsupported wire type {wire}")
        out.append((number, wire, value))
    return out


def _value(kind: str, wire: int, value: Any, depth: int) -> Any:
    if kind in _VARINTS:
        if wire != 0:
            raise ProtobufError(f"expected a varint {kind}, got wire type {wire}")
        if kind == "bool":
            return bool(value)
        return value - (1 << 64) if value >= 1 << 63 else value
    if wire != 2:
        raise ProtobufError(f"expected a length-delimited {kind}, got wire type {wire}")
    if kind == "string":
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtobufError(f"a string is not UTF-8: {exc}") from exc
    if kind == "bytes":
        return base64.b64encode(value).decode()
    if kind == "raw":
        return value
    if kind in _SPECIAL:
        return _special(kind, value)
    if kind not in MESSAGES:
        raise ProtobufError(f"no schema for message {kind}")
    if depth > 40:
        raise ProtobufError("messages nest more than 40 deep")
    return decode_message(kind, value, depth + 1)


def _special(kind: str, buf: bytes) -> Any:
    """Types whose JSON form Go writes by hand."""
    if kind == "stringlist":  # ExtraValue: a message of repeated strings, in JSON a plain list
        return [_value("string", w, v, 0) for n, w, v in _fields(buf) if n == 1]
    f = {n: v for n, _, v in _fields(buf)}
    if kind == "time":
        secs = f.get(1, 0)
        secs = secs - (1 << 64) if secs >= 1 << 63 else secs
        if not secs:
            return None
        try:
            return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(secs))
        except (OverflowError, OSError, ValueError) as exc:
            raise ProtobufError(f"a time of {secs} seconds is out of range") from exc
    if kind == "duration":
        return f"{f.get(1, 0) / 1e9:g}s"
    if kind == "quantity":
        return _value("string", 2, f.get(1, b""), 0)
    if kind == "intorstring":
        return _value("string", 2, f.get(3, b""), 0) if f.get(1) == 1 else _value("int32", 0, f.get(2, 0), 0)
    raw = f.get(1, b"")  # json: RawExtension / FieldsV1 carry JSON bytes
    try:
        return json.loads(raw) if raw else None
    except (ValueError, RecursionError) as exc:
        raise ProtobufError(f"embedded JSON is malformed: {exc}") from exc


def decode_message(name: str, buf: bytes, depth: int = 0) -> dict[str, Any]:
    schema = MESSAGES[name]
    out: dict[str, Any] = {}
    for number, wire, value in _fields(buf):
        spec = schema.get(str(number))
        if spec is None:
            continue
        field, label, kind = spec
        if label == "map":
            if wire != 2:
                raise ProtobufError(f"{name}.{field}: a map entry must be length-delimited")
            entry = {n: (w, v) for n, w, v in _fields(value)}
            key = _value("string", *entry.get(1, (2, b"")), depth)
            default = (0, 0) if kind in _VARINTS else (2, b"")
            out.setdefault(field, {})[key] = _value(kind, *entry.get(2, default), depth)
        elif label == "repeated":
            items = out.setdefault(field, [])
            if wire == 2 and kind in _VARINTS:  # packed
                pos = 0
                while pos < len(value):
                    item, pos = _varint(value, pos)
                    items.append(_value(kind, 0, item, depth))
            else:
                items.append(_value(kind, wire, value, depth))
        else:
            out[field] = _value(kind, wire, value, depth)
    # Go writes every string, number and struct; its JSON omits the empty ones. Booleans are kept:
    # the optional ones (automountServiceAccountToken, immutable) mean something when false.
    return {k: v for k, v in out.items() if not _empty(v)}


def _empty(value: Any) -> bool:
    return value is None or value == "" or value == {} or (type(value) is int and value == 0)


def decode(body: bytes, api_version: str, kind: str) -> dict[str, Any]:
    """The JSON form of a protobuf request body for `kind`; 415 for a kind this server cannot decode,
    400 for a body that is not a well-formed Kubernetes protobuf message."""
    if not body.startswith(MAGIC):
        raise ApiError(
            400, "the protobuf request body does not start with the Kubernetes magic prefix 'k8s\\x00'"
        )
    try:
        envelope = decode_message("Unknown", body[len(MAGIC) :])
        meta = envelope.get("typeMeta") or {}
        sent = (meta.get("apiVersion", ""), meta.get("kind", ""))
        message = KINDS.get(f"{sent[0]}/{sent[1]}")
        if message is None or sent != (api_version, kind):
            raise ApiError(
                415,
                f"the simulated API server decodes protobuf bodies only for "
                f"{', '.join(k.rpartition('/')[2] for k in KINDS)} (this one is "
                f"{sent[1] or 'untyped'} {sent[0]}); send it as application/json",
                "UnsupportedMediaType",
            )
        obj = decode_message(message, envelope.get("raw", b""))
    except ProtobufError as exc:
        raise ApiError(400, f"the protobuf request body is malformed: {exc}") from exc
    return {"apiVersion": sent[0], "kind": sent[1], **obj}


def decode_delete_options(body: bytes) -> dict[str, Any]:
    """A protobuf DeleteOptions body (typed clients send it under meta.k8s.io/v1 or v1)."""
    try:
        return decode(body, "meta.k8s.io/v1", "DeleteOptions")
    except ApiError as err:
        if err.code != 415:
            raise
    return decode(body, "v1", "DeleteOptions")


# ---- Encoding (for documents the server writes in protobuf, e.g. /openapi/v2) -----------------------


def encode_varint(value: int) -> bytes:
    """A non-negative int as a protobuf varint."""
    if value < 0:
        raise ValueError("only non-negative varints are encoded")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_bytes(number: int, value: bytes) -> bytes:
    """A length-delimited field (wire type 2): strings, bytes and embedded messages."""
    return encode_varint(number << 3 | 2) + encode_varint(len(value)) + value


def encode_string(number: int, value: str) -> bytes:
    return encode_bytes(number, value.encode())


def encode_bool(number: int, value: bool) -> bytes:
    return encode_varint(number << 3) + (b"\x01" if value else b"\x00")
