"""AdmissionReview on the wire (admission.k8s.io/v1 and v1beta1): parse a request, build a reply.

Two error paths, kept apart on purpose: a body that is not an AdmissionReview at all (too big, wrong
content type, not JSON, no `request`) is a *bad request* (`BadReview` → HTTP 400, the apiserver then
applies the webhook's failurePolicy); a well-formed review of an object we refuse is a *denial*
(HTTP 200 with `allowed: false`, a 4xx code and a message the user can act on).

Keys are exact: the apiserver decodes replies case-sensitively and checks (v1) that `uid`,
`apiVersion` and `kind` match what it sent.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

API_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
MAX_BODY_BYTES = 3 * 1024 * 1024


class BadReview(ValueError):
    """The body is not an AdmissionReview we can answer; the message says what is wrong."""


@dataclass(frozen=True)
class Review:
    """The parts of an AdmissionRequest dynmig decides on."""

    api_version: str
    uid: str
    operation: str
    kind: str
    resource: str
    sub_resource: str
    namespace: str
    name: str
    username: str
    object: dict[str, Any] | None
    old_object: dict[str, Any] | None
    dry_run: bool = False


@dataclass(frozen=True)
class Decision:
    """What to answer: allow (optionally with a JSON patch and warnings) or deny with a code."""

    allowed: bool
    message: str = ""
    code: int = 200
    patch: list[dict[str, Any]] = field(default_factory=list)
    warnings: tuple[str, ...] = ()
    result: str = ""  # short label for metrics: allowed, patched, denied, skipped, invalid

    @staticmethod
    def allow(message: str = "", warnings: tuple[str, ...] = (), result: str = "allowed") -> Decision:
        return Decision(True, message, 200, [], warnings, result)

    @staticmethod
    def deny(message: str, code: int = 403, result: str = "denied") -> Decision:
        return Decision(False, message, code, [], (), result)

    @staticmethod
    def patched(ops: list[dict[str, Any]], warnings: tuple[str, ...] = ()) -> Decision:
        if not ops:
            return Decision.allow(warnings=warnings)
        return Decision(True, "", 200, ops, warnings, "patched")


def check_content_type(content_type: str | None) -> None:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        raise BadReview(f"Content-Type must be application/json, got {content_type or 'nothing'!r}")


def _obj(value: Any, where: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadReview(f"request.{where} must be a JSON object")
    return value


def _str(value: Any, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadReview(f"request.{where} must be a string")
    return value


def parse_review(body: bytes) -> Review:
    """Parse an AdmissionReview body; raise BadReview naming the field on anything malformed."""
    if len(body) > MAX_BODY_BYTES:
        raise BadReview(f"body is {len(body)} bytes; the limit is {MAX_BODY_BYTES}")
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as error:
        raise BadReview(f"body is not JSON: {error}") from None
    if not isinstance(doc, dict):
        raise BadReview("body must be a JSON object (an AdmissionReview)")
    api_version = doc.get("apiVersion")
    if api_version not in API_VERSIONS:
        raise BadReview(f"apiVersion must be one of {', '.join(API_VERSIONS)}, got {api_version!r}")
    if doc.get("kind") != "AdmissionReview":
        raise BadReview(f"kind must be AdmissionReview, got {doc.get('kind')!r}")
    request = doc.get("request")
    if not isinstance(request, dict):
        raise BadReview("request is missing: an AdmissionReview from the apiserver carries `request`")
    uid = _str(request.get("uid"), "uid")
    if not uid:
        raise BadReview("request.uid is missing; it must be echoed in the reply")
    kind = request.get("kind") if isinstance(request.get("kind"), dict) else {}
    resource = request.get("resource") if isinstance(request.get("resource"), dict) else {}
    user = request.get("userInfo") if isinstance(request.get("userInfo"), dict) else {}
    return Review(
        api_version=api_version,
        uid=uid,
        operation=_str(request.get("operation"), "operation"),
        kind=_str(kind.get("kind"), "kind.kind"),
        resource=_str(resource.get("resource"), "resource.resource"),
        sub_resource=_str(request.get("subResource"), "subResource"),
        namespace=_str(request.get("namespace"), "namespace"),
        name=_str(request.get("name"), "name"),
        username=_str(user.get("username"), "userInfo.username"),
        object=_obj(request.get("object"), "object"),
        old_object=_obj(request.get("oldObject"), "oldObject"),
        dry_run=bool(request.get("dryRun")),
    )


def encode_patch(ops: list[dict[str, Any]]) -> str:
    """A JSON Patch as the wire wants it: standard base64 (with padding) of the JSON bytes."""
    return base64.b64encode(json.dumps(ops, separators=(",", ":")).encode()).decode()


def response(review: Review, decision: Decision) -> dict[str, Any]:
    """The reply envelope, in the caller's API version with its uid."""
    body: dict[str, Any] = {"uid": review.uid, "allowed": decision.allowed}
    if not decision.allowed:
        body["status"] = {"code": decision.code, "message": decision.message,
                          "reason": "Forbidden" if decision.code == 403 else "BadRequest",
                          "status": "Failure"}
    if decision.patch:
        body["patch"] = encode_patch(decision.patch)
        body["patchType"] = "JSONPatch"
    if decision.warnings:
        body["warnings"] = list(decision.warnings)
    return {"apiVersion": review.api_version, "kind": "AdmissionReview", "response": body}


def pointer(*parts: str | int) -> str:
    """An RFC 6901 JSON Pointer: `~` becomes `~0` first, then `/` becomes `~1`."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)
