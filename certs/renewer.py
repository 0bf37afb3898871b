"""Renewal in the running server: the Lease holder keeps the Secrets and webhook bundles fresh.

Every replica reloads from the Secret (certs.reload); only the leader writes. A failed pass is
retried with exponential backoff and counted; it never turns into serving an expired certificate
silently, because the reloader's ready() turns false at expiry whatever the renewer does.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from certs.authority import certs_to_pem, utcnow
from certs.inject import inject_ca_bundle
from certs.rotation import CertState, Policy, bundle_union, reconcile
from certs.store import SecretStore

if TYPE_CHECKING:
    from kubernetes import client
    from prometheus_client import CollectorRegistry

log = logging.getLogger(__name__)


def rotate(
    store: SecretStore,
    policy: Policy,
    now: dt.datetime,
    force: bool = False,
    admission_api: client.AdmissionregistrationV1Api | None = None,
    mutating: str | None = None,
    validating: str | None = None,
    require_webhooks: bool = True,
) -> list[str]:
    """One reconcile pass against the cluster; returns what changed (empty: nothing was due).

    Write order keeps clients verifying: publish the union of the old and new bundle to the
    webhook configurations first, then the CA Secret, then the serving Secret, and only then
    shrink the published bundle. `require_webhooks=False` tolerates both configurations being
    absent (the pre-install hook runs before Helm creates them).
    """
    loaded = store.load()
    for problem in loaded.problems:
        log.warning("%s; it will be replaced", problem)
    state, changes = reconcile(loaded.state, policy, now, force=force)
    inject = admission_api is not None and (mutating or validating)
    if not changes:
        if inject:
            inject_ca_bundle(
                admission_api, certs_to_pem(state.bundle), mutating, validating, require_webhooks
            )
        return []
    if inject:
        union = bundle_union(loaded.state.bundle, state.bundle)
        inject_ca_bundle(admission_api, certs_to_pem(union), mutating, validating, require_webhooks)
    if _ca_changed(loaded.state, state) or loaded.ca_version is None:
        store.save_ca(state, loaded.ca_version)
    store.save_serving(state, loaded.serving_version)
    if inject:
        inject_ca_bundle(admission_api, certs_to_pem(state.bundle), mutating, validating, require_webhooks)
    for change in changes:
        log.info("certificates: %s", change)
    return changes


def _ca_changed(old: CertState, new: CertState) -> bool:
    same_ca = old.ca is not None and new.ca is not None and old.ca.cert == new.ca.cert
    return not same_ca or tuple(old.bundle) != tuple(new.bundle)


class CertRenewer:
    """Runs `rotate` every `interval` while `is_leader()`; on failure retries with backoff.

    start()/stop() run it in a daemon thread; run_once() does one pass (raises on failure).
    wake() starts the next pass now instead of after the interval: call it when leadership
    changes, so a newly elected leader renews and injects at once rather than up to a whole
    interval later.
    """

    def __init__(
        self,
        store: SecretStore,
        policy: Policy,
        admission_api: client.AdmissionregistrationV1Api | None = None,
        mutating: str | None = None,
        validating: str | None = None,
        is_leader: Callable[[], bool] = lambda: True,
        registry: CollectorRegistry | None = None,
        interval: float = 600.0,
        backoff: tuple[float, float] = (2.0, 300.0),
        clock: Callable[[], dt.datetime] = utcnow,
    ) -> None:
        self.store, self.policy = store, policy
        self.admission_api, self.mutating, self.validating = admission_api, mutating, validating
        self.is_leader, self.interval, self.backoff, self.clock = is_leader, interval, backoff, clock
        self.failures = 0  # consecutive
        self.passes = 0  # loop iterations, leader or not
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by wake() and stop(): ends the current wait
        self._thread: threading.Thread | None = None
        self._metrics = None
        if registry is not None:
            from prometheus_client import Counter

            self._metrics = (
                Counter(
                    "dynmig_cert_renewals",
                    "Certificate renewal passes that changed something.",
                    registry=registry,
                ),
                Counter(
                    "dynmig_cert_renewal_failures",
                    "Certificate renewal passes that failed.",
                    registry=registry,
                ),
            )

    def run_once(self) -> list[str]:
        changes = rotate(
            self.store,
            self.policy,
            self.clock(),
            admission_api=self.admission_api,
            mutating=self.mutating,
            validating=self.validating,
        )
        if changes and self._metrics:
            self._metrics[0].inc()
        return changes

    def _loop(self) -> None:
        delay = self.backoff[0]
        while not self._stop.is_set():
            wait = self.interval
            if self.is_leader():
                try:
                    self.run_once()
                    self.failures, self.last_error, delay = 0, None, self.backoff[0]
                except Exception as error:  # noqa: BLE001 - any failure is retried, counted and logged
                    self.failures += 1
                    self.last_error = str(error)
                    if self._metrics:
                        self._metrics[1].inc()
                    log.error(
                        "certificate renewal failed (%d in a row), retrying in %.0fs: %s",
                        self.failures,
                        delay,
                        error,
                    )
                    wait, delay = delay, min(delay * 2, self.backoff[1])
            self.passes += 1
            self._wake.wait(wait)
            self._wake.clear()  # a wake() during the pass above still shortened this wait

    def wake(self) -> None:
        """Check again now (e.g. this replica just became the leader); safe from any thread."""
        self._wake.set()

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._wake.clear()
            self._thread = threading.Thread(target=self._loop, name="dynmig-cert-renewer", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
