"""TLS hot reload: one live server `ssl.SSLContext` whose certificate changes without a restart.

How the swap works (uvicorn 0.54, CPython ssl on OpenSSL 3): uvicorn hands one SSLContext to
`loop.create_server`, and asyncio wraps every new connection with that same object. Calling
`load_cert_chain` on that live object in place is not atomic (certificate and key are set in two
steps while another thread may be handshaking, and a failed load leaves it with no usable key),
so the live context instead carries an `sni_callback` that, at the start of every handshake
(OpenSSL calls it also when the client sends no server name, e.g. kube-scheduler dialling
https://127.0.0.1), points the connection at the *current* fully built context. A reload builds
and validates a new context off to the side, then replaces one Python reference: new handshakes
get the new pair, open connections keep theirs, and a bad pair never touches what is served.

Give the context to uvicorn with `uvicorn.Config(app, ..., ssl_context_factory=reloader.ssl_context_factory)`
(the factory hook exists since uvicorn 0.5x; `ssl=` is not a Config parameter), then run
`uvicorn.Server(config)` as usual.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import logging
import os
import ssl
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from certs.authority import (
    is_expired,
    key_matches,
    load_certs,
    load_key,
    san_names,
    utcnow,
)
from kube.client import REQUEST_TIMEOUT
from kube.errors import KubeError, translated
from kube.reflector import Reflector

if TYPE_CHECKING:
    import uvicorn
    from cryptography import x509
    from kubernetes import client
    from prometheus_client import CollectorRegistry

log = logging.getLogger(__name__)

PairCallback = Callable[[bytes, bytes], bool]


class PairSource(Protocol):
    """Somewhere a certificate/key pair comes from; calls `deliver` with each new version."""

    def run(self, deliver: PairCallback, stop: threading.Event) -> None: ...


class RefusedPair(ValueError):
    """A new certificate/key pair that must not be served; the message says why."""


class TLSReloader:
    """Owns the live server SSLContext and swaps certificate/key pairs into it safely.

    Usage (the server):
        reloader = TLSReloader(FileSource(crt, key), required_names=["dynmig.ns.svc"], registry=reg)
        reloader.start()            # first load happens synchronously when the source has a pair
        config = uvicorn.Config(app, ssl_context_factory=reloader.ssl_context_factory, ...)
        ... reloader.ready()        # for /readyz: False without a valid, unexpired pair
        reloader.stop()
    """

    def __init__(
        self,
        source: PairSource | None = None,
        required_names: list[str] | tuple[str, ...] = (),
        registry: CollectorRegistry | None = None,
        clock: Callable[[], dt.datetime] = utcnow,
        alpn_protocols: list[str] | None = None,
    ) -> None:
        self._source = source
        self._required = tuple(required_names)
        self._clock = clock
        self._alpn = alpn_protocols or ["http/1.1"]
        self._lock = threading.Lock()
        self._current: ssl.SSLContext | None = None
        self._not_before: dt.datetime | None = None
        self._not_after: dt.datetime | None = None
        self._fingerprint: str | None = None
        self.last_reload_ok: bool | None = None
        self.last_error: str | None = None
        self.loads = 0
        self.refusals = 0
        self._expired_logged = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.ssl_context = self._new_context()
        self.ssl_context.sni_callback = self._pick_context
        self._metrics = _Metrics(registry, self) if registry is not None else None

    # ---- the live context ----------------------------------------------------------------

    def _new_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.set_alpn_protocols(self._alpn)
        return ctx

    def _pick_context(self, ssl_obj: ssl.SSLObject, server_name: str, _ctx: ssl.SSLContext) -> None:
        current = self._current  # one reference read: atomic with respect to a reload
        if current is not None:
            ssl_obj.context = current

    def ssl_context_factory(
        self,
        config: uvicorn.Config | None = None,
        default_factory: Callable[[], ssl.SSLContext] | None = None,
    ) -> ssl.SSLContext:
        """uvicorn's `ssl_context_factory(config, default_factory)` hook: serve our live context."""
        alpn = getattr(getattr(config, "http_protocol_class", None), "alpn_protocols", None)
        if alpn and list(alpn) != self._alpn:
            self._alpn = list(alpn)
            self.ssl_context.set_alpn_protocols(self._alpn)
        return self.ssl_context

    # ---- loading -------------------------------------------------------------------------

    def load(self, cert_pem: bytes, key_pem: bytes) -> bool:
        """Validate a pair and make it the served one. A refused pair leaves the old one served."""
        digest = hashlib.sha256(cert_pem + b"\0" + key_pem).hexdigest()
        if digest == self._fingerprint and self.last_reload_ok:
            return True
        try:
            context, leaf = self._build(cert_pem, key_pem)
        except RefusedPair as refusal:
            with self._lock:
                self.refusals += 1
                self.last_reload_ok = False
                self.last_error = str(refusal)
            log.error("refused new TLS certificate, still serving the previous one: %s", refusal)
            if self._metrics:
                self._metrics.reloads.labels(result="refused").inc()
            return False
        with self._lock:
            self._current = context
            self._not_before, self._not_after = leaf.not_valid_before_utc, leaf.not_valid_after_utc
            self._fingerprint = digest
            self.loads += 1
            self.last_reload_ok = True
            self.last_error = None
            self._expired_logged = False
        log.info(
            "serving TLS certificate %s (valid until %s)",
            leaf.subject.rfc4514_string(),
            leaf.not_valid_after_utc,
        )
        if self._metrics:
            self._metrics.reloads.labels(result="loaded").inc()
        return True

    def _build(self, cert_pem: bytes, key_pem: bytes) -> tuple[ssl.SSLContext, x509.Certificate]:
        try:
            chain = load_certs(cert_pem)
        except ValueError as error:
            raise RefusedPair(f"tls.crt does not parse as PEM certificates: {error}") from None
        try:
            key = load_key(key_pem)
        except (ValueError, TypeError) as error:
            raise RefusedPair(f"tls.key does not parse as an unencrypted PEM private key: {error}") from None
        leaf = chain[0]
        if not key_matches(leaf, key):
            raise RefusedPair("tls.key does not match the certificate in tls.crt")
        now = self._clock()
        if is_expired(leaf, now):
            raise RefusedPair(
                f"certificate is not valid now (valid {leaf.not_valid_before_utc} to {leaf.not_valid_after_utc})"
            )
        names = set(san_names(leaf))
        if not names:
            raise RefusedPair("certificate has no subject alternative names; clients would reject it")
        missing = [n for n in self._required if n not in names]
        if missing:
            raise RefusedPair(f"certificate lacks required names: {', '.join(missing)}")
        context = self._new_context()
        with tempfile.TemporaryDirectory(prefix="dynmig-tls-") as tmp:
            crt_path, key_path = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
            crt_path.write_bytes(cert_pem)
            fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(key_pem)
            try:
                context.load_cert_chain(crt_path, key_path)
            except ssl.SSLError as error:
                raise RefusedPair(f"OpenSSL refused the pair: {error}") from None
        return context, leaf

    # ---- status --------------------------------------------------------------------------

    def expiry_timestamp(self) -> float | None:
        """The served certificate's notAfter as Unix time (None if none is loaded)."""
        not_after = self._not_after
        return None if not_after is None else not_after.timestamp()

    def ready(self) -> bool:
        """For /readyz: a pair is loaded and is valid right now."""
        if self._current is None or self._not_before is None or self._not_after is None:
            return False
        now = self._clock()
        valid = self._not_before <= now < self._not_after
        if not valid and not self._expired_logged:
            self._expired_logged = True
            log.error(
                "the served TLS certificate expired at %s; not ready until a valid one loads", self._not_after
            )
        return valid

    # ---- background ----------------------------------------------------------------------

    def start(self) -> None:
        """Load what the source has now (so a server can be ready at once), then follow the
        source in a daemon thread. No-op without a source."""
        if self._source is None or self._thread is not None:
            return
        prime = getattr(self._source, "poll", None)
        if prime is not None:
            prime(self.load)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="dynmig-tls-reload", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        if self._source is None:  # start() runs this thread only with a source
            return
        try:
            self._source.run(self.load, self._stop)
        except Exception:  # a source bug must not take the server down; the old pair stays served
            log.exception("TLS certificate source stopped")

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        stopper = getattr(self._source, "interrupt", None)
        if stopper:
            stopper()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None


class _Metrics:
    """Prometheus series, registered on the registry the server passes in (never the global one)."""

    def __init__(self, registry: CollectorRegistry, reloader: TLSReloader) -> None:
        from prometheus_client import Counter, Gauge

        # A timestamp, not a countdown (Prometheus convention): alert on
        # `dynmig_tls_certificate_expiry_timestamp_seconds - time() < 7 * 86400`.
        expiry = Gauge(
            "dynmig_tls_certificate_expiry_timestamp_seconds",
            "Unix time at which the served TLS certificate expires (NaN while none is loaded).",
            registry=registry,
        )
        expiry.set_function(lambda: _nan_if_none(reloader.expiry_timestamp()))
        ok = Gauge(
            "dynmig_tls_last_reload_success",
            "1 if the last certificate reload succeeded, 0 if the last new pair was refused.",
            registry=registry,
        )
        ok.set_function(lambda: 1.0 if reloader.last_reload_ok else 0.0)
        ready = Gauge("dynmig_tls_ready", "1 while a valid certificate is served.", registry=registry)
        ready.set_function(lambda: 1.0 if reloader.ready() else 0.0)
        self.reloads = Counter(
            "dynmig_tls_reloads",
            "Certificate reload attempts by result (loaded, refused).",
            ["result"],
            registry=registry,
        )


def _nan_if_none(value: float | None) -> float:
    return float("nan") if value is None else value


# ---- sources --------------------------------------------------------------------------------


# a pair's files as last seen: (mtime, size, inode) of tls.crt, then of tls.key
_Stamp = tuple[int, int, int, int, int, int]


class FileSource:
    """A pair of files (e.g. a mounted Secret), polled: Secret volumes swap a symlink, which
    inotify reports poorly, so we compare mtime/size and then content."""

    def __init__(
        self, cert_file: str | os.PathLike[str], key_file: str | os.PathLike[str], interval: float = 10.0
    ) -> None:
        self.cert_file, self.key_file, self.interval = Path(cert_file), Path(key_file), interval
        self._seen: _Stamp | None = None

    def _stamp(self) -> _Stamp | None:
        try:
            a, b = self.cert_file.stat(), self.key_file.stat()
        except FileNotFoundError:
            return None
        return (a.st_mtime_ns, a.st_size, a.st_ino, b.st_mtime_ns, b.st_size, b.st_ino)

    def poll(self, deliver: PairCallback) -> None:
        stamp = self._stamp()
        if stamp is None or stamp == self._seen:
            return
        try:
            cert_pem, key_pem = self.cert_file.read_bytes(), self.key_file.read_bytes()
        except OSError as error:
            log.warning("cannot read TLS files %s / %s: %s", self.cert_file, self.key_file, error)
            return
        self._seen = stamp
        deliver(cert_pem, key_pem)

    def run(self, deliver: PairCallback, stop: threading.Event) -> None:
        while not stop.is_set():
            self.poll(deliver)
            stop.wait(self.interval)


class SecretSource:
    """A kubernetes.io/tls Secret, watched through the API (no volume propagation delay).

    Lists then watches (kube.reflector) with a `metadata.name` field selector, which lets RBAC
    restrict the server to its own Secret by resourceNames; a dropped watch resumes, an expired one
    lists again, and failures back off between `backoff[0]` and `backoff[1]` seconds.
    """

    def __init__(
        self,
        core_api: client.CoreV1Api,
        namespace: str,
        name: str,
        watch_timeout: int = 300,
        backoff: tuple[float, float] = (1.0, 60.0),
    ) -> None:
        self.api, self.namespace, self.name = core_api, namespace, name
        self.watch_timeout = watch_timeout
        self.backoff = backoff
        self._reflector: Reflector | None = None

    def _deliver(self, secret: dict[str, Any], deliver: PairCallback) -> None:
        from certs.store import decode_data

        data = decode_data(secret)
        if "tls.crt" in data and "tls.key" in data:
            deliver(data["tls.crt"], data["tls.key"])
        else:
            log.warning("Secret %s/%s has no tls.crt/tls.key yet", self.namespace, self.name)

    def poll(self, deliver: PairCallback) -> None:
        """One read of the Secret now; a failure is logged (the watch loop retries)."""
        what = f"read Secret {self.namespace}/{self.name}"
        try:
            with translated(what):
                reply = self.api.read_namespaced_secret(
                    self.name, self.namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
                )
                secret = json.loads(reply.data)
            self._deliver(secret, deliver)
        except (KubeError, ValueError) as error:  # not fatal: the watch loop lists again
            log.warning("%s failed: %s", what, error)

    def run(self, deliver: PairCallback, stop: threading.Event) -> None:
        def replace(items: list[dict[str, Any]]) -> None:
            for item in items:
                self._deliver(item, deliver)

        def changed(kind: str, obj: dict[str, Any]) -> None:
            if kind in ("ADDED", "MODIFIED") and (obj.get("metadata") or {}).get("name") == self.name:
                self._deliver(obj, deliver)

        self._reflector = Reflector(
            f"Secret {self.namespace}/{self.name}",
            functools.partial(
                self.api.list_namespaced_secret, self.namespace, field_selector=f"metadata.name={self.name}"
            ),
            replace,
            changed,
            stop=stop,
            watch_timeout=self.watch_timeout,
            backoff=self.backoff,
        )
        self._reflector.run()

    def interrupt(self) -> None:
        if self._reflector is not None:
            self._reflector.interrupt()
