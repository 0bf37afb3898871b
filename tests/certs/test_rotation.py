"""Rotation decisions as a table of (state, time) cases; no I/O."""

from __future__ import annotations

import datetime as dt

import pytest
from certs_testkit import IDENTITY
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from certs.authority import (
    KeyType,
    Lifetimes,
    ServiceIdentity,
    make_ca,
    make_serving,
    needs_renewal,
    san_names,
    signed_by,
    utcnow,
)
from certs.rotation import CertState, Policy, reconcile

DAY = dt.timedelta(days=1)
POLICY = Policy(IDENTITY)


def fresh(now):
    state, _ = reconcile(CertState(), POLICY, now)
    return state


@pytest.mark.parametrize(
    "key_type, key_class", [(KeyType.ECDSA, ec.EllipticCurvePublicKey), (KeyType.RSA, rsa.RSAPublicKey)]
)
def test_the_serving_certificate_names_the_service_and_loopback_and_uses_the_chosen_key_type(
    key_type, key_class
):
    now = utcnow().replace(microsecond=0)
    ca = make_ca(now, key_type=key_type)
    identity = ServiceIdentity("dynmig", "gpu", ("dynmig.example.com", "10.0.0.7"))
    pair = make_serving(ca, identity, now, key_type=key_type)
    assert set(san_names(pair.cert)) == {
        "dynmig.gpu.svc",
        "dynmig.gpu.svc.cluster.local",
        "dynmig",
        "dynmig.gpu",
        "dynmig.example.com",
        "127.0.0.1",
        "10.0.0.7",
    }
    assert isinstance(pair.cert.public_key(), key_class)
    assert signed_by(pair.cert, ca.cert)
    assert pair.cert.not_valid_after_utc - now == dt.timedelta(days=90)
    assert ca.cert.not_valid_after_utc - now == dt.timedelta(days=5 * 365)


@pytest.mark.parametrize(
    "age_days, due",
    [(0, False), (59, False), (60.5, True), (89, True), (91, True)],
)
def test_a_90_day_serving_certificate_is_due_at_two_thirds_of_its_life(age_days, due):
    issued = utcnow()
    pair = make_serving(make_ca(issued), IDENTITY, issued)
    assert needs_renewal(pair.cert, issued + dt.timedelta(days=age_days)) is due


def test_init_on_an_empty_cluster_makes_a_ca_a_bundle_and_a_serving_certificate():
    now = utcnow()
    state, changes = reconcile(CertState(), POLICY, now)
    assert state.bundle == (state.ca.cert,)
    assert signed_by(state.serving.cert, state.ca.cert)
    assert any("new CA" in c for c in changes)


def test_a_valid_state_is_kept_as_it_is():
    now = utcnow()
    state = fresh(now)
    again, changes = reconcile(state, POLICY, now + 10 * DAY)
    assert changes == []
    assert again == state


def test_a_due_serving_certificate_is_renewed_by_the_same_ca():
    now = utcnow()
    state = fresh(now)
    later, changes = reconcile(state, POLICY, now + 61 * DAY)
    assert changes == ["serving certificate renewed (due)"]
    assert later.ca == state.ca
    assert later.serving.cert.serial_number != state.serving.cert.serial_number


def test_force_reissues_the_serving_certificate_even_when_not_due():
    now = utcnow()
    state = fresh(now)
    later, changes = reconcile(state, POLICY, now, force=True)
    assert changes == ["new serving certificate (forced)"]
    assert later.serving != state.serving


@pytest.mark.parametrize(
    "breakage, expected",
    [
        (lambda s, now: CertState(s.ca, s.bundle, None), "no serving certificate"),
        (
            lambda s, now: CertState(s.ca, s.bundle, type(s.serving)(s.serving.cert, make_ca(now).key)),
            "does not match",
        ),
        (
            lambda s, now: CertState(s.ca, s.bundle, make_serving(s.ca, ServiceIdentity("old", "name"), now)),
            "lacks names",
        ),
        (
            lambda s, now: CertState(s.ca, s.bundle, make_serving(make_ca(now), IDENTITY, now)),
            "not signed by any CA in the bundle",
        ),
    ],
)
def test_an_unusable_serving_certificate_is_replaced_at_once(breakage, expected):
    now = utcnow()
    state = breakage(fresh(now), now)
    later, changes = reconcile(state, POLICY, now)
    assert any(expected in c for c in changes), changes
    assert signed_by(later.serving.cert, later.ca.cert)


def test_a_ca_rollover_adds_before_it_switches_and_removes_only_after_the_overlap():
    lt = Lifetimes(bundle_overlap=dt.timedelta(hours=1))
    policy = Policy(IDENTITY, lt)
    t0 = utcnow()
    state = reconcile(CertState(), policy, t0)[0]
    due = t0 + lt.ca * 2 / 3 + DAY
    state = reconcile(state, policy, due - 2 * DAY)[0]  # a routine serving renewal
    old_ca, old_serving = state.ca, state.serving

    step1, changes = reconcile(state, policy, due)
    assert "CA rollover started: new CA added to the bundle" in changes
    assert step1.bundle == (old_ca.cert, step1.ca.cert)
    assert step1.serving == old_serving  # clients learn the new CA before anything uses it

    early, _ = reconcile(step1, policy, due + dt.timedelta(minutes=30))
    assert early.serving == old_serving

    step2, changes = reconcile(step1, policy, due + dt.timedelta(minutes=61))
    assert "new serving certificate signed by the new CA" in changes
    assert signed_by(step2.serving.cert, step2.ca.cert)
    assert step2.bundle == step1.bundle  # the old CA stays while replicas may serve the old cert

    step3, changes = reconcile(step2, policy, due + dt.timedelta(minutes=125))
    assert "old CA removed from the bundle (rollover complete)" in changes
    assert step3.bundle == (step2.ca.cert,)


def test_validity_settings_that_cannot_work_are_refused():
    with pytest.raises(ValueError, match="shorter than CA validity"):
        Lifetimes(serving=dt.timedelta(days=400), ca=dt.timedelta(days=365))
    with pytest.raises(ValueError, match="renew_fraction"):
        Lifetimes(renew_fraction=1.5)
