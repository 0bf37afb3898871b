"""One error hierarchy for every API call: what the API server said, or that it said nothing.

The official client raises `ApiException` for a non-2xx answer and urllib3/OSError exceptions when
there is no answer; `translated(what)` turns all of them, in this one place, into a `KubeError`
whose class says what a caller can do about it:

- `NotFound` (404): the object does not exist; `Conflict` (409): it changed since it was read
  (re-read and decide again) or already exists; `Gone` (410): a watch's resourceVersion is too old
  (list again); `Forbidden` (401/403): RBAC or credentials, retrying will not help;
  `Invalid` (400/422): the request was refused as malformed;
- `Unavailable`: no usable answer (connection refused, timeout, TLS, 429 or 5xx): retry later.

The message names the call and carries the Status message the server sent (capped), never the
request body.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
import time
from collections.abc import Iterator

import urllib3
from kubernetes.client.exceptions import ApiException

MESSAGE_CAP = 300  # characters of the server's Status message kept in our message


class KubeError(RuntimeError):
    """A Kubernetes API call failed; `status` is the HTTP status (None: no answer)."""

    def __init__(self, message: str, status: int | None = None, reason: str = "") -> None:
        self.status = status
        self.reason = reason
        super().__init__(message)


class NotFound(KubeError):
    """HTTP 404: no such object."""


class Conflict(KubeError):
    """HTTP 409: the object changed since we read it (or already exists): re-read and retry."""


class Gone(KubeError):
    """HTTP 410: the resourceVersion is older than the server's history: list again."""


class Forbidden(KubeError):
    """HTTP 401/403: the credentials or RBAC do not allow the call."""


class Invalid(KubeError):
    """HTTP 400/422: the server refused the request as malformed."""


class Unavailable(KubeError):
    """No usable answer: connection refused, timeout, TLS failure, or 429/5xx."""


_BY_STATUS: dict[int, type[KubeError]] = {
    400: Invalid,
    401: Forbidden,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: Unavailable,
}


def error_class(status: int | None) -> type[KubeError]:
    """The KubeError subclass for an HTTP status (None or 5xx: Unavailable)."""
    if status is None or status >= 500:
        return Unavailable
    return _BY_STATUS.get(status, KubeError)


def status_message(body: object) -> str:
    """The `message` of a Status body (bytes or text), capped; the raw text when it is not one."""
    if isinstance(body, bytes):
        body = body[: MESSAGE_CAP * 4].decode("utf-8", "replace")
    if not isinstance(body, str) or not body:
        return ""
    try:
        doc = json.loads(body)
    except ValueError:
        return body[:MESSAGE_CAP]
    if not isinstance(doc, dict):
        return body[:MESSAGE_CAP]
    message = doc.get("message")
    text = message if isinstance(message, str) else body
    # a refused eviction says why only in its causes (the DisruptionBudget that has none left)
    details = doc.get("details")
    causes = details.get("causes") if isinstance(details, dict) else None
    extra = [c["message"] for c in causes or () if isinstance(c, dict) and isinstance(c.get("message"), str)]
    return "; ".join([text, *extra])[:MESSAGE_CAP]


def from_status(what: str, status: object, reason: str = "", message: str = "") -> KubeError:
    """The KubeError for an HTTP status (a watch's ERROR event carries one too; a status that is
    not a number counts as no answer)."""
    if not isinstance(status, int) or isinstance(status, bool):
        status = None
    text = f"{what}: HTTP {status} {reason}".strip()
    if message:
        text = f"{text}: {message}"
    return error_class(status)(text, status, reason)


def from_api_exception(what: str, error: ApiException) -> KubeError:
    if not error.status:  # the client raises ApiException(status=0) for some transport failures
        return Unavailable(f"{what}: {error.reason or error}")
    return from_status(what, error.status, str(error.reason or ""), status_message(error.body))


# what the official client lets through when no HTTP answer arrives
NO_ANSWER = (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError)


_spent = threading.local()


def api_seconds() -> float:
    """Seconds this thread has spent inside API calls (in `translated`) since it started: a caller
    subtracts two readings to tell its own work from the round trips it waited for."""
    return float(getattr(_spent, "seconds", 0.0))


@contextlib.contextmanager
def translated(what: str) -> Iterator[None]:
    """Run an API call, turning whatever the client raises into a KubeError (`what` names it)."""
    started = time.perf_counter()
    try:
        yield
    except KubeError:
        raise
    except ApiException as error:
        raise from_api_exception(what, error) from None
    except NO_ANSWER as error:
        raise Unavailable(f"{what}: {type(error).__name__}: {str(error)[:MESSAGE_CAP]}") from None
    except (ValueError, TypeError) as error:  # a body that is not JSON (or none at all)
        raise KubeError(f"{what}: unreadable answer ({str(error)[:MESSAGE_CAP]})") from None
    finally:
        _spent.seconds = api_seconds() + time.perf_counter() - started
