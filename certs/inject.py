"""Put the CA bundle into `caBundle` of every webhook of the named webhook configurations.

The API server verifies the webhook's serving certificate against that bundle, so during a CA
rollover the bundle carries the old and the new CA. The patch is a JSON patch per webhook entry
with a `test` on the entry's name, so a concurrent reorder (a Helm upgrade) fails instead of
writing a bundle into the wrong entry.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kube.errors import KubeError, NotFound, translated

if TYPE_CHECKING:
    from kubernetes import client

log = logging.getLogger(__name__)


class InjectError(RuntimeError):
    """Injection failed; the message names the configuration and the reason."""


@dataclass(frozen=True)
class Injected:
    kind: str
    name: str
    outcome: str  # "patched", "unchanged", "absent"

    def describe(self) -> str:
        if self.outcome == "absent":
            return f"{self.kind} {self.name} not found; skipped (is the chart installed, is the name right?)"
        return f"{self.kind} {self.name}: caBundle {self.outcome}"


def inject_ca_bundle(
    admission_api: client.AdmissionregistrationV1Api,
    bundle_pem: bytes,
    mutating: str | None = None,
    validating: str | None = None,
    require_one: bool = True,
) -> list[Injected]:
    """Inject into each named configuration; an absent one is reported, not an error, unless
    every named configuration is absent and `require_one` (then nothing was protected:
    InjectError). `require_one=False` suits a pre-install hook, which runs before Helm creates
    the configurations."""
    if not bundle_pem:
        raise InjectError("empty CA bundle; run `dynmig certs init` first")
    encoded = base64.b64encode(bundle_pem).decode()
    targets: list[tuple[str, str, Callable[[str], Any], Callable[[str, list[dict[str, str]]], Any]]] = []
    if mutating:
        targets.append(
            (
                "MutatingWebhookConfiguration",
                mutating,
                admission_api.read_mutating_webhook_configuration,
                admission_api.patch_mutating_webhook_configuration,
            )
        )
    if validating:
        targets.append(
            (
                "ValidatingWebhookConfiguration",
                validating,
                admission_api.read_validating_webhook_configuration,
                admission_api.patch_validating_webhook_configuration,
            )
        )
    if not targets:
        raise InjectError(
            "no webhook configuration named; pass --mutating-webhook and/or --validating-webhook"
        )
    results = [_inject_one(kind, name, read, patch, encoded) for kind, name, read, patch in targets]
    for result in results:  # serve injects on every check: an unchanged bundle is not news
        level = {"absent": logging.WARNING, "unchanged": logging.DEBUG}.get(result.outcome, logging.INFO)
        log.log(level, result.describe())
    if require_one and all(r.outcome == "absent" for r in results):
        raise InjectError("; ".join(r.describe() for r in results))
    return results


def _inject_one(
    kind: str,
    name: str,
    read: Callable[[str], Any],
    patch: Callable[[str, list[dict[str, str]]], Any],
    encoded: str,
) -> Injected:
    try:
        with translated(f"reading {kind} {name}"):
            config = read(name)
    except NotFound:
        return Injected(kind, name, "absent")
    except KubeError as error:
        raise InjectError(str(error)) from None
    ops = []
    for index, webhook in enumerate(config.webhooks or []):
        if webhook.client_config.ca_bundle in (encoded, encoded.encode()):
            continue
        ops.append({"op": "test", "path": f"/webhooks/{index}/name", "value": webhook.name})
        ops.append({"op": "add", "path": f"/webhooks/{index}/clientConfig/caBundle", "value": encoded})
    if not ops:
        return Injected(kind, name, "unchanged")
    try:
        with translated(f"patching {kind} {name}"):
            patch(name, ops)
    except KubeError as error:
        raise InjectError(str(error)) from None
    return Injected(kind, name, "patched")
