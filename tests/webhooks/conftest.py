"""Fixtures for the webhooks tests: an app over HTTP with the default device config."""

from __future__ import annotations

import warnings

import pytest

with warnings.catch_warnings():  # starlette suggests httpx2; the httpx-based client works the same
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient
from webhooks_testkit import PLUGIN, SCHEDULER

from mig.allowlist import DEFAULT_POLICY, load_device_config
from webhooks.admission import AdmissionPolicy
from webhooks.app import Server, create_app, create_metrics_app
from webhooks.config import StaticDeviceConfig
from webhooks.metrics import Metrics


@pytest.fixture
def device_config():
    return StaticDeviceConfig(load_device_config(DEFAULT_POLICY))


@pytest.fixture
def server(device_config) -> Server:
    policy = AdmissionPolicy(device_config=device_config.get, scheduler_name="dynmig-scheduler",
                             privileged_users=frozenset({SCHEDULER, PLUGIN}))
    return Server(policy=policy, metrics=Metrics())


@pytest.fixture
def client(server):
    with TestClient(create_app(server)) as c:
        yield c


@pytest.fixture
def metrics_client(server):
    with TestClient(create_metrics_app(server.metrics)) as c:
        yield c
