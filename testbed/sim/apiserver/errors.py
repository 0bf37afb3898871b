"""API errors as the real API server returns them: a `Status` object with reason and code."""

from __future__ import annotations

from typing import Any

REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    """An error answered to the client as a `Status` with `code`, `reason` and `message`."""

    def __init__(
        self, code: int, message: str, reason: str | None = None, details: dict[str, Any] | None = None
    ):
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason if reason is not None else REASONS.get(code, "")
        self.details = details

    def status(self) -> dict[str, Any]:
        return status_object(self.code, self.message, self.reason, self.details)


def status_object(
    code: int, message: str, reason: str, details: dict[str, Any] | None = None, ok: bool = False
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if ok else "Failure",
        "code": code,
    }
    if message:
        out["message"] = message
    if reason:
        out["reason"] = reason
    if details is not None:  # an empty {} is sent: clients tell a missing route by its empty details
        out["details"] = details
    return out


def no_route() -> ApiError:
    """The 404 for a path the server does not serve (no such resource, subresource or group), as
    kube-apiserver words it: with empty details, unlike a missing object's 404 (which names it)."""
    return ApiError(404, "the server could not find the requested resource", "NotFound", {})


def _what(plural: str, group: str) -> str:
    return f"{plural}.{group}" if group else plural


def _about(code: int, reason: str, plural: str, group: str, name: str, message: str) -> ApiError:
    """An error about one named object: its StatusDetails carry name, group and kind (the plural)."""
    return ApiError(code, message, reason, {"name": name, "group": group, "kind": plural})


def not_found(plural: str, group: str, name: str) -> ApiError:
    return _about(404, "NotFound", plural, group, name, f'{_what(plural, group)} "{name}" not found')


def already_exists(plural: str, group: str, name: str) -> ApiError:
    what = _what(plural, group)
    return _about(409, "AlreadyExists", plural, group, name, f'{what} "{name}" already exists')


def forbidden(
    plural: str, group: str, name: str, message: str, reason: str = "Forbidden", code: int = 403
) -> ApiError:
    """`<resource> "<name>" is forbidden: <message>`, as apierrors.NewForbidden words it."""
    what = _what(plural, group)
    text = f'{what} "{name}" is forbidden: {message}' if name else f"{what} is forbidden: {message}"
    return _about(code, reason, plural, group, name, text)


def conflict(plural: str, group: str, name: str) -> ApiError:
    return _about(
        409,
        "Conflict",
        plural,
        group,
        name,
        f'Operation cannot be fulfilled on {_what(plural, group)} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
    )


# One field's problem: (field path, cause reason such as FieldValueInvalid, message).
Problem = tuple[str, str, str]


def invalid(kind: str, group: str, name: str, field: str, message: str) -> ApiError:
    return invalid_fields(kind, group, name, [(field, "FieldValueInvalid", message)])


def invalid_fields(kind: str, group: str, name: str, problems: list[Problem]) -> ApiError:
    """422 Invalid listing every problem, as apierrors.NewInvalid words it (one problem plain,
    several in brackets)."""
    what = f"{kind}.{group}" if group else kind
    listed = [f"{field}: {message}" for field, _, message in problems]
    text = listed[0] if len(listed) == 1 else f"[{', '.join(listed)}]"
    return ApiError(
        422,
        f'{what} "{name}" is invalid: {text}',
        "Invalid",
        {
            "name": name,
            "group": group,
            "kind": kind,
            "causes": [{"reason": r, "message": m, "field": f} for f, r, m in problems],
        },
    )


def gone(message: str) -> ApiError:
    return ApiError(410, message, "Expired")
