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


@pytest.fixture
def start_service(apiserver, device_config):
    """start_service(**config) -> a running dynmig Service against the simulated API server."""
    from webhooks.config import ServeConfig
    from webhooks.main import Service

    started = []
    for ns in ("team", "dynmig"):
        if apiserver.get("namespaces", ns) is None:
            apiserver.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})

    def start(**overrides):
        cfg = ServeConfig(**{"leader_elect": False, **overrides})
        svc = Service(cfg, api_client=apiserver.api_client("scheduler"), device_config=device_config)
        started.append(svc.start(wait=10))
        return svc

    yield start
    for svc in started:
        svc.stop()


@pytest.fixture
def service(start_service):
    return start_service()


@pytest.fixture
def extender(service):
    with TestClient(service.app) as c:
        yield c
