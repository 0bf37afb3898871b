"""JSON requests on the official client's own transport, without its generated method layer.

A generated API method validates every argument (pydantic), serializes its parameters and resolves
the host and the environment's proxies again on every call: a few hundred microseconds of CPU per
call, which the scheduler extender pays twice per pod on its bind path (node lock, Binding).
`JsonRequests` sends the same request on the same urllib3 pool manager the `ApiClient` built from
its Configuration (TLS, client certificates, proxy, retries), with the same authentication
(`ApiClient.update_params_for_auth`: bearer tokens, refreshed when the client would refresh them),
and reports a failure as the same `KubeError` as every other call (`kube.errors.translated`).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import urllib3
from kubernetes import client

from kube.errors import from_status, status_message, translated

JSON = "application/json"


def segment(name: str) -> str:
    """A name as one URL path segment (escaped as the generated client escapes path parameters)."""
    return quote(name, safe="")


class JsonRequests:
    """`request(what, method, path, body)`: the decoded JSON answer, or a KubeError naming `what`."""

    def __init__(self, api_client: client.ApiClient, timeout: float = 10.0):
        self.api_client = api_client
        self.timeout = urllib3.Timeout(total=timeout)
        self._host = api_client.configuration.host.rstrip("/")
        self._pool = api_client.rest_client.pool_manager

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
        headers = {**self.api_client.default_headers, "Accept": JSON}
        if self.api_client.cookie:
            headers["Cookie"] = self.api_client.cookie
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body, separators=(",", ":")).encode()
        self.api_client.update_params_for_auth(headers, None, ["BearerToken"], path, method, body)
        with translated(what):
            reply = self._pool.request(
                method, self._host + path, body=data, headers=headers, timeout=self.timeout
            )
            if not 200 <= reply.status < 300:
                raise from_status(what, reply.status, reply.reason or "", status_message(reply.data))
            return json.loads(reply.data) if decode and reply.data else None
