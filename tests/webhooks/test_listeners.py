"""Only kube-scheduler reaches /filter and /bind: they are served on their own listener (loopback by
default, client certificates optional), never on the webhook port the Service exposes; and a pod no
node can ever hold (10^8 devices) stays Pending with an event naming the cap."""

from __future__ import annotations

import datetime as dt
import json
import socket
import ssl
import urllib.error
import urllib.request

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubernetes import client
from kubernetes.client.rest import ApiException
from waiting_testkit import eventually
from webhooks_testkit import gpu_pod, node

from mig.annotations import WEBHOOK_IGNORE_LABEL

CAP = "nvidia.com/gpu 100000000 is more than 128 devices"


def absurd_pod(name: str = "absurd", skip_webhooks: bool = False) -> dict:
    pod = gpu_pod(name)
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "100000000"
    if skip_webhooks:  # as if the webhook were down with failurePolicy Ignore
        pod["metadata"]["labels"] = {WEBHOOK_IGNORE_LABEL: "ignore"}
    return pod


def events(apiserver, reason: str) -> list[str]:
    found = client.CoreV1Api(apiserver.api_client("admin")).list_namespaced_event(
        "team", _preload_content=False
    )
    return [e["message"] for e in json.loads(found.data)["items"] if e["reason"] == reason]


def test_a_pod_asking_for_an_absurd_device_count_is_pending_with_an_event_naming_the_cap(apiserver, cluster):
    apiserver.create(node("n1"))
    client.CoreV1Api(apiserver.api_client("alice")).create_namespaced_pod(
        "team", absurd_pod(skip_webhooks=True)
    )
    assert eventually(lambda: any(CAP in m for m in events(apiserver, "FailedScheduling")))
    assert apiserver.get("pods", "absurd", "team")["spec"].get("nodeName") is None
    assert cluster.service.fleet.placements()["GPU-n1-0"] == []


def test_creating_an_absurd_pod_through_the_webhooks_is_denied_naming_the_cap(apiserver, cluster):
    with pytest.raises(ApiException) as denied:
        client.CoreV1Api(apiserver.api_client("alice")).create_namespaced_pod("team", absurd_pod())
    assert CAP in denied.value.body


def _post(url: str, ctx: ssl.SSLContext) -> int:
    request = urllib.request.Request(url, data=b"{}", headers={"Content-Type": "application/json"})
    try:
        return urllib.request.urlopen(request, context=ctx, timeout=5).status
    except urllib.error.HTTPError as error:
        return error.code


def test_the_webhook_port_does_not_serve_filter_or_bind(cluster):
    ctx = ssl.create_default_context(cadata=cluster.ca.cert_pem().decode())
    for verb in ("filter", "bind"):
        assert _post(f"{cluster.listeners.url}/{verb}", ctx) == 404
        assert _post(f"{cluster.listeners.extender_url}/{verb}", ctx) in (200, 400)  # served there


def _outside_address() -> str | None:
    """An address of this machine that is not loopback, as another pod would dial it."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))
            address = s.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") else address


def test_the_extender_is_not_reachable_from_outside_the_pod(cluster):
    address = _outside_address()
    if address is None:
        pytest.skip("this machine has no non-loopback address")
    port = int(cluster.listeners.extender_url.rsplit(":", 1)[1])
    with pytest.raises(OSError):
        socket.create_connection((address, port), timeout=2).close()


def _client_pair(ca, tmp_path):
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-scheduler")]))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    crt, pem = tmp_path / "client.crt", tmp_path / "client.key"
    crt.write_bytes(cert.public_bytes(Encoding.PEM))
    pem.write_bytes(key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    return crt, pem


def test_with_a_client_ca_the_extender_requires_a_certificate_it_signed(cluster, tmp_path):
    from certs.authority import make_ca
    from webhooks.runner import Extender, Listeners
    from webhooks.tls import extender_tls

    client_ca = make_ca(dt.datetime.now(dt.UTC))
    ca_file = tmp_path / "client-ca.crt"
    ca_file.write_bytes(client_ca.cert_pem())
    service = cluster.service
    listeners = Listeners(
        service.app,
        None,
        tls=cluster.tls,
        extender=Extender(service.extender_app, tls=extender_tls(cluster.tls, str(ca_file))),
    )
    listeners.start()
    try:
        url = f"{listeners.extender_url}/bind"
        anonymous = ssl.create_default_context(cadata=cluster.ca.cert_pem().decode())
        with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
            _post(url, anonymous)
        signed = ssl.create_default_context(cadata=cluster.ca.cert_pem().decode())
        signed.load_cert_chain(*_client_pair(client_ca, tmp_path))
        assert _post(url, signed) == 200
        other = ssl.create_default_context(cadata=cluster.ca.cert_pem().decode())
        other.load_cert_chain(*_client_pair(make_ca(dt.datetime.now(dt.UTC)), tmp_path))
        with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
            _post(url, other)
        assert (
            _post(f"{listeners.url}/mutate", anonymous) == 400
        )  # the webhook listener asks for no certificate
    finally:
        listeners.stop()
