"""ApiServer: the simulated Kubernetes API server, started in a background thread.

    server = ApiServer().start()
    api = kubernetes.client.CoreV1Api(server.api_client("scheduler"))
    ...
    server.stop()

Clients authenticate with bearer tokens from `server.kubeconfig(<identity>)`; admission webhooks
see that identity as `userInfo`.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import tempfile
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

from sim.apiserver import disruption, logs, tls
from sim.apiserver.admission import Admission
from sim.apiserver.errors import ApiError
from sim.apiserver.faults import Faults
from sim.apiserver.identities import (
    ANONYMOUS,
    Identity,
    default_identities,
    service_account,
    write_kubeconfig,
)
from sim.apiserver.registry import Registry, Request, Result
from sim.apiserver.resources import BY_KEY, STORED
from sim.apiserver.rest import Handler
from sim.apiserver.store import Store

log = logging.getLogger("sim.apiserver")
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
NAMESPACE_CONTROLLER = service_account("namespace-controller", "kube-system", "namespace-controller")


class _Listener(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, addr: tuple[str, int], handler: type, ssl_ctx: ssl.SSLContext | None):
        self.ssl_ctx = ssl_ctx
        super().__init__(addr, handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that goes away mid-request is normal (watch cut, pool closed); never print it.
        log.debug("connection from %s ended with an error", client_address)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = self.socket.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.ssl_ctx is not None:
            # The handshake runs on the connection's own thread (first read), not the accept loop.
            sock = self.ssl_ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr


class ApiServer:
    """A Kubernetes API server on loopback that the official client and kubectl talk to.

    Args:
        host, port: where to listen (port 0 lets the OS choose; the chosen port is kept across
            down()/up()).
        https: serve TLS with a self-signed certificate (kubeconfigs then carry it as the CA).
        identities: who may call (bearer token -> user); defaults to `default_identities()`:
            admin, scheduler, device-plugin, certs, kube-scheduler, kubelet, alice.
        workdir: where kubeconfig files are written (a temp dir by default).
        reap_after_grace: remove gracefully deleted pods once their grace period is over, as a
            kubelet does once it has killed the containers at the end of the grace period (so a pod
            bound to a node with no simulated kubelet still goes); with False they stay until
            something deletes them with grace 0 or `finish_deletions()`.
        history: watch events kept per resource type; older resourceVersions get 410 Gone.
        bookmark_interval: seconds between BOOKMARK events on watches that allow them
            (kube-apiserver: about a minute).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        https: bool = False,
        identities: list[Identity] | None = None,
        workdir: str | Path | None = None,
        reap_after_grace: bool = True,
        history: int = 50_000,
        bookmark_interval: float = 60.0,
    ):
        self.host = host
        self.port = port
        self.https = https
        self.bookmark_interval = bookmark_interval
        self.store = Store(history)
        self.admission = Admission(self._webhook_configs, self._namespace_labels, self._namespace_object)
        self.registry = Registry(self.store, self.admission, reap_after_grace)
        self.faults = Faults()
        self.identities: dict[str, Identity] = {}
        self._by_token: dict[str, Identity] = {}
        for ident in identities or default_identities():
            self.add_identity(ident)
        self._tmp = None if workdir else tempfile.TemporaryDirectory(prefix="dynmig-apiserver-")
        self.workdir = Path(workdir or self._tmp.name)
        self.logs_dir = self.workdir / "pod-logs"  # what `kubectl logs` reads (logs.py)
        self.cert_pem, self._key_pem = tls.self_signed() if https else (b"", b"")
        self._listener: _Listener | None = None
        self._thread: threading.Thread | None = None
        self._reaper: threading.Thread | None = None
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        self._stopping = False
        self._unavailable = False
        self.disruption_controller = True  # False: budgets keep their status until sync_budgets()
        for ns in SYSTEM_NAMESPACES:
            self.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})

    # ---- lifecycle ------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"{'https' if self.https else 'http'}://{self.host}:{self.port}"

    def start(self) -> ApiServer:
        self._stopping = False
        self._listen()
        if self._reaper is None:
            self._reaper = threading.Thread(target=self._reap, name="apiserver-controllers", daemon=True)
            self._reaper.start()
        return self

    def _listen(self) -> None:
        ctx = tls.server_context(self.cert_pem, self._key_pem) if self.https else None
        handler = type("BoundHandler", (Handler,), {"api": self})
        self._listener = _Listener((self.host, self.port), handler, ctx)
        self.port = self._listener.server_address[1]
        self._thread = threading.Thread(
            target=self._listener.serve_forever,
            kwargs={"poll_interval": 0.1},
            name=f"apiserver-{self.port}",
            daemon=True,
        )
        self._thread.start()

    def _close_listener(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.shutdown()
            listener.server_close()
        with self._conns_lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def stop(self) -> None:
        """Stop listening, end every open connection and watch, forget temp files."""
        self._stopping = True
        self.store.wake_all()
        self._close_listener()
        if self._reaper is not None:
            self._reaper.join(timeout=5)
            self._reaper = None
        self.admission.close()

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()

    def down(self, mode: str = "refuse") -> None:
        """Make the API unavailable: "refuse" closes the port (connection refused) and cuts every
        open connection; "503" keeps listening but answers 503 ServiceUnavailable to everything."""
        if mode not in ("refuse", "503"):
            raise ValueError(f"down(mode={mode!r}): use 'refuse' or '503'")
        self._unavailable = True
        self.store.wake_all()
        if mode == "refuse":
            self._close_listener()

    def up(self) -> None:
        """Bring the API back on the same port after down()."""
        self._unavailable = False
        if self._listener is None and not self._stopping:
            for _ in range(50):
                try:
                    self._listen()
                    return
                except OSError:
                    time.sleep(0.1)
            raise RuntimeError(f"could not listen on {self.host}:{self.port} again")

    def _track(self, conn: socket.socket, add: bool) -> None:
        with self._conns_lock:
            (self._conns.add if add else self._conns.discard)(conn)

    def _reap(self) -> None:
        """The control-plane loops the API alone cannot do: the namespace controller (empty a
        Terminating namespace, then remove it) and the end of expired grace periods."""
        while not self._stopping:
            try:
                if not self._unavailable:
                    self.registry.sync_namespaces(NAMESPACE_CONTROLLER)
                    if self.disruption_controller:
                        disruption.sync_budgets(self.registry)
                if self.registry.reap_after_grace:
                    self.registry.finish_deletions(only_expired=True)
            except Exception:
                log.exception("simulated control plane pass failed")
            time.sleep(0.2)

    # ---- identities and clients -----------------------------------------------------------------
    def add_identity(self, identity: Identity) -> Identity:
        self.identities[identity.name] = identity
        self._by_token[identity.token] = identity
        return identity

    def identity(self, name: str) -> Identity:
        try:
            return self.identities[name]
        except KeyError:
            raise KeyError(
                f"unknown identity {name!r}: known are {sorted(self.identities)}; add one with add_identity()"
            ) from None

    def _authenticate(self, header: str) -> Identity:
        if not header:
            return ANONYMOUS
        scheme, _, token = header.partition(" ")
        ident = self._by_token.get(token.strip()) if scheme.lower() == "bearer" else None
        if ident is None:
            raise ApiError(401, "Unauthorized", "Unauthorized")
        return ident

    def kubeconfig(self, identity: str = "admin") -> Path:
        """Path of a kubeconfig file that authenticates as `identity` (written on first use)."""
        ident = self.identity(identity)
        path = self.workdir / f"kubeconfig-{ident.name}-{self.port}.yaml"
        if not path.exists():
            write_kubeconfig(path, self.url, ident, self.cert_pem or None)
        return path

    def api_client(self, identity: str = "admin") -> Any:
        """An official-client `kubernetes.client.ApiClient` authenticated as `identity`."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig(identity)))

    # ---- test hooks -----------------------------------------------------------------------------
    def register_service(self, namespace: str, name: str, host: str, port: int) -> None:
        """Route a webhook's `clientConfig.service` {namespace, name} to host:port (TLS is still
        verified for `<name>.<namespace>.svc`)."""
        self.admission.services[(namespace, name)] = (host, port)

    def log_path(self, namespace: str, pod: str, uid: str, container: str) -> Path:
        """Where a simulated kubelet appends a container's output for `kubectl logs` (folder created)."""
        path = logs.log_path(self.logs_dir, namespace, pod, uid, container)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def sync_budgets(self) -> None:
        """One disruption-controller pass now (it also runs in the background every 0.2 s)."""
        disruption.sync_budgets(self.registry)

    def finish_deletions(self) -> int:
        """Remove every gracefully deleted pod now (the kubelet confirming termination)."""
        return self.registry.finish_deletions()

    def open_watches(self, plural: str) -> int:
        """How many watches on `plural` are being served, each past the point it starts from (a
        change committed after this count rose is delivered to the new watch)."""
        with self.store.lock:
            return self.registry.open_watches.get(plural, 0)

    def compact(self) -> None:
        """Forget watch history: watches from an older resourceVersion get 410 Gone."""
        self.store.compact()

    def create(self, obj: dict[str, Any], identity: str = "admin") -> dict[str, Any]:
        """Create an object in-process (admission applies), e.g. to seed a thousand nodes fast."""
        rt = self._rt_of(obj)
        ns = (obj.get("metadata") or {}).get("namespace", "default") if rt.namespaced else ""
        req = Request(self.identity(identity) if identity else ANONYMOUS, rt, ns)
        return self.registry.create(req, obj).obj

    def get(self, kind_or_plural: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        """Read an object in-process (None if absent): the stored object itself, which later versions
        share their unchanged parts with, so never change it in place (edit a trees.clone of it)."""
        found = sorted(
            (r for r in STORED if kind_or_plural in (r.kind, r.plural, f"{r.plural}.{r.group}")),
            key=lambda r: r.group != "",
        )
        rt = found[0] if found else None
        if rt is None:
            raise KeyError(f"unknown resource {kind_or_plural!r}")
        with self.store.lock:
            return self.store.table(rt).get(namespace if rt.namespaced else "", name)

    def _rt_of(self, obj: dict[str, Any]) -> Any:
        api_version, kind = obj.get("apiVersion", "v1"), obj.get("kind", "")
        group = api_version.rpartition("/")[0]
        for rt in BY_KEY.values():
            if rt.kind == kind and rt.group == group:
                return rt
        raise ValueError(f"unsupported object kind {kind!r} in apiVersion {api_version!r}")

    # ---- wiring for admission -------------------------------------------------------------------
    def _webhook_configs(self, plural: str) -> list[dict[str, Any]]:
        rt = BY_KEY[("admissionregistration.k8s.io", plural)]
        with self.store.lock:
            return self.store.table(rt).items(None)

    def _namespace_object(self, ns: str) -> dict[str, Any] | None:
        with self.store.lock:
            return self.store.table(BY_KEY[("", "namespaces")]).get("", ns)

    def _namespace_labels(self, ns: str) -> dict[str, str] | None:
        obj = self._namespace_object(ns)
        return None if obj is None else (obj["metadata"].get("labels") or {})


__all__ = ["ApiServer", "Result"]
