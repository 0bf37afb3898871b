"""The certificate authority: pure functions that make and judge a CA and a serving certificate.

No I/O here: every function takes the current time, so rotation decisions are tested as tables
of (certificate, now) cases and the Kubernetes and TLS layers stay thin.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass, field
from enum import StrEnum

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Certificates start a little in the past so a node whose clock lags does not see them as
# "not yet valid". The issue time is recovered as not_valid_before + BACKDATE.
BACKDATE = dt.timedelta(minutes=5)

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


class KeyType(StrEnum):
    ECDSA = "ecdsa"  # P-256: small, fast handshakes; the default
    RSA = "rsa"  # 2048 bits: for clients that cannot do ECDSA


@dataclass(frozen=True)
class ServiceIdentity:
    """Who the serving certificate speaks for: the webhook/extender Service, plus extra hosts."""

    service: str
    namespace: str
    extra_hosts: tuple[str, ...] = ()

    def dns_names(self) -> list[str]:
        svc, ns = self.service, self.namespace
        names = [f"{svc}.{ns}.svc", f"{svc}.{ns}.svc.cluster.local", svc, f"{svc}.{ns}"]
        names += [h for h in self.extra_hosts if not _is_ip(h)]
        return list(dict.fromkeys(names))

    def ip_addresses(self) -> list[str]:
        ips = ["127.0.0.1"] + [h for h in self.extra_hosts if _is_ip(h)]
        return list(dict.fromkeys(ips))


@dataclass(frozen=True)
class Lifetimes:
    """Validity and renewal points. Defaults follow cert-manager's habit (renew at 2/3 of life).

    `bundle_overlap` is how long a new CA sits in the CA bundle before anything is signed by it,
    and how long the old CA stays after the serving certificate moved on: it must exceed the time
    the API server and every replica need to see a new bundle (seconds) or Secret (1-2 minutes).
    """

    serving: dt.timedelta = dt.timedelta(days=90)
    ca: dt.timedelta = dt.timedelta(days=5 * 365)
    renew_fraction: float = 2 / 3
    bundle_overlap: dt.timedelta = dt.timedelta(hours=1)

    def __post_init__(self) -> None:
        if not 0 < self.renew_fraction < 1:
            raise ValueError(f"renew_fraction must be between 0 and 1 (exclusive), got {self.renew_fraction}")
        if self.serving <= dt.timedelta(0) or self.ca <= dt.timedelta(0):
            raise ValueError("validity must be positive")
        if self.serving >= self.ca:
            raise ValueError(
                f"serving validity ({self.serving}) must be shorter than CA validity ({self.ca})"
            )


@dataclass(frozen=True)
class KeyPair:
    """A certificate with its private key (the key may be absent for a CA we only trust)."""

    cert: x509.Certificate
    key: PrivateKey | None = field(default=None, repr=False)

    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def key_pem(self) -> bytes:
        if self.key is None:
            raise ValueError("no private key")
        return key_to_pem(self.key)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def new_key(key_type: KeyType = KeyType.ECDSA) -> PrivateKey:
    if key_type is KeyType.RSA:
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ec.generate_private_key(ec.SECP256R1())


def key_to_pem(key: PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def make_ca(
    now: dt.datetime, lifetimes: Lifetimes = Lifetimes(), key_type: KeyType = KeyType.ECDSA
) -> KeyPair:
    """A self-signed CA that may sign only leaf certificates (path length 0).

    Each CA gets a distinct subject (its issue time), so old and new CA in one bundle are told
    apart by name as well as by key identifier.
    """
    key = new_key(key_type)
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "dynmig"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"dynmig webhook CA {now:%Y%m%dT%H%M%SZ}"),
        ]
    )
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + lifetimes.ca)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(digital_signature=True, cert_sign=True), critical=True)
        .add_extension(ski, critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert, key)


def make_serving(
    ca: KeyPair,
    identity: ServiceIdentity,
    now: dt.datetime,
    lifetimes: Lifetimes = Lifetimes(),
    key_type: KeyType = KeyType.ECDSA,
) -> KeyPair:
    """A server certificate for the Service's DNS names and loopback, signed by `ca`.

    Its life never outlasts the CA's: a leaf that outlives its issuer would fail verification.
    """
    if ca.key is None:
        raise ValueError("the CA has no private key, so it cannot sign")
    key = new_key(key_type)
    not_after = min(now + lifetimes.serving, ca.cert.not_valid_after_utc)
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in identity.dns_names()]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in identity.ip_addresses()]
    ca_ski = ca.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, identity.dns_names()[0])]))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            _usage(digital_signature=True, key_encipherment=key_type is KeyType.RSA), critical=True
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    return KeyPair(cert, key)


def _usage(
    digital_signature: bool = False, key_encipherment: bool = False, cert_sign: bool = False
) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=digital_signature,
        content_commitment=False,
        key_encipherment=key_encipherment,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


# ---- judging certificates -------------------------------------------------------------------


def issued_at(cert: x509.Certificate) -> dt.datetime:
    return cert.not_valid_before_utc + BACKDATE


def renewal_time(cert: x509.Certificate, fraction: float) -> dt.datetime:
    """When a certificate is due: `fraction` of the way from its start to its end."""
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return start + (end - start) * fraction


def needs_renewal(
    cert: x509.Certificate, now: dt.datetime, fraction: float = Lifetimes().renew_fraction
) -> bool:
    return now >= renewal_time(cert, fraction)


def is_expired(cert: x509.Certificate, now: dt.datetime) -> bool:
    return not cert.not_valid_before_utc <= now < cert.not_valid_after_utc


def key_matches(cert: x509.Certificate, key: PrivateKey) -> bool:
    fmt = serialization.PublicFormat.SubjectPublicKeyInfo
    enc = serialization.Encoding.DER
    return cert.public_key().public_bytes(enc, fmt) == key.public_key().public_bytes(enc, fmt)


def san_names(cert: x509.Certificate) -> list[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [str(n) for n in san.get_values_for_type(x509.DNSName)] + [
        str(ip) for ip in san.get_values_for_type(x509.IPAddress)
    ]


def missing_names(cert: x509.Certificate, identity: ServiceIdentity) -> list[str]:
    have = set(san_names(cert))
    return [n for n in identity.dns_names() + identity.ip_addresses() if n not in have]


def signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    """True when `ca`'s key signed `cert` (signature checked, not just the names compared)."""
    if cert.issuer != ca.subject:
        return False
    try:
        cert.verify_directly_issued_by(ca)
    except (InvalidSignature, ValueError, TypeError):  # wrong key, or unsupported key types
        return False
    return True


def fingerprint(cert: x509.Certificate) -> str:
    return cert.fingerprint(hashes.SHA256()).hex()


# ---- PEM ------------------------------------------------------------------------------------


def load_certs(pem: bytes) -> list[x509.Certificate]:
    """All certificates in a PEM blob, in order. Raises ValueError on garbage."""
    if not pem or b"-----BEGIN CERTIFICATE-----" not in pem:
        raise ValueError("no PEM certificate found")
    return x509.load_pem_x509_certificates(pem)


def load_key(pem: bytes) -> PrivateKey:
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey)):
        raise TypeError(f"unsupported private key type {type(key).__name__}; use ECDSA or RSA")
    return key


def certs_to_pem(certs: list[x509.Certificate] | tuple[x509.Certificate, ...]) -> bytes:
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)
