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

from pydantic import BaseModel, ConfigDict, StrictBool

from webhooks.bounded import BadBody, decode_json
from webhooks.objects import Name, ObjectError, Text, check

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


class _Envelope(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _Kind(_Envelope):
    kind: Name | None = None


class _Resource(_Envelope):
    resource: Name | None = None


class _User(_Envelope):
    username: Text | None = None


class _Request(_Envelope):
    uid: Name | None = None
    operation: Name | None = None
    kind: _Kind | None = None
    resource: _Resource | None = None
    subResource: Name | None = None
    namespace: Name | None = None
    name: Name | None = None
    userInfo: _User | None = None
    object: dict[str, Any] | None = None
    oldObject: dict[str, Any] | None = None
    dryRun: StrictBool | None = None


class _Review(_Envelope):
    apiVersion: Name | None = None
    kind: Name | None = None
    request: _Request | None = None


def parse_review(body: bytes) -> Review:
    """Parse an AdmissionReview body; raise BadReview naming the field on anything malformed."""
    try:
        doc = decode_json(body, MAX_BODY_BYTES)
    except BadBody as error:
        raise BadReview(str(error)) from None
    if not isinstance(doc, dict):
        raise BadReview("body must be a JSON object (an AdmissionReview)")
    try:
        env = check(_Review, doc, "")
    except ObjectError as error:
        raise BadReview(f"{error.path.lstrip('.')}: {error.problem}") from None
    if env.apiVersion not in API_VERSIONS:
        raise BadReview(
            f"apiVersion must be one of {', '.join(API_VERSIONS)}, got {str(env.apiVersion)[:64]!r}"
        )
    if env.kind != "AdmissionReview":
        raise BadReview(f"kind must be AdmissionReview, got {str(env.kind)[:64]!r}")
    request = env.request
    if request is None:
        raise BadReview("request is missing: an AdmissionReview from the apiserver carries `request`")
    if not request.uid:
        raise BadReview("request.uid is missing; it must be echoed in the reply")
    return Review(
        api_version=env.apiVersion,
        uid=request.uid,
        operation=request.operation or "",
        kind=(request.kind.kind if request.kind else None) or "",
        resource=(request.resource.resource if request.resource else None) or "",
        sub_resource=request.subResource or "",
        namespace=request.namespace or "",
        name=request.name or "",
        username=(request.userInfo.username if request.userInfo else None) or "",
        object=request.object,
        old_object=request.oldObject,
        dry_run=bool(request.dryRun),
    )


def encode_patch(ops: list[dict[str, Any]]) -> str:
    """A JSON Patch as the wire wants it: standard base64 (with padding) of the JSON bytes."""
    return base64.b64encode(json.dumps(ops, separators=(",", ":")).encode()).decode()


def response(review: Review, decision: Decision) -> dict[str, Any]:
    """The reply envelope, in the caller's API version with its uid."""
    body: dict[str, Any] = {"uid": review.uid, "allowed": decision.allowed}
    if not decision.allowed:
        body["status"] = {
            "code": decision.code,
            "message": decision.message,
            "reason": "Forbidden" if decision.code == 403 else "BadRequest",
            "status": "Failure",
        }
    if decision.patch:
        body["patch"] = encode_patch(decision.patch)
        body["patchType"] = "JSONPatch"
    if decision.warnings:
        body["warnings"] = list(decision.warnings)
    return {"apiVersion": review.api_version, "kind": "AdmissionReview", "response": body}


def pointer(*parts: str | int) -> str:
    """An RFC 6901 JSON Pointer: `~` becomes `~0` first, then `/` becomes `~1`."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)
