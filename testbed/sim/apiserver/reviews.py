"""Access and identity reviews: what `kubectl auth can-i` and `kubectl auth whoami` ask.

The simulated API server authenticates callers (bearer tokens) but does not enforce RBAC: every
request it is sent is served. Its reviews say exactly that: an access review is allowed with a
reason that names the missing enforcement, a rules review lists every verb on every resource, and a
self review returns the caller's user info. The bodies are validated as kube-apiserver validates
them (exactly one of resourceAttributes or nonResourceAttributes), and never stored.
"""

from __future__ import annotations

from typing import Any

from sim.apiserver.errors import ApiError, invalid
from sim.apiserver.identities import Identity

AUTHORIZATION = "authorization.k8s.io"
AUTHENTICATION = "authentication.k8s.io"
REASON = "the simulated API server does not enforce RBAC: every request is served"
# plural -> kind; all are create-only and answered at once
KINDS = {
    "selfsubjectaccessreviews": "SelfSubjectAccessReview",
    "subjectaccessreviews": "SubjectAccessReview",
    "localsubjectaccessreviews": "LocalSubjectAccessReview",
    "selfsubjectrulesreviews": "SelfSubjectRulesReview",
    "selfsubjectreviews": "SelfSubjectReview",
}


def _spec(kind: str, body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ApiError(400, f"the body of a {kind} must be a JSON object")
    spec = body.get("spec")
    if spec is None:
        return {}
    if not isinstance(spec, dict):
        raise ApiError(400, f"spec of a {kind} must be an object")
    return spec


def _access(kind: str, group: str, spec: dict[str, Any], namespace: str) -> dict[str, Any]:
    given = [k for k in ("resourceAttributes", "nonResourceAttributes") if spec.get(k) is not None]
    if len(given) != 1:
        raise invalid(
            kind,
            group,
            "",
            "spec.resourceAttributes",
            "Invalid value: exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )
    attrs = spec.get("resourceAttributes")
    if kind == "LocalSubjectAccessReview" and isinstance(attrs, dict) and attrs.get("namespace") != namespace:
        raise invalid(
            kind,
            group,
            "",
            "spec.resourceAttributes.namespace",
            f"Invalid value: {attrs.get('namespace')!r}: must match metadata.namespace",
        )
    if kind in ("SubjectAccessReview", "LocalSubjectAccessReview") and not (
        spec.get("user") or spec.get("groups")
    ):
        raise invalid(
            kind, group, "", "spec.user", 'Invalid value: "": at least one of user or group must be specified'
        )
    return {"allowed": True, "reason": REASON}


def answer(plural: str, user: Identity, namespace: str, body: Any) -> dict[str, Any]:
    """The review `body` asks for, answered for `user` (201 Created, as kube-apiserver replies)."""
    kind = KINDS[plural]
    group = AUTHENTICATION if kind == "SelfSubjectReview" else AUTHORIZATION
    spec = _spec(kind, body)
    out: dict[str, Any] = {
        "kind": kind,
        "apiVersion": f"{group}/v1",
        "metadata": {"creationTimestamp": None, **({"namespace": namespace} if namespace else {})},
    }
    if kind == "SelfSubjectReview":
        out["status"] = {"userInfo": user.user_info()}
        return out
    out["spec"] = spec
    if kind == "SelfSubjectRulesReview":
        out["status"] = {
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": False,
        }
        return out
    out["status"] = _access(kind, group, spec, namespace)
    return out
