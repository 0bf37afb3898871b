"""Certificates kept in Kubernetes Secrets, through the official client.

Two Secrets, so a pod that mounts the serving pair never sees the CA key:
  serving (type kubernetes.io/tls): tls.crt, tls.key, ca.crt (= the CA bundle clients trust)
  CA (type Opaque):                 ca.crt (the signing CA), ca.key, bundle.crt (the CA bundle)
Writes carry the resourceVersion that was read, so two writers (the Helm hook and the server's
renewer) cannot silently overwrite each other: the loser gets a 409 and tries again later.
"""

from __future__ import annotations

import base64
import contextlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cryptography import x509

from certs.authority import KeyPair, certs_to_pem, load_certs, load_key
from certs.rotation import CertState
from kube.errors import NotFound, translated

if TYPE_CHECKING:
    from kubernetes import client

log = logging.getLogger(__name__)

MANAGED_LABEL = "dynmig.io/certs"
MANAGED_VALUE = "managed"


class StoreError(RuntimeError):
    """A Secret cannot be used; the message names it and the fix."""


def decode_data(secret: dict[str, Any] | client.V1Secret) -> dict[str, bytes]:
    """A Secret's data as bytes (works for client objects and plain dicts)."""
    data = secret.get("data") if isinstance(secret, dict) else secret.data
    return {k: base64.b64decode(v) for k, v in (data or {}).items()}


def _encode(data: dict[str, bytes]) -> dict[str, bytes | str]:
    return {k: base64.b64encode(v).decode() for k, v in data.items()}


@dataclass
class Loaded:
    state: CertState
    serving_version: str | None  # resourceVersion, None when the Secret does not exist
    ca_version: str | None
    problems: list[str]


class SecretStore:
    def __init__(
        self, core_api: client.CoreV1Api, namespace: str, serving_secret: str, ca_secret: str
    ) -> None:
        if serving_secret == ca_secret:
            raise StoreError(
                "--secret and --ca-secret must differ: the CA key must not sit beside the serving pair"
            )
        self.api, self.namespace = core_api, namespace
        self.serving_secret, self.ca_secret = serving_secret, ca_secret

    def _read(self, name: str) -> client.V1Secret | None:
        try:
            with translated(f"reading Secret {self.namespace}/{name}"):
                secret = self.api.read_namespaced_secret(name, self.namespace)
        except NotFound:
            return None
        labels = secret.metadata.labels or {}
        if labels.get(MANAGED_LABEL) != MANAGED_VALUE:
            raise StoreError(
                f"Secret {self.namespace}/{name} exists but is not managed by dynmig certs "
                f"(label {MANAGED_LABEL}={MANAGED_VALUE} missing); delete it or choose another name"
            )
        return secret

    def load(self) -> Loaded:
        serving, ca = self._read(self.serving_secret), self._read(self.ca_secret)
        problems: list[str] = []
        state_ca: KeyPair | None = None
        bundle: tuple[x509.Certificate, ...] = ()
        pair: KeyPair | None = None
        if ca is not None:
            data = decode_data(ca)
            try:
                state_ca = KeyPair(load_certs(data.get("ca.crt", b""))[0], load_key(data.get("ca.key", b"")))
            except (ValueError, TypeError) as error:
                problems.append(f"Secret {self.ca_secret}: ca.crt/ca.key unusable ({error})")
            try:
                bundle = tuple(load_certs(data.get("bundle.crt", b"")))
            except ValueError as error:
                problems.append(f"Secret {self.ca_secret}: bundle.crt unusable ({error})")
        if serving is not None:
            data = decode_data(serving)
            try:
                pair = KeyPair(load_certs(data.get("tls.crt", b""))[0], load_key(data.get("tls.key", b"")))
            except (ValueError, TypeError) as error:
                problems.append(f"Secret {self.serving_secret}: tls.crt/tls.key unusable ({error})")
            if not bundle:
                with contextlib.suppress(ValueError):
                    bundle = tuple(load_certs(data.get("ca.crt", b"")))
        return Loaded(
            CertState(ca=state_ca, bundle=bundle, serving=pair),
            serving.metadata.resource_version if serving is not None else None,
            ca.metadata.resource_version if ca is not None else None,
            problems,
        )

    def save_ca(self, state: CertState, version: str | None) -> None:
        assert state.ca is not None, "save_ca is given the reconciled state, which always has a CA"
        data = {
            "ca.crt": state.ca.cert_pem(),
            "ca.key": state.ca.key_pem(),
            "bundle.crt": certs_to_pem(state.bundle),
        }
        self._write(self.ca_secret, "Opaque", data, version)

    def save_serving(self, state: CertState, version: str | None) -> None:
        assert state.serving is not None, (
            "save_serving is given the reconciled state, which always has a pair"
        )
        data = {
            "tls.crt": state.serving.cert_pem(),
            "tls.key": state.serving.key_pem(),
            "ca.crt": certs_to_pem(state.bundle),
        }
        self._write(self.serving_secret, "kubernetes.io/tls", data, version)

    def _write(self, name: str, kind: str, data: dict[str, bytes], version: str | None) -> None:
        from kubernetes import client

        body = client.V1Secret(
            metadata=client.V1ObjectMeta(
                name=name,
                namespace=self.namespace,
                labels={MANAGED_LABEL: MANAGED_VALUE},
                resource_version=version,
            ),
            type=kind,
            data=_encode(data),
        )
        if version is None:
            self.api.create_namespaced_secret(self.namespace, body)
        else:
            self.api.replace_namespaced_secret(name, self.namespace, body)
        log.info("wrote Secret %s/%s", self.namespace, name)
