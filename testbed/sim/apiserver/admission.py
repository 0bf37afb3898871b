"""Admission webhooks called the way kube-apiserver calls them.

For every CREATE/UPDATE/DELETE (and pods/binding, pods/status) the registered mutating webhooks
run first, in configuration-name order, each seeing the previous one's patch; then the
ValidatingAdmissionPolicies (sim.apiserver.policies), then the validating webhooks: kube-apiserver's
plugin order. Each call is an HTTPS POST of an AdmissionReview built from the real old/new objects
and the caller's userInfo, with the server certificate verified against the webhook's `caBundle`.

A webhook's `matchConditions` (CEL, sim.apiserver.cel) are evaluated after its rules and selectors:
any false skips the webhook; all true calls it; an evaluation error with none false follows the
failurePolicy (Fail rejects with 403 Forbidden, Ignore skips the webhook).

Not simulated: `reinvocationPolicy: IfNeeded` never re-invokes; validating webhooks run one after
another rather than in parallel.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import threading
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from sim.apiserver import cel, defaults
from sim.apiserver.attributes import Attributes, object_selector_matches, rule_matches
from sim.apiserver.errors import ApiError, forbidden
from sim.apiserver.patches import PatchError, apply_json_patch
from sim.apiserver.policies import Policies
from sim.apiserver.selectors import labels_of, match_label_selector

SKIPPED_GROUPS = {"admissionregistration.k8s.io"}
OPTIONS_KIND = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}


class CallFailed(Exception):
    """The webhook could not be called or answered badly; failurePolicy decides."""


class Admission:
    def __init__(
        self,
        list_configs: Callable[[str], list[dict[str, Any]]],
        namespace_labels: Callable[[str], dict[str, str] | None],
        namespace_object: Callable[[str], dict[str, Any] | None] | None = None,
    ):
        self._list_configs = list_configs
        self._namespace_labels = namespace_labels
        self.policies = Policies(list_configs, namespace_object or (lambda ns: None), self._namespace_matches)
        self.services: dict[tuple[str, str], tuple[str, int]] = {}
        self._pool: dict[tuple, list[http.client.HTTPConnection]] = {}
        self._pool_lock = threading.Lock()
        self.calls = 0

    # ---- selection -------------------------------------------------------------------------
    def _webhooks(self, plural: str) -> list[dict[str, Any]]:
        out = []
        for cfg in sorted(self._list_configs(plural), key=lambda c: c["metadata"]["name"]):
            out.extend(cfg.get("webhooks") or [])
        return out

    def _matches(self, hook: dict[str, Any], a: Attributes) -> bool:
        if not any(rule_matches(r, a) for r in hook.get("rules") or []):
            return False
        ns_sel = hook.get("namespaceSelector")
        if ns_sel and not self._namespace_matches(ns_sel, a):
            return False
        return object_selector_matches(hook.get("objectSelector"), a)

    def _namespace_matches(self, ns_sel: dict[str, Any], a: Attributes) -> bool:
        if a.rt.plural == "namespaces" and not a.rt.group:
            return match_label_selector(ns_sel, labels_of(a.obj or a.old))
        if a.rt.namespaced:
            return match_label_selector(ns_sel, self._namespace_labels(a.namespace) or {})
        return True  # other cluster-scoped objects are never skipped by a namespaceSelector

    # ---- the chain -------------------------------------------------------------------------
    def admit(self, a: Attributes, phase: str = "both") -> tuple[dict[str, Any] | None, list[str]]:
        """Run mutating then validating webhooks (or one `phase`: "mutate"/"validate"); return the
        (possibly patched) object and the warnings.

        Raises ApiError exactly as the apiserver answers a denial or a failed call.
        """
        warnings: list[str] = []
        if a.rt.group in SKIPPED_GROUPS:
            return a.obj, warnings
        for hook in self._webhooks("mutatingwebhookconfigurations") if phase != "validate" else ():
            if self._matches(hook, a) and self._conditions_hold(hook, a):
                self._run(hook, a, warnings, mutating=True)
        if phase != "mutate":
            warnings.extend(self.policies.validate(a, request_attributes(a)))
        for hook in self._webhooks("validatingwebhookconfigurations") if phase != "mutate" else ():
            if self._matches(hook, a) and self._conditions_hold(hook, a):
                self._run(hook, a, warnings, mutating=False)
        return a.obj, warnings

    def _conditions_hold(self, hook: dict[str, Any], a: Attributes) -> bool:
        """The webhook's matchConditions: any false skips it, all true calls it, and errors with
        none false follow its failurePolicy (Fail: 403 Forbidden, Ignore: skip)."""
        conditions = hook.get("matchConditions") or []
        if not conditions:
            return True
        activation = {"object": a.obj, "oldObject": a.old, "request": cel.request_of(request_attributes(a))}
        errors: list[str] = []
        for cond in conditions:
            try:
                if not cel.evaluate_bool(str(cond.get("expression", "")), activation):
                    return False
            except cel.CelError as exc:
                errors.append(str(exc))
        if not errors:
            return True
        if (hook.get("failurePolicy") or "Fail") == "Ignore":
            return False
        raise forbidden(
            a.rt.plural,
            a.rt.group,
            a.name or _name_of(a),
            errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]",
        )

    def _run(self, hook: dict[str, Any], a: Attributes, warnings: list[str], mutating: bool) -> None:
        name = hook.get("name", "")
        try:
            version, response = self._call(hook, a)
            self._check(version, response, mutating)
        except CallFailed as exc:
            if (hook.get("failurePolicy") or "Fail") == "Ignore":
                return
            raise ApiError(
                500, f'Internal error occurred: failed calling webhook "{name}": {exc}', "InternalError"
            ) from exc
        warnings.extend(str(w) for w in response.get("warnings") or [])
        if not response.get("allowed"):
            raise _denial(name, response.get("status") or {})
        if mutating and response.get("patch"):
            try:
                ops = json.loads(base64.b64decode(response["patch"]))
                a.obj = apply_json_patch(a.obj, ops)
                if a.rt.key == ("", "pods") and isinstance(a.obj, dict):
                    defaults.pod(a.obj)  # the patched object is decoded, so defaulted, again
            except (ValueError, PatchError) as exc:
                raise ApiError(
                    500,
                    f'Internal error occurred: JSON patch from webhook "{name}" could not be applied: {exc}',
                    "InternalError",
                ) from exc

    @staticmethod
    def _check(version: str, response: dict[str, Any], mutating: bool) -> None:
        if not mutating and ("patch" in response or "patchType" in response):
            raise CallFailed("received invalid webhook response: validating webhook may not return a patch")
        if mutating and version == "v1":
            has_patch, has_type = bool(response.get("patch")), "patchType" in response
            if has_patch != has_type:
                raise CallFailed(
                    "received invalid webhook response: webhook returned "
                    "patch without patchType or patchType without patch"
                )
            if has_type and response["patchType"] != "JSONPatch":
                raise CallFailed(
                    "received invalid webhook response: webhook returned invalid "
                    f"patchType: {response['patchType']!r}"
                )

    def _review(self, version: str, a: Attributes) -> dict[str, Any]:
        request = {"uid": str(uuid.uuid4()), **request_attributes(a), "object": a.obj, "oldObject": a.old}
        return {"apiVersion": f"admission.k8s.io/{version}", "kind": "AdmissionReview", "request": request}

    def _call(self, hook: dict[str, Any], a: Attributes) -> tuple[str, dict[str, Any]]:
        versions = hook.get("admissionReviewVersions") or ["v1beta1"]
        version = next((v for v in versions if v in ("v1", "v1beta1")), None)
        if version is None:
            raise CallFailed(f"webhook does not accept known AdmissionReview versions {versions}")
        review = self._review(version, a)
        timeout = float(hook.get("timeoutSeconds") or 10)
        host, port, path, sni, url = self._endpoint(hook.get("clientConfig") or {})
        ctx = _tls_context((hook.get("clientConfig") or {}).get("caBundle"))
        self.calls += 1
        try:
            status, body = self._post(host, port, path, sni, ctx, json.dumps(review).encode(), timeout)
        except (OSError, http.client.HTTPException) as exc:
            raise CallFailed(
                f'failed to call webhook: Post "{url}?timeout={int(timeout)}s": {_describe(exc)}'
            ) from exc
        if status < 200 or status >= 300:
            raise CallFailed(f"failed to call webhook: the server responded with HTTP {status}")
        try:
            reply = json.loads(body)
        except ValueError as exc:
            raise CallFailed(f"received invalid webhook response: {exc}") from exc
        response = reply.get("response") if isinstance(reply, dict) else None
        if not isinstance(response, dict):
            raise CallFailed("received invalid webhook response: response was absent")
        if version == "v1":
            if reply.get("apiVersion") != "admission.k8s.io/v1" or reply.get("kind") != "AdmissionReview":
                raise CallFailed(
                    "received invalid webhook response: expected webhook response of "
                    "admission.k8s.io/v1, Kind=AdmissionReview, got "
                    f"{reply.get('apiVersion')}, Kind={reply.get('kind')}"
                )
            if response.get("uid") != review["request"]["uid"]:
                raise CallFailed(
                    f"received invalid webhook response: expected response.uid="
                    f"{review['request']['uid']}, got {response.get('uid')}"
                )
        return version, response

    def _endpoint(self, cc: dict[str, Any]) -> tuple[str, int, str, str, str]:
        if cc.get("url"):
            parts = urlsplit(cc["url"])
            host = parts.hostname or ""
            port = parts.port or 443
            return host, port, parts.path or "/", host, cc["url"]
        svc = cc.get("service") or {}
        ns, name = svc.get("namespace", ""), svc.get("name", "")
        path = svc.get("path") or "/"
        port = int(svc.get("port") or 443)
        dns = f"{name}.{ns}.svc"
        url = f"https://{dns}:{port}{path}"
        target = self.services.get((ns, name))
        if target is None:
            raise CallFailed(
                f'failed to call webhook: Post "{url}": service "{ns}/{name}" is not '
                "registered with the simulated API server (register_service)"
            )
        return target[0], target[1], path, dns, url

    def _post(
        self, host: str, port: int, path: str, sni: str, ctx: ssl.SSLContext, body: bytes, timeout: float
    ) -> tuple[int, bytes]:
        key = (host, port, sni, id(ctx))
        for attempt in (0, 1):
            conn = self._take(key) if attempt == 0 else None
            reused = conn is not None
            if conn is None:
                sock = socket.create_connection((host, port), timeout=timeout)
                # headers and body go out as two writes: without NODELAY each call waits for a
                # delayed ACK (~40 ms), which the real API server's Go client never does
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                try:
                    tls = ctx.wrap_socket(sock, server_hostname=sni)
                except BaseException:
                    sock.close()
                    raise
                conn = http.client.HTTPConnection(host, port, timeout=timeout)
                conn.sock = tls
            try:
                conn.sock.settimeout(timeout)
                conn.request(
                    "POST",
                    f"{path}?timeout={int(timeout)}s",
                    body,
                    {"Content-Type": "application/json", "Accept": "application/json"},
                )
                resp = conn.getresponse()
                data = resp.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                if reused:
                    continue
                raise
            if resp.will_close:
                conn.close()
            else:
                self._give(key, conn)
            return resp.status, data
        raise OSError("unreachable")

    def _take(self, key: tuple) -> http.client.HTTPConnection | None:
        with self._pool_lock:
            conns = self._pool.get(key)
            return conns.pop() if conns else None

    def _give(self, key: tuple, conn: http.client.HTTPConnection) -> None:
        with self._pool_lock:
            self._pool.setdefault(key, []).append(conn)

    def close(self) -> None:
        with self._pool_lock:
            for conns in self._pool.values():
                for c in conns:
                    c.close()
            self._pool.clear()


def request_attributes(a: Attributes) -> dict[str, Any]:
    """The AdmissionRequest fields other than uid and the objects (empty name/namespace left out,
    as the real server's JSON omits them)."""
    gvr = {"group": a.rt.group, "version": a.rt.version, "resource": a.rt.plural}
    kind = a.kind or {"group": a.rt.group, "version": a.rt.version, "kind": a.rt.kind}
    request: dict[str, Any] = {
        "kind": kind,
        "resource": gvr,
        "requestKind": kind,
        "requestResource": gvr,
        "name": a.name,
        "namespace": a.namespace,
        "operation": a.operation,
        "userInfo": a.user.user_info(),
        "dryRun": a.dry_run,
        "options": {"kind": OPTIONS_KIND[a.operation], "apiVersion": "meta.k8s.io/v1"},
    }
    if a.subresource:
        request["subResource"] = a.subresource
        request["requestSubResource"] = a.subresource
    if not a.name:
        del request["name"]
    if not a.namespace:
        del request["namespace"]
    return request


def _name_of(a: Attributes) -> str:
    return str(((a.obj or a.old or {}).get("metadata") or {}).get("name") or "")


_CTX_CACHE: dict[str, ssl.SSLContext] = {}
_CTX_LOCK = threading.Lock()


def _tls_context(ca_bundle: str | None) -> ssl.SSLContext:
    """A verifying client context trusting exactly the caBundle (or the system roots if empty)."""
    key = ca_bundle or ""
    with _CTX_LOCK:
        ctx = _CTX_CACHE.get(key)
        if ctx is None:
            if ca_bundle:
                try:
                    pem = base64.b64decode(ca_bundle).decode()
                    ctx = ssl.create_default_context(cadata=pem)
                except (ValueError, ssl.SSLError) as exc:
                    raise CallFailed(f"failed to call webhook: invalid caBundle: {exc}") from exc
            else:
                ctx = ssl.create_default_context()
            _CTX_CACHE[key] = ctx
        return ctx


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"tls: failed to verify certificate: {exc.verify_message}"
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "context deadline exceeded"
    if isinstance(exc, ConnectionRefusedError):
        return "connect: connection refused"
    return str(exc) or type(exc).__name__


def _denial(name: str, status: dict[str, Any]) -> ApiError:
    denied = f'admission webhook "{name}" denied the request'
    code = int(status.get("code") or 0)
    if code < 400:
        code = 403
    if status.get("message"):
        message = f"{denied}: {status['message']}"
    elif status.get("reason"):
        message = f"{denied}: {status['reason']}"
    else:
        message = f"{denied} without explanation"
    reason = status.get("reason") or ("InternalError" if code == 500 else "Forbidden")
    return ApiError(code, message, reason, status.get("details"))
