"""Test servers the simulated control plane calls out to: a CA with a serving certificate, and a
tiny JSON-over-HTTP(S) server on loopback that keeps every call it answers."""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

Reply = Callable[[str, dict], dict]


def _cert(subject: str, key, issuer_name, issuer_key, ca: bool, sans: list[x509.GeneralName]):
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def make_pki(tmp: Path, dns: str) -> tuple[bytes, Path, Path]:
    """A CA and a serving cert for 127.0.0.1 and `dns`: (CA PEM, cert file, key file)."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    ca = _cert("test-ca", ca_key, ca_name, ca_key, True, [])
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = _cert(
        "webhook",
        key,
        ca_name,
        ca_key,
        False,
        [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName(dns)],
    )
    crt, kf = tmp / "tls.crt", tmp / "tls.key"
    crt.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    kf.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return ca.public_bytes(serialization.Encoding.PEM), crt, kf


class JsonServer:
    """Answers each POST with `reply(path, body)` as JSON, over TLS when `tls` is (cert, key) files;
    keeps every call as (path, body). Started on a loopback port chosen by the OS; `stop()` ends it."""

    def __init__(self, reply: Reply, tls: tuple[Path, Path] | None = None):
        self.calls: list[tuple[str, dict]] = []
        outer = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.calls.append((self.path, body))
                data = json.dumps(reply(self.path, body)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(tls[0], tls[1])
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
