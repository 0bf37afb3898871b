"""dynmig serve's own certificate: reloaded from the Kubernetes Secret without a restart, renewed in
place by the Lease holder (cert-mode self), with the CA bundle kept in both webhook configurations.

Everything runs as `dynmig serve` runs it (flags parsed by its parser, real uvicorn over TLS, real
Lease election) against the simulated API server; only the timing is shortened.
"""

from __future__ import annotations

import base64
import datetime as dt
import http.client
import ssl
import threading
import urllib.request
from contextlib import ExitStack

import pytest
from cryptography import x509
from kubernetes import client
from waiting_testkit import wait_for as eventually
from webhooks_testkit import webhook_configurations

from base.policyfiles import DEFAULT_POLICY, load_device_config
from certs.authority import Lifetimes, ServiceIdentity, load_certs, make_ca, make_serving, utcnow
from certs.main import main as certs_main
from certs.rotation import CertState
from certs.store import SecretStore
from webhooks.config import StaticDeviceConfig, parse_args
from webhooks.main import Service
from webhooks.runner import Listeners
from webhooks.tls import settings_problem

NS, SERVICE, TLS_SECRET, CA_SECRET, WEBHOOKS = "dynmig", "dynmig", "dynmig-tls", "dynmig-ca", "dynmig"
FAST = {
    "check_interval": 0.05,
    "retry_backoff": (0.05, 0.2),
    "watch_backoff": (0.05, 0.2),
    "watch_timeout": 5,
}
THREADS = ("dynmig-cert-renewer", "dynmig-tls-reload", "dynmig-leader")


@pytest.fixture
def cluster(apiserver):
    """Namespaces, and webhook configurations like the chart's whose caBundle is a CA nobody uses
    any more (as after a reinstall): the renewer must put the Secret's bundle there."""
    for ns in (NS, "team"):
        apiserver.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    for obj in webhook_configurations(make_ca(utcnow()).cert_pem()):
        apiserver.create(obj)
    return apiserver


class Serve:
    """One `dynmig serve` replica: Service with its certificates, and its HTTPS + metrics listeners."""

    def __init__(self, apiserver, flags: list[str], identity: str, wait: float | None = 10, **timing):
        argv = [
            "--kubeconfig",
            str(apiserver.kubeconfig("scheduler")),
            "--namespace",
            NS,
            "--identity",
            identity,
            "--service",
            SERVICE,
            "--mutating-webhook",
            WEBHOOKS,
            "--validating-webhook",
            WEBHOOKS,
            *flags,
        ]
        self.apiserver = apiserver
        self.cfg = parse_args(argv)
        assert settings_problem(self.cfg) is None
        self.service = Service(
            self.cfg,
            api_client=apiserver.api_client("scheduler"),
            device_config=StaticDeviceConfig(load_device_config(DEFAULT_POLICY)),
        )
        self.certificates = self.service.use_certificates(**{**FAST, **timing})
        self.service.start(wait=wait)
        self.listeners = Listeners(self.service.app, self.service.metrics_app, tls=self.service.tls).start()
        apiserver.register_service(NS, SERVICE, "127.0.0.1", self.listeners.ports[0])

    def metric(self, name: str) -> float:
        """A sample from the server's metrics port, as Prometheus scrapes it (0 when absent)."""
        with urllib.request.urlopen(self.listeners.metrics_url, timeout=5) as resp:
            for line in resp.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        return 0.0

    def stop(self) -> None:
        self.apiserver.admission.close()  # its idle keep-alive webhook connections would hold uvicorn 2 s
        self.listeners.stop()
        self.service.stop()


@pytest.fixture
def serve(cluster):
    """serve(*flags, identity=..., **timing) -> a running replica, stopped at teardown; checks no thread
    is left. `timing` overrides FAST (ServingCertificates' keyword arguments)."""
    with ExitStack() as stack:

        def start(*flags: str, identity: str = "serve-a", wait: float | None = 10, **timing) -> Serve:
            replica = Serve(cluster, list(flags), identity, wait, **timing)
            stack.callback(replica.stop)
            return replica

        yield start
    left = [t.name for t in threading.enumerate() if t.name in THREADS and t.is_alive()]
    assert left == [], f"threads still running after stop: {left}"


# ---- helpers ---------------------------------------------------------------------------------


def secret(apiserver, name: str = TLS_SECRET) -> dict[str, bytes]:
    obj = apiserver.get("secrets", name, NS)
    return {k: base64.b64decode(v) for k, v in obj["data"].items()}


def secret_serial(apiserver) -> int:
    return load_certs(secret(apiserver)["tls.crt"])[0].serial_number


def trusting(ca_pem: bytes) -> ssl.SSLContext:
    return ssl.create_default_context(cadata=ca_pem.decode())


def get(port: int, trust: ssl.SSLContext, path: str = "/healthz") -> tuple[int, int]:
    """One request on a fresh, verifying connection: (status, serial of the served certificate)."""
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=trust, timeout=5)
    try:
        conn.request("GET", path)
        status = conn.getresponse().status
        return status, x509.load_der_x509_certificate(conn.sock.getpeercert(binary_form=True)).serial_number
    finally:
        conn.close()


def bundles(apiserver) -> list[bytes]:
    out = []
    for plural in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        out += [
            base64.b64decode(w["clientConfig"]["caBundle"])
            for w in apiserver.get(plural, WEBHOOKS)["webhooks"]
        ]
    return out


def store_nearly_expired(apiserver) -> tuple[bytes, int]:
    """A CA and a 2-minute serving certificate (issued 5 minutes back-dated, so past 2/3 of its life:
    due) in the two Secrets, written as `dynmig certs` writes them. Returns (CA PEM, serial)."""
    now = utcnow()
    ca = make_ca(now)
    pair = make_serving(ca, ServiceIdentity(SERVICE, NS), now, Lifetimes(serving=dt.timedelta(minutes=2)))
    store = SecretStore(client.CoreV1Api(apiserver.api_client("certs")), NS, TLS_SECRET, CA_SECRET)
    state = CertState(ca=ca, bundle=(ca.cert,), serving=pair)
    store.save_ca(state, None)
    store.save_serving(state, None)
    return ca.cert_pem(), pair.cert.serial_number


def hold_lease(apiserver, holder: str) -> None:
    """Another replica holds the scheduler's Lease (renewed just now)."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    apiserver.create(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "dynmig-scheduler", "namespace": NS},
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": 60,
                "renewTime": now,
                "acquireTime": now,
                "leaseTransitions": 0,
            },
        }
    )


def gpu_pod(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpumem": "8000"}}}
            ]
        },
    }


def certs(apiserver, *args: str) -> int:
    """`dynmig certs ...` in-process, as the chart's hook job or an operator runs it."""
    return certs_main(
        [
            *args,
            "--kubeconfig",
            str(apiserver.kubeconfig("certs")),
            "--namespace",
            NS,
            "--service",
            SERVICE,
            "--secret",
            TLS_SECRET,
            "--ca-secret",
            CA_SECRET,
            "--mutating-webhook",
            WEBHOOKS,
            "--validating-webhook",
            WEBHOOKS,
        ]
    )


# ---- tests -----------------------------------------------------------------------------------


def test_serve_with_tls_secret_picks_up_a_forced_rotation_without_restart_and_no_request_fails(
    cluster, serve
):
    assert certs(cluster, "init") == 0
    old_serial = secret_serial(cluster)
    replica = serve("--tls-secret", TLS_SECRET, "--cert-mode", "cert-manager")
    assert replica.certificates.renewer is None  # someone else renews in this mode
    trust = trusting(secret(cluster)["ca.crt"])
    port = replica.listeners.ports[0]
    assert get(port, trust, "/readyz") == (200, old_serial)

    seen: list[int] = []
    failures: list[str] = []
    stop = threading.Event()

    def client_loop() -> None:
        while not stop.is_set():
            try:
                status, serial = get(port, trust)
                seen.append(serial)
                if status != 200:
                    failures.append(f"HTTP {status}")
            except Exception as error:  # noqa: BLE001 - every failure is what the test counts
                failures.append(repr(error))

    clients = [threading.Thread(target=client_loop) for _ in range(4)]
    for thread in clients:
        thread.start()
    try:
        eventually(lambda: len(seen) >= 20, what="requests before the rotation")
        assert certs(cluster, "rotate", "--force") == 0
        new_serial = secret_serial(cluster)
        assert new_serial != old_serial
        eventually(lambda: new_serial in seen[-8:], what="the new certificate served")
        count = len(seen)
        eventually(lambda: len(seen) >= count + 20, what="requests after the rotation")
    finally:
        stop.set()
        for thread in clients:
            thread.join(10)
    assert failures == []
    assert old_serial in seen and set(seen) == {old_serial, new_serial}
    assert seen.index(new_serial) > seen.index(old_serial)
    assert replica.certificates.reloader.loads == 2 and replica.certificates.reloader.refusals == 0
    assert replica.metric('dynmig_tls_reloads_total{result="loaded"}') == 2


def test_the_leader_in_cert_mode_self_renews_a_nearly_expired_certificate_and_injects_the_bundle(
    cluster, serve
):
    ca_pem, old_serial = store_nearly_expired(cluster)
    assert all(bundle != ca_pem for bundle in bundles(cluster))  # stale bundle before
    hold_lease(cluster, "serve-a_5d1e")  # the kube-scheduler of serve-a's pod leads
    replica = serve("--tls-secret", TLS_SECRET, "--cert-mode", "self")
    assert replica.certificates.reloader.ready()  # still valid: served at once while the leader renews
    eventually(lambda: secret_serial(cluster) != old_serial, what="the Secret renewed")
    new_serial = secret_serial(cluster)
    assert replica.service.leader.is_leader()
    eventually(
        lambda: all(bundle == ca_pem for bundle in bundles(cluster)), what="both configurations injected"
    )
    assert len(bundles(cluster)) == 3  # one mutating entry and two validating entries

    trust = trusting(ca_pem)
    eventually(
        lambda: get(replica.listeners.ports[0], trust)[1] == new_serial, what="the renewed pair served"
    )
    renewed = load_certs(secret(cluster)["tls.crt"])[0]
    assert renewed.not_valid_after_utc - renewed.not_valid_before_utc > dt.timedelta(
        days=89
    )  # --cert-validity 90d
    # counted once the rotation returns, which may be a moment after its writes were seen
    eventually(lambda: replica.metric("dynmig_cert_renewals_total") >= 1, what="the renewal counted")
    assert replica.metric("dynmig_cert_renewal_failures_total") == 0
    assert (
        replica.metric("dynmig_tls_certificate_expiry_timestamp_seconds")
        == renewed.not_valid_after_utc.timestamp()
    )
    # the API server calls the webhook over HTTPS, verifying it with the injected bundle
    client.CoreV1Api(cluster.api_client("alice")).create_namespaced_pod("team", gpu_pod("train"))
    assert cluster.get("pods", "train", "team")["spec"]["schedulerName"] == "dynmig-scheduler"


def test_a_follower_in_cert_mode_self_serves_the_secret_but_does_not_renew_it(cluster, serve):
    ca_pem, old_serial = store_nearly_expired(cluster)
    hold_lease(cluster, "serve-elsewhere")
    version = cluster.get("secrets", TLS_SECRET, NS)["metadata"]["resourceVersion"]
    stale = bundles(cluster)
    replica = serve("--tls-secret", TLS_SECRET, identity="serve-b")  # --cert-mode defaults to self
    assert replica.cfg.cert_mode == "self"
    renewer = replica.certificates.renewer
    eventually(lambda: renewer.passes >= 10, what="ten renewer passes")
    assert not replica.service.leader.is_leader()
    assert cluster.get("secrets", TLS_SECRET, NS)["metadata"]["resourceVersion"] == version
    assert bundles(cluster) == stale
    assert get(replica.listeners.ports[0], trusting(ca_pem))[1] == old_serial
    assert replica.metric("dynmig_cert_renewals_total") == 0


def test_a_replica_that_wins_the_lease_renews_and_injects_at_once_not_at_its_next_check(cluster, serve):
    """The renewer checks every 30 s here; the replica starts as a follower (another pod's kube-scheduler
    holds the Lease), so its first check finds nothing to do. When its own pod's kube-scheduler takes
    the Lease, leading wakes the renewer: the Secret is renewed and the bundle injected long before the next 30 s check."""
    ca_pem, old_serial = store_nearly_expired(cluster)
    hold_lease(cluster, "serve-elsewhere")
    stale = bundles(cluster)
    replica = serve(
        "--tls-secret", TLS_SECRET, "--cert-mode", "self", identity="serve-b", check_interval=30.0
    )
    renewer = replica.certificates.renewer
    eventually(lambda: renewer.passes >= 1, what="the first renewer check")
    assert not replica.service.leader.is_leader()
    assert bundles(cluster) == stale and secret_serial(cluster) == old_serial
    # the other pod's kube-scheduler is gone and the one in serve-b's pod took the Lease
    client.CoordinationV1Api(cluster.api_client("admin")).delete_namespaced_lease("dynmig-scheduler", NS)
    hold_lease(cluster, "serve-b_8c0a")
    # the renewer publishes the bundle before it writes the Secret: wait for both
    eventually(
        lambda: all(bundle == ca_pem for bundle in bundles(cluster)) and secret_serial(cluster) != old_serial,
        timeout=10,
        what="the new leader injecting the bundle and renewing the Secret",
    )
    assert replica.service.leader.is_leader()
    assert renewer.passes <= 3  # woken by leadership, not by the 30 s check interval
    assert replica.metric("dynmig_cert_renewal_failures_total") == 0


def test_renewal_while_the_api_is_down_is_retried_counted_and_succeeds_when_it_is_back(cluster, serve):
    """One replica without leader election (leadership itself needs the API): it starts while the
    API is down, so it has no certificate and is not ready; each renewal attempt fails and is counted;
    once the API is back the due certificate is renewed, reloaded, and the server becomes ready."""
    ca_pem, old_serial = store_nearly_expired(cluster)
    cluster.down()
    replica = serve("--tls-secret", TLS_SECRET, "--leader-elect", "false", wait=None)
    eventually(
        lambda: replica.metric("dynmig_cert_renewal_failures_total") >= 3, what="three failed renewals"
    )
    assert replica.service.ready()[0] is False and replica.metric("dynmig_tls_ready") == 0
    assert replica.certificates.renewer.last_error
    cluster.up()
    eventually(
        lambda: secret_serial(cluster) != old_serial, what="the Secret renewed after the API came back"
    )
    new_serial = secret_serial(cluster)
    eventually(lambda: replica.certificates.reloader.ready() and replica.service.ready()[0], what="ready")
    trust = trusting(ca_pem)
    eventually(
        lambda: get(replica.listeners.ports[0], trust, "/readyz") == (200, new_serial),
        what="the renewed pair served and ready",
    )
    assert replica.metric("dynmig_cert_renewals_total") >= 1
    assert replica.certificates.renewer.failures == 0  # consecutive failures reset by the success
    assert all(bundle == ca_pem for bundle in bundles(cluster))


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--cert-mode", "self"], "--tls-secret"),
        (["--cert-mode", "files"], "--tls-cert"),
        (["--tls-secret", "s", "--ca-secret", "s"], "--ca-secret"),
        (["--tls-secret", "s", "--cert-validity", "6y"], "--cert-validity"),
    ],
)
def test_tls_settings_that_cannot_serve_are_refused_naming_the_flag(flags, named):
    problem = settings_problem(parse_args(flags))
    assert problem and named in problem


@pytest.mark.parametrize(
    ("flags", "env", "named"),
    [
        (["--cert-mode", "vault"], {}, "--cert-mode"),
        ([], {"DYNMIG_CERT_MODE": "vault"}, "DYNMIG_CERT_MODE"),
        ([], {"DYNMIG_CERT_KEY_TYPE": "dsa"}, "DYNMIG_CERT_KEY_TYPE"),
        (["--cert-validity", "ninety days"], {}, "--cert-validity"),
    ],
)
def test_a_bad_certificate_flag_or_environment_value_is_a_usage_error_naming_it(
    flags, env, named, monkeypatch, capsys
):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(SystemExit) as exit_:
        parse_args(flags)
    assert exit_.value.code == 2
    assert named in capsys.readouterr().err


def test_the_chart_environment_selects_the_secret_and_self_renewal_and_files_stay_the_default(monkeypatch):
    files = parse_args(["--tls-cert", "/tls/tls.crt", "--tls-key", "/tls/tls.key"])
    assert (files.cert_mode, files.tls_secret, settings_problem(files)) == ("files", "", None)
    for key, value in {
        "DYNMIG_CERT_MODE": "self",
        "DYNMIG_TLS_SECRET": "dynmig-tls",
        "DYNMIG_SERVICE": "dynmig",
        "DYNMIG_CA_SECRET": "dynmig-ca",
        "DYNMIG_CERT_KEY_TYPE": "rsa",
        "DYNMIG_CERT_VALIDITY": "30d",
        "DYNMIG_CA_VALIDITY": "2y",
    }.items():
        monkeypatch.setenv(key, value)
    cfg = parse_args(["--tls-cert", "/tls/tls.crt", "--tls-key", "/tls/tls.key"])
    assert (cfg.cert_mode, cfg.tls_secret, cfg.ca_secret, cfg.cert_key_type) == (
        "self",
        "dynmig-tls",
        "dynmig-ca",
        "rsa",
    )
    assert (cfg.cert_validity, cfg.ca_validity) == (dt.timedelta(days=30), dt.timedelta(days=730))
    assert settings_problem(cfg) is None
