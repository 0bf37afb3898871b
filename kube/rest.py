"""JSON requests on the official client's own transport, without its generated method layer.

A generated API method validates every argument (pydantic), serializes its parameters and resolves
the host and the environment's proxies again on every call: CPU that the scheduler extender pays
twice per pod on its bind path (node lock, Binding).
`JsonRequests` sends the same request on the same urllib3 pool manager the `ApiClient` built from
its Configuration (TLS, client certificates, proxy, retries), with the same authentication
(`ApiClient.update_params_for_auth`: bearer tokens), and reports a failure as the same `KubeError`
as every other call (`kube.errors.translated`).

Two costs of the client's own path are paid less often, not skipped:
- authentication: the client runs its refresh hook (re-read an expired token file, an exec plugin's
  expiry) on every call, and the hook re-assigns the host, which scans the whole environment for
  proxies; here the headers it yields are kept for `AUTH_REUSE` seconds and dropped at
  once on a 401, so a rotated token is picked up at most that much later than the client would;
- the pool: without a proxy, the request goes straight to the host's connection pool, looked up
  once and kept (the pool manager normalises the pool's key on every lookup); a pool the manager has
  closed meanwhile (`clear`, or evicted) is looked up again, before anything is sent. With a proxy,
  every request goes through the pool manager as before.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any
from urllib.parse import quote

import urllib3
from kubernetes import client
from urllib3.exceptions import ClosedPoolError

from kube.errors import KubeError, from_status, status_message, translated

JSON = "application/json"
AUTH_REUSE = 1.0  # seconds the authentication headers of one refresh serve every request


def json_object(what: str, answer: object) -> dict[str, Any]:
    """An answer that must be one JSON object (an object read, written or patched); KubeError naming
    the call when the API server answered anything else."""
    if not isinstance(answer, dict):
        raise KubeError(f"{what}: the API server answered {type(answer).__name__}, not a JSON object")
    return answer


def segment(name: str) -> str:
    """A name as one URL path segment (escaped as the generated client escapes path parameters)."""
    return quote(name, safe="")


class JsonRequests:
    """`request(what, method, path, body)`: the decoded JSON answer, or a KubeError naming `what`."""

    def __init__(
        self, api_client: client.ApiClient, timeout: float = 10.0, clock: Any = time.monotonic
    ) -> None:
        self.api_client = api_client
        self.timeout = urllib3.Timeout(total=timeout)
        self._host = api_client.configuration.host.rstrip("/")
        self._pool = api_client.rest_client.pool_manager
        url = urllib3.util.parse_url(self._host)
        self._origin = (url.host, url.port, url.scheme or "http")
        self._base = url.path or ""  # a host URL may carry a path prefix
        self._direct = not isinstance(self._pool, urllib3.ProxyManager)
        self._host_pool: urllib3.HTTPConnectionPool | None = None  # the host's pool, when direct
        self._clock = clock
        self._auth_lock = threading.Lock()
        self._auth: tuple[float, dict[str, str]] | None = None  # (when refreshed, the headers it gave)

    def _auth_headers(self, path: str, method: str) -> dict[str, str]:
        """The authentication headers, from the client's own refresh at most AUTH_REUSE seconds ago."""
        now = self._clock()
        with self._auth_lock:
            cached = self._auth
            if cached is not None and now - cached[0] < AUTH_REUSE:
                return cached[1]
        headers: dict[str, str] = {}
        self.api_client.update_params_for_auth(headers, None, ["BearerToken"], path, method, None)
        with self._auth_lock:
            self._auth = (now, headers)
        return headers

    def _forget_auth(self) -> None:
        with self._auth_lock:
            self._auth = None

    def request(
        self,
        what: str,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = JSON,
        decode: bool = True,
    ) -> Any:
        """Send `body` as JSON to `path` (already escaped: `segment`); the answer decoded, or with
        `decode=False` read and dropped (the connection goes back to the pool either way)."""
        headers = {**self.api_client.default_headers, "Accept": JSON, **self._auth_headers(path, method)}
        if self.api_client.cookie:
            headers["Cookie"] = self.api_client.cookie
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body, separators=(",", ":")).encode()
        with translated(what):
            if self._direct:
                reply = self._direct_request(method, path, data, headers)
            else:
                reply = self._pool.request(
                    method, self._host + path, body=data, headers=headers, timeout=self.timeout
                )
            if reply.status == 401:
                self._forget_auth()  # the next call asks the client for its credentials again
            if not 200 <= reply.status < 300:
                raise from_status(what, reply.status, reply.reason or "", status_message(reply.data))
            return json.loads(reply.data) if decode and reply.data else None

    def _direct_request(
        self, method: str, path: str, data: bytes | None, headers: dict[str, str]
    ) -> urllib3.BaseHTTPResponse:
        """The request on the host's connection pool (kept; looked up again once it is closed)."""
        pool = self._host_pool or self._lookup_pool()
        try:
            return self._send(pool, method, path, data, headers)
        except ClosedPoolError:  # raised before anything is sent: safe to send on the pool now open
            return self._send(self._lookup_pool(), method, path, data, headers)

    def _lookup_pool(self) -> urllib3.HTTPConnectionPool:
        pool: urllib3.HTTPConnectionPool = self._pool.connection_from_host(*self._origin)
        self._host_pool = pool
        return pool

    def _send(
        self,
        pool: urllib3.HTTPConnectionPool,
        method: str,
        path: str,
        data: bytes | None,
        headers: dict[str, str],
    ) -> urllib3.BaseHTTPResponse:
        return pool.urlopen(
            method,
            self._base + path,
            body=data,
            headers=headers,
            timeout=self.timeout,
            assert_same_host=False,
            redirect=False,
        )
