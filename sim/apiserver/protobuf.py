"""Decoding the Kubernetes protobuf bodies kubectl sends, for the few kinds it sends them for.

kubectl 1.35's typed clients (`kubectl create namespace|configmap|secret|serviceaccount`) POST
`application/vnd.kubernetes.protobuf` and do not retry in JSON when the server answers 415, so
kube-apiserver's behaviour a client can tell is that these verbs work. The wire format (as
k8s.io/apimachinery's protobuf serializer writes it): the 4-byte magic `k8s\\0`, then a
`runtime.Unknown` {typeMeta{apiVersion, kind}, raw, contentEncoding, contentType} whose `raw` is
the object's own message. Field numbers below are those of k8s.io/api core/v1 and
k8s.io/apimachinery meta/v1 `generated.proto`. Kinds outside this table get 415 (the client can
send JSON instead); fields outside it are skipped, as protobuf decoders skip unknown fields.

Hostile input: every length is checked against what is left of the buffer, varints are at most 10
bytes, and the schema has no recursive message, so nesting is bounded.
"""

from __future__ import annotations

import base64
import time
from typing import Any

from sim.apiserver.errors import ApiError

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"

# message -> field number -> (JSON name, type); a type is a scalar, "map:<value>", "[]<type>" or a
# message name.
_F = dict[int, tuple[str, str]]
SCHEMA: dict[str, _F] = {
    "Unknown": {1: ("typeMeta", "TypeMeta"), 2: ("raw", "raw"), 3: ("contentEncoding", "string"),
                4: ("contentType", "string")},
    "TypeMeta": {1: ("apiVersion", "string"), 2: ("kind", "string")},
    "Time": {1: ("seconds", "int"), 2: ("nanos", "int")},
    "ObjectMeta": {1: ("name", "string"), 2: ("generateName", "string"), 3: ("namespace", "string"),
                   5: ("uid", "string"), 6: ("resourceVersion", "string"), 7: ("generation", "int"),
                   8: ("creationTimestamp", "time"), 9: ("deletionTimestamp", "time"),
                   10: ("deletionGracePeriodSeconds", "int"), 11: ("labels", "map:string"),
                   12: ("annotations", "map:string"), 13: ("ownerReferences", "[]OwnerReference"),
                   14: ("finalizers", "[]string")},
    "OwnerReference": {5: ("apiVersion", "string"), 1: ("kind", "string"), 3: ("name", "string"),
                       4: ("uid", "string"), 6: ("controller", "bool"), 7: ("blockOwnerDeletion", "bool")},
    "ObjectReference": {1: ("kind", "string"), 2: ("namespace", "string"), 3: ("name", "string"),
                        4: ("uid", "string"), 5: ("apiVersion", "string"), 6: ("resourceVersion", "string"),
                        7: ("fieldPath", "string")},
    "LocalObjectReference": {1: ("name", "string")},
    "Namespace": {1: ("metadata", "ObjectMeta"), 2: ("spec", "NamespaceSpec")},
    "NamespaceSpec": {1: ("finalizers", "[]string")},
    "ConfigMap": {1: ("metadata", "ObjectMeta"), 2: ("data", "map:string"), 3: ("binaryData", "map:bytes"),
                  4: ("immutable", "bool")},
    "Secret": {1: ("metadata", "ObjectMeta"), 2: ("data", "map:bytes"), 3: ("type", "string"),
               4: ("stringData", "map:string"), 5: ("immutable", "bool")},
    "ServiceAccount": {1: ("metadata", "ObjectMeta"), 2: ("secrets", "[]ObjectReference"),
                       3: ("imagePullSecrets", "[]LocalObjectReference"),
                       4: ("automountServiceAccountToken", "bool")},
}
# (apiVersion, kind) -> top-level message
KINDS = {("v1", "Namespace"): "Namespace", ("v1", "ConfigMap"): "ConfigMap", ("v1", "Secret"): "Secret",
         ("v1", "ServiceAccount"): "ServiceAccount"}


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
            value, pos = buf[pos:pos + length], pos + length
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if pos + size > len(buf):
                raise ProtobufError(f"field {number}: truncated fixed-size value")
            value, pos = int.from_bytes(buf[pos:pos + size], "little"), pos + size
        else:
            raise ProtobufError(f"field {number}: unsupported wire type {wire}")
        out.append((number, wire, value))
    return out


def _scalar(kind: str, wire: int, value: Any) -> Any:
    if kind in ("string", "bytes", "raw") or kind in SCHEMA or kind == "time" or kind.startswith("map:"):
        if wire != 2:
            raise ProtobufError(f"expected a length-delimited {kind}, got wire type {wire}")
    elif wire != 0:
        raise ProtobufError(f"expected a varint {kind}, got wire type {wire}")
    if kind == "string":
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtobufError(f"a string is not UTF-8: {exc}") from exc
    if kind == "bytes":
        return base64.b64encode(value).decode()
    if kind == "raw":
        return value
    if kind == "int":
        return value - (1 << 64) if value >= 1 << 63 else value
    if kind == "bool":
        return bool(value)
    if kind == "time":
        t = decode_message("Time", value)
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t["seconds"])) if t.get("seconds") else None
    return decode_message(kind, value)


def decode_message(name: str, buf: bytes) -> dict[str, Any]:
    schema = SCHEMA[name]
    out: dict[str, Any] = {}
    for number, wire, value in _fields(buf):
        if number not in schema:
            continue
        field, kind = schema[number]
        if kind.startswith("map:"):
            if wire != 2:
                raise ProtobufError(f"{name}.{field}: a map entry must be length-delimited")
            entry = {n: (w, v) for n, w, v in _fields(value)}
            k = _scalar("string", *entry.get(1, (2, b"")))
            out.setdefault(field, {})[k] = _scalar(kind[4:], *entry.get(2, (2, b"")))
        elif kind.startswith("[]"):
            out.setdefault(field, []).append(_scalar(kind[2:], wire, value))
        else:
            out[field] = _scalar(kind, wire, value)
    # Go writes every string and number; its JSON omits the empty ones (bools are pointers: kept).
    return {k: v for k, v in out.items() if not _empty(v)}


def _empty(value: Any) -> bool:
    return value is None or value == "" or value == {} or (type(value) is int and value == 0)


def decode(body: bytes, api_version: str, kind: str) -> dict[str, Any]:
    """The JSON form of a protobuf request body for `kind`; 415 for a kind this server cannot decode,
    400 for a body that is not a well-formed Kubernetes protobuf message."""
    if not body.startswith(MAGIC):
        raise ApiError(400, "the protobuf request body does not start with the Kubernetes magic prefix "
                            "'k8s\\x00'")
    try:
        envelope = decode_message("Unknown", body[len(MAGIC):])
        meta = envelope.get("typeMeta") or {}
        sent = (meta.get("apiVersion", ""), meta.get("kind", ""))
        message = KINDS.get(sent)
        if message is None or sent != (api_version, kind):
            raise ApiError(415, f"the simulated API server decodes protobuf bodies only for "
                                f"{', '.join(k for _, k in KINDS)} (this one is "
                                f"{sent[1] or 'untyped'} {sent[0]}); send it as application/json",
                           "UnsupportedMediaType")
        obj = decode_message(message, envelope.get("raw", b""))
    except ProtobufError as exc:
        raise ApiError(400, f"the protobuf request body is malformed: {exc}") from exc
    return {"apiVersion": sent[0], "kind": sent[1], **obj}
