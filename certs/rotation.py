"""Rotation as a pure step: (current certificates, now) -> (next certificates, what changed).

The order of a CA rollover keeps every client verifying:
  1. the CA reaches 2/3 of its life: a new CA is made and *added* to the bundle; the serving
     certificate stays signed by the old CA (clients learn the new CA first);
  2. once the new CA has been in the bundle for `bundle_overlap`, the next serving certificate
     is signed by it;
  3. once no serving certificate signed by the old CA remains and the new serving certificate has
     been out for `bundle_overlap` (every replica reloaded it), the old CA leaves the bundle.
Expired CAs always leave the bundle.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, replace

from cryptography import x509

from certs.authority import (
    KeyPair,
    KeyType,
    Lifetimes,
    ServiceIdentity,
    fingerprint,
    is_expired,
    issued_at,
    key_matches,
    make_ca,
    make_serving,
    missing_names,
    needs_renewal,
    signed_by,
)


@dataclass(frozen=True)
class CertState:
    """Everything rotation knows: the signing CA, the trusted bundle, the serving pair."""

    ca: KeyPair | None = None
    bundle: tuple[x509.Certificate, ...] = ()
    serving: KeyPair | None = None


@dataclass(frozen=True)
class Policy:
    identity: ServiceIdentity
    lifetimes: Lifetimes = field(default_factory=Lifetimes)
    key_type: KeyType = KeyType.ECDSA


def serving_problem(state: CertState, policy: Policy, now: dt.datetime) -> str | None:
    """Why the serving pair cannot be served as it is (None when it can)."""
    pair = state.serving
    if pair is None or pair.key is None:
        return "no serving certificate"
    if not key_matches(pair.cert, pair.key):
        return "serving key does not match its certificate"
    if is_expired(pair.cert, now):
        return (
            f"serving certificate is outside its validity ({pair.cert.not_valid_after_utc:%Y-%m-%d %H:%M}Z)"
        )
    missing = missing_names(pair.cert, policy.identity)
    if missing:
        return f"serving certificate lacks names {', '.join(missing)}"
    if not any(signed_by(pair.cert, ca) for ca in state.bundle if not is_expired(ca, now)):
        return "serving certificate is not signed by any CA in the bundle"
    return None


def ca_problem(state: CertState, now: dt.datetime) -> str | None:
    ca = state.ca
    if ca is None or ca.key is None:
        return "no CA"
    if not key_matches(ca.cert, ca.key):
        return "CA key does not match the CA certificate"
    if is_expired(ca.cert, now):
        return "CA is expired"
    return None


def reconcile(
    state: CertState, policy: Policy, now: dt.datetime, force: bool = False
) -> tuple[CertState, list[str]]:
    """One rotation step. Returns the next state and human-readable changes (empty: nothing to do).

    `force` reissues the serving certificate now, signed by the current CA, even if it is not due.
    """
    changes: list[str] = []
    lt = policy.lifetimes
    bundle = [c for c in state.bundle if not is_expired(c, now)]
    if len(bundle) < len(state.bundle):
        changes.append("dropped expired CA(s) from the bundle")

    new_ca = _why_new_ca(state, now, lt, bundle)
    if new_ca:
        # An unusable CA cannot keep signing; a due one hands over. The old certificate stays in the
        # bundle while valid so the serving certificate it signed keeps verifying until replaced.
        ca = make_ca(now, lt, policy.key_type)
        bundle.append(ca.cert)
        changes.append(new_ca)
    else:
        assert state.ca is not None, "no CA is a ca_problem, so _why_new_ca asked for a new one"
        ca = state.ca
    if not any(fingerprint(c) == fingerprint(ca.cert) for c in bundle):
        bundle.append(ca.cert)
        changes.append("current CA added to the bundle")

    serving = state.serving
    reissue = _why_reissue(replace(state, ca=ca, bundle=tuple(bundle)), policy, now, force)
    if reissue:
        serving = make_serving(ca, policy.identity, now, lt, policy.key_type)
        changes.append(reissue)
    assert serving is not None, "no serving pair is a serving_problem, so _why_reissue asked for one"

    kept = [c for c in bundle if _still_needed(c, ca, serving, now, lt)]
    if len(kept) < len(bundle):
        changes.append("old CA removed from the bundle (rollover complete)")
    return CertState(ca=ca, bundle=tuple(kept), serving=serving), changes


def _why_new_ca(
    state: CertState, now: dt.datetime, lt: Lifetimes, bundle: list[x509.Certificate]
) -> str | None:
    """Why a new CA must be made now (None: keep the current one)."""
    broken = ca_problem(state, now)
    if broken:
        return f"new CA ({broken})"
    assert state.ca is not None, "no CA is a ca_problem"
    if needs_renewal(state.ca.cert, now, lt.renew_fraction) and _is_newest(state.ca.cert, bundle):
        return "CA rollover started: new CA added to the bundle"
    return None


def _why_reissue(current: CertState, policy: Policy, now: dt.datetime, force: bool) -> str | None:
    """Why the serving certificate must be reissued by `current.ca` now (None: keep it)."""
    ca, serving, lt = current.ca, current.serving, policy.lifetimes
    problem = serving_problem(current, policy, now)
    if problem:
        return f"new serving certificate ({problem})"
    assert ca is not None and serving is not None, "reconcile passes its CA; no pair is a serving_problem"
    if force:
        return "new serving certificate (forced)"
    ca_settled = now - issued_at(ca.cert) >= lt.bundle_overlap
    if not signed_by(serving.cert, ca.cert) and ca_settled:
        return "new serving certificate signed by the new CA"
    if needs_renewal(serving.cert, now, lt.renew_fraction) and (
        signed_by(serving.cert, ca.cert) or ca_settled
    ):
        return "serving certificate renewed (due)"
    return None


def _is_newest(ca: x509.Certificate, bundle: list[x509.Certificate]) -> bool:
    return all(c.not_valid_before_utc <= ca.not_valid_before_utc for c in bundle)


def _still_needed(
    cert: x509.Certificate, ca: KeyPair, serving: KeyPair, now: dt.datetime, lt: Lifetimes
) -> bool:
    if fingerprint(cert) == fingerprint(ca.cert) or signed_by(serving.cert, cert):
        return True
    # Replicas may still serve the previous certificate until they reload the new one.
    return now - issued_at(serving.cert) < lt.bundle_overlap


def bundle_union(*bundles: tuple[x509.Certificate, ...]) -> tuple[x509.Certificate, ...]:
    """Certificates of all bundles, once each, in first-seen order (published before a switch)."""
    seen: dict[str, x509.Certificate] = {}
    for bundle in bundles:
        for cert in bundle:
            seen.setdefault(fingerprint(cert), cert)
    return tuple(seen.values())
