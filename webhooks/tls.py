"""The serving certificate of `dynmig serve`: where it is reloaded from, and who renews it.

Every replica serves the pair it reloads without a restart (certs.reload): from the Kubernetes
Secret through the API (`--tls-secret`, no kubelet volume delay) or from files (`--tls-cert`,
`--tls-key`, as `dynmig lab` runs it). In cert-mode `self` the replica that holds the scheduler's
Lease also renews the Secret and keeps the CA bundle of both webhook configurations current
(certs.renewer); the others only reload what it writes, so there is one writer. Renewal failures
are retried and counted; /readyz turns false when no valid pair is served, whatever the renewer does.
"""

from __future__ import annotations

import datetime as dt
import logging
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING

from certs.authority import KeyType, Lifetimes, ServiceIdentity, utcnow
from certs.reload import FileSource, PairSource, SecretSource, TLSReloader
from certs.renewer import CertRenewer
from certs.rotation import Policy
from certs.store import SecretStore
from webhooks.config import ServeConfig

if TYPE_CHECKING:
    import uvicorn
    from kubernetes import client
    from prometheus_client import CollectorRegistry

log = logging.getLogger(__name__)


def settings_problem(cfg: ServeConfig) -> str | None:
    """Why these TLS settings cannot serve (None when they can); the message names the flags."""
    if cfg.cert_mode == "files":
        if not cfg.tls_cert or not cfg.tls_key:
            return (
                "--tls-cert and --tls-key are required with --cert-mode=files (the apiserver and "
                "kube-scheduler call us over HTTPS); or serve from a Secret with --tls-secret"
            )
        return None
    if not cfg.tls_secret:
        return (
            f"--cert-mode={cfg.cert_mode} serves the Secret named by --tls-secret (env DYNMIG_TLS_SECRET); "
            "set it, or serve files with --cert-mode=files --tls-cert=... --tls-key=..."
        )
    if cfg.cert_mode == "self":
        if ca_secret(cfg) == cfg.tls_secret:
            return (
                f"--ca-secret must differ from --tls-secret ({cfg.tls_secret}): the CA key must not sit "
                "beside the serving pair"
            )
        try:
            lifetimes(cfg)
        except ValueError:
            return f"--cert-validity ({cfg.cert_validity}) must be shorter than --ca-validity ({cfg.ca_validity})"
    return None


def ca_secret(cfg: ServeConfig) -> str:
    return cfg.ca_secret or f"{cfg.service}-ca"


def lifetimes(cfg: ServeConfig) -> Lifetimes:
    return Lifetimes(serving=cfg.cert_validity, ca=cfg.ca_validity)


def policy(cfg: ServeConfig) -> Policy:
    """The same policy `dynmig certs init` applies from the chart's hook (same service, lifetimes)."""
    return Policy(ServiceIdentity(cfg.service, cfg.namespace), lifetimes(cfg), KeyType(cfg.cert_key_type))


class ServingCertificates:
    """The reloader (always) and the renewer (cert-mode self) of one server.

    `start()` loads the current pair before returning (the server can be ready at once) and starts
    following the source and, in self mode, renewing; `stop()` ends both threads. The keyword
    arguments after `is_leader` tune timing (tests use short ones); defaults suit a cluster.
    """

    def __init__(
        self,
        cfg: ServeConfig,
        api_client: client.ApiClient | None = None,
        registry: CollectorRegistry | None = None,
        is_leader: Callable[[], bool] = lambda: True,
        *,
        check_interval: float = 60.0,
        retry_backoff: tuple[float, float] = (2.0, 300.0),
        watch_backoff: tuple[float, float] = (1.0, 60.0),
        watch_timeout: int = 300,
        clock: Callable[[], dt.datetime] = utcnow,
    ) -> None:
        problem = settings_problem(cfg)
        if problem:
            raise ValueError(problem)
        self.mode = cfg.cert_mode
        self.source = self._source(cfg, api_client, watch_backoff, watch_timeout)
        self.reloader = TLSReloader(
            self.source, required_names=list(cfg.tls_names), registry=registry, clock=clock
        )
        self.renewer: CertRenewer | None = None
        if cfg.cert_mode == "self":
            from kubernetes import client

            if not (cfg.mutating_webhook or cfg.validating_webhook):
                log.warning(
                    "--cert-mode=self without --mutating-webhook/--validating-webhook: renewed "
                    "certificates are served, but no CA bundle is kept in the webhook configurations"
                )
            self.renewer = CertRenewer(
                SecretStore(client.CoreV1Api(api_client), cfg.namespace, cfg.tls_secret, ca_secret(cfg)),
                policy(cfg),
                admission_api=client.AdmissionregistrationV1Api(api_client),
                mutating=cfg.mutating_webhook or None,
                validating=cfg.validating_webhook or None,
                is_leader=is_leader,
                registry=registry,
                interval=check_interval,
                backoff=retry_backoff,
                clock=clock,
            )

    @staticmethod
    def _source(
        cfg: ServeConfig,
        api_client: client.ApiClient | None,
        backoff: tuple[float, float],
        watch_timeout: int,
    ) -> PairSource:
        if cfg.cert_mode == "files":
            log.info("serving certificate from %s and %s (polled for changes)", cfg.tls_cert, cfg.tls_key)
            return FileSource(cfg.tls_cert, cfg.tls_key)
        from kubernetes import client

        ignored = " (--tls-cert/--tls-key not used)" if cfg.tls_cert or cfg.tls_key else ""
        log.info(
            "serving certificate from Secret %s/%s, watched through the API%s; cert-mode %s",
            cfg.namespace,
            cfg.tls_secret,
            ignored,
            cfg.cert_mode,
        )
        return SecretSource(
            client.CoreV1Api(api_client),
            cfg.namespace,
            cfg.tls_secret,
            watch_timeout=watch_timeout,
            backoff=backoff,
        )

    def leadership_changed(self, leader: bool) -> None:
        """The Lease changed hands: a new leader renews and injects now, not at the next check."""
        if self.renewer is not None:
            self.renewer.wake()

    def start(self) -> ServingCertificates:
        self.reloader.start()
        if self.renewer is not None:
            self.renewer.start()
        return self

    def stop(self) -> None:
        if self.renewer is not None:
            self.renewer.stop()  # first: no Secret write after the reloader stopped following it
        self.reloader.stop()


class ClientCertificateTLS:
    """The serving certificate of `reloader`, with a client certificate signed by `ca_file` required.

    For the extender listener when kube-scheduler runs outside the pod (its tlsConfig certFile/keyFile).
    Verification settings come from this listener's first context, the trust store from the context
    the handshake switches to (the reloader's current pair), so the CA is added to each pair's
    context once; the webhook listener never asks for client certificates, so it is unaffected.
    """

    def __init__(self, reloader: TLSReloader, ca_file: str):
        self._reloader, self._ca_file = reloader, ca_file
        self._loaded: dict[int, ssl.SSLContext] = {}
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(ca_file)  # refuses a missing or unreadable CA file at startup
        ctx.set_alpn_protocols(["http/1.1"])
        ctx.sni_callback = self._pick
        self.ssl_context = ctx

    def _pick(self, ssl_obj: ssl.SSLObject, server_name: str, initial: ssl.SSLContext) -> None:
        pick = self._reloader.ssl_context.sni_callback
        assert pick is not None, "a TLSReloader's live context always carries its sni_callback"
        pick(ssl_obj, server_name, initial)
        current = ssl_obj.context
        if current is not initial and id(current) not in self._loaded:
            current.load_verify_locations(self._ca_file)
            self._loaded = {**{k: v for k, v in list(self._loaded.items())[-3:]}, id(current): current}

    def ssl_context_factory(
        self,
        config: uvicorn.Config | None = None,
        default_factory: Callable[[], ssl.SSLContext] | None = None,
    ) -> ssl.SSLContext:
        return self.ssl_context

    def ready(self) -> bool:
        return self._reloader.ready()


def extender_tls(
    reloader: TLSReloader | None, client_ca: str = ""
) -> TLSReloader | ClientCertificateTLS | None:
    """The TLS of the extender listener: the serving pair, and with `client_ca` client certificates."""
    if reloader is None or not client_ca:
        return reloader
    return ClientCertificateTLS(reloader, client_ca)
