"""Hot reload against a real uvicorn server and real TLS clients."""

from __future__ import annotations

import datetime as dt
import socket
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from certs_testkit import IDENTITY
from cryptography import x509
from prometheus_client import CollectorRegistry
from tls_server_testkit import RunningServer
from waiting_testkit import wait_for

from certs.authority import KeyPair, certs_to_pem, make_ca, make_serving, utcnow
from certs.reload import FileSource, TLSReloader
from certs.rotation import CertState, Policy, reconcile


def client_context(*cas: x509.Certificate) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cadata=certs_to_pem(list(cas)).decode())
    return ctx


def served_serial(port: int, trust: ssl.SSLContext) -> int:
    """Handshake with a fresh connection (verifying) and return the served certificate's serial."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        trust.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True)).serial_number


def test_a_new_pair_is_served_to_new_connections_while_open_ones_keep_working(tls_server, ca, serving, now):
    trust = client_context(ca.cert)
    assert served_serial(tls_server.port, trust) == serving.cert.serial_number
    with httpx.Client(verify=trust) as keep_alive:
        assert keep_alive.get(tls_server.url).text == "ok"
        renewed = make_serving(ca, IDENTITY, now)
        assert tls_server.reloader.load(renewed.cert_pem(), renewed.key_pem())
        assert served_serial(tls_server.port, trust) == renewed.cert.serial_number
        assert keep_alive.get(tls_server.url).text == "ok"  # the open connection is untouched


def test_rotation_under_concurrent_requests_loses_none(tls_server, ca, now):
    second_ca = make_ca(now)
    trust = client_context(ca.cert, second_ca.cert)  # the published bundle during a rollover
    stop = threading.Event()
    results: list[str] = []

    def hammer(fresh_connections: bool) -> None:
        with httpx.Client(verify=trust) as shared:
            while not stop.is_set():
                try:
                    if fresh_connections:
                        with httpx.Client(verify=trust) as one_shot:
                            results.append(one_shot.get(tls_server.url).text)
                    else:
                        results.append(shared.get(tls_server.url).text)
                except Exception as error:  # noqa: BLE001 - counted, not raised: the test is about losing none
                    results.append(f"error: {error!r}")

    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(hammer, i % 2 == 0) for i in range(4)]
        for i in range(12):
            signer = ca if i % 2 else second_ca
            pair = make_serving(signer, IDENTITY, now)
            assert tls_server.reloader.load(pair.cert_pem(), pair.key_pem())
            time.sleep(0.05)
        stop.set()
        for f in futures:
            f.result()
    errors = [r for r in results if r != "ok"]
    assert len(results) > 20
    assert errors == []
    assert tls_server.reloader.loads == 13


def _mismatched(ca, now) -> tuple[bytes, bytes]:
    a, b = make_serving(ca, IDENTITY, now), make_serving(ca, IDENTITY, now)
    return a.cert_pem(), b.key_pem()


def _expired(ca, now) -> tuple[bytes, bytes]:
    old = make_serving(ca, IDENTITY, now - dt.timedelta(days=200))
    return old.cert_pem(), old.key_pem()


def _without_service_name(ca, now) -> tuple[bytes, bytes]:
    from certs.authority import ServiceIdentity

    other = make_serving(ca, ServiceIdentity("other", "elsewhere"), now)
    return other.cert_pem(), other.key_pem()


def _garbage(ca, now) -> tuple[bytes, bytes]:
    return b"not a certificate", b"not a key"


@pytest.mark.parametrize(
    "bad_pair, reason",
    [
        (_mismatched, "does not match"),
        (_expired, "not valid now"),
        (_without_service_name, "lacks required names"),
        (_garbage, "does not parse"),
    ],
)
def test_a_bad_pair_is_refused_and_the_old_one_stays_served(tls_server, ca, serving, now, bad_pair, reason):
    trust = client_context(ca.cert)
    crt, key = bad_pair(ca, now)
    assert tls_server.reloader.load(crt, key) is False
    assert reason in tls_server.reloader.last_error
    assert tls_server.reloader.refusals == 1
    assert tls_server.reloader.last_reload_ok is False
    assert tls_server.reloader.ready()
    assert served_serial(tls_server.port, trust) == serving.cert.serial_number
    with httpx.Client(verify=trust) as client:
        assert client.get(tls_server.url).text == "ok"


def test_ca_rollover_keeps_every_client_verifying_with_the_bundle_from_before_and_after_each_step():
    """Walk through a CA rollover in steps shorter than the bundle overlap; at every step a client
    holding the bundle published at the previous step, and one holding the current bundle, both
    verify the served certificate. The walk is placed in the past so that real clients, which
    judge validity by the real clock, accept every certificate."""
    policy = Policy(IDENTITY)
    ca_life = policy.lifetimes.ca
    step = dt.timedelta(minutes=30)
    start = utcnow() - step * 10 - ca_life * 2 / 3 + dt.timedelta(hours=1)
    checkpoints = [start + ca_life * 2 / 3 - dt.timedelta(hours=1) + step * i for i in range(10)]
    state, _ = reconcile(CertState(), policy, start)
    state, _ = reconcile(state, policy, checkpoints[0] - dt.timedelta(days=1))  # a routine renewal
    reloader = TLSReloader(required_names=["dynmig.dynmig-system.svc"])
    assert reloader.load(state.serving.cert_pem(), state.serving.key_pem())
    server = RunningServer(reloader)
    server.start()
    try:
        cas_seen = {state.ca.cert.serial_number}
        all_changes = []
        for t in checkpoints:
            before = state.bundle
            state, changes = reconcile(state, policy, t)
            all_changes += changes
            assert reloader.load(state.serving.cert_pem(), state.serving.key_pem()), reloader.last_error
            cas_seen.add(state.ca.cert.serial_number)
            for bundle in (before, state.bundle):
                assert served_serial(server.port, client_context(*bundle)) == state.serving.cert.serial_number
        assert len(cas_seen) == 2, "the walk must cover a rollover"
        assert len(state.bundle) == 1, "the old CA leaves the bundle at the end"
        assert any("rollover started" in c for c in all_changes)
        assert any("rollover complete" in c for c in all_changes)
    finally:
        server.stop()


def test_ready_turns_false_when_the_served_certificate_expires_and_metrics_say_so(serving, now):
    registry = CollectorRegistry()
    clock = {"now": now}
    reloader = TLSReloader(registry=registry, clock=lambda: clock["now"])
    assert not reloader.ready()
    assert reloader.expiry_timestamp() is None
    assert reloader.load(serving.cert_pem(), serving.key_pem())
    assert reloader.ready()
    expires = registry.get_sample_value("dynmig_tls_certificate_expiry_timestamp_seconds")
    assert expires == serving.cert.not_valid_after_utc.timestamp()
    assert 89 * 86400 < expires - now.timestamp() <= 90 * 86400
    assert registry.get_sample_value("dynmig_tls_reloads_total", {"result": "loaded"}) == 1
    assert registry.get_sample_value("dynmig_tls_ready") == 1
    clock["now"] = serving.cert.not_valid_after_utc + dt.timedelta(seconds=1)
    assert not reloader.ready()
    assert registry.get_sample_value("dynmig_tls_ready") == 0


def test_a_refused_pair_is_counted_in_metrics(ca, serving, now):
    registry = CollectorRegistry()
    reloader = TLSReloader(registry=registry)
    assert reloader.load(serving.cert_pem(), serving.key_pem())
    other = make_serving(ca, IDENTITY, now)
    assert not reloader.load(serving.cert_pem(), other.key_pem())
    assert registry.get_sample_value("dynmig_tls_reloads_total", {"result": "refused"}) == 1
    assert registry.get_sample_value("dynmig_tls_last_reload_success") == 0


def test_files_replaced_on_disk_are_picked_up_by_polling(tmp_path, ca, serving, now):
    crt, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    crt.write_bytes(serving.cert_pem())
    key.write_bytes(serving.key_pem())
    reloader = TLSReloader(FileSource(crt, key, interval=0.05))
    reloader.start()
    try:
        assert reloader.ready()  # the first pair is loaded before start() returns
        renewed: KeyPair = make_serving(ca, IDENTITY, now)
        # a Secret volume swaps both files at once; write the new pair under new names, then rename
        (tmp_path / "new.key").write_bytes(renewed.key_pem())
        (tmp_path / "new.crt").write_bytes(renewed.cert_pem())
        (tmp_path / "new.key").replace(key)
        (tmp_path / "new.crt").replace(crt)
        wait_for(lambda: reloader.loads == 2)
        assert reloader.last_reload_ok
        assert reloader.expiry_timestamp() == renewed.cert.not_valid_after_utc.timestamp()
    finally:
        reloader.stop()


def test_the_server_is_not_ready_before_any_pair_is_loaded():
    reloader = TLSReloader()
    assert reloader.ready() is False
    assert utcnow() is not None
