"""The CA bundle injection logs what a person should read: a patch at info, a missing webhook
configuration as a warning, and an unchanged bundle (serve checks it about twice a minute) at debug."""

from __future__ import annotations

import logging

import pytest
from kubernetes import client
from sim.apiserver import ApiServer

from certs.inject import inject_ca_bundle

BUNDLE = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


@pytest.fixture
def admission():
    server = ApiServer().start()
    server.create(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "dynmig"},
            "webhooks": [
                {
                    "name": "pods.mutate.dynmig.io",
                    "clientConfig": {"service": {"namespace": "dynmig", "name": "dynmig", "path": "/mutate"}},
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",
                }
            ],
        }
    )
    try:
        yield client.AdmissionregistrationV1Api(server.api_client("admin"))
    finally:
        server.stop()


def levels(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "certs.inject"]


def test_an_unchanged_ca_bundle_is_logged_at_debug_and_a_patch_at_info(admission, caplog):
    caplog.set_level(logging.DEBUG, logger="certs.inject")
    inject_ca_bundle(admission, BUNDLE, mutating="dynmig")
    inject_ca_bundle(admission, BUNDLE, mutating="dynmig")
    assert levels(caplog) == [
        (logging.INFO, "MutatingWebhookConfiguration dynmig: caBundle patched"),
        (logging.DEBUG, "MutatingWebhookConfiguration dynmig: caBundle unchanged"),
    ]


def test_a_missing_webhook_configuration_is_still_a_warning(admission, caplog):
    caplog.set_level(logging.DEBUG, logger="certs.inject")
    inject_ca_bundle(admission, BUNDLE, mutating="dynmig", validating="gone")
    assert [lvl for lvl, _ in levels(caplog)] == [logging.INFO, logging.WARNING]
