"""Fixtures for the webhooks tests: an app over HTTP with the default device config."""

from __future__ import annotations

import warnings

import pytest

with warnings.catch_warnings():  # starlette suggests httpx2; the httpx-based client works the same
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient
from webhooks_testkit import PLUGIN, SCHEDULER

from base.policyfiles import DEFAULT_POLICY, load_device_config
from webhooks.admission import AdmissionPolicy
from webhooks.app import Server, create_app, create_metrics_app
from webhooks.config import StaticDeviceConfig
from webhooks.metrics import Metrics


@pytest.fixture
def device_config():
    return StaticDeviceConfig(load_device_config(DEFAULT_POLICY))


@pytest.fixture
def server(device_config) -> Server:
    policy = AdmissionPolicy(
        device_config=device_config.get,
        scheduler_name="dynmig-scheduler",
        privileged_users=frozenset({SCHEDULER, PLUGIN}),
    )
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
    with TestClient(service.extender_app) as c:
        yield c


@pytest.fixture
def cluster(apiserver, start_service, tmp_path):
    """dynmig serve on real uvicorn + TLS, registered as webhooks in the simulated API server and as
    extender of the simulated kube-scheduler. Yields a namespace with service, listeners, scheduler."""
    import datetime as dt
    from types import SimpleNamespace

    from sim.scheduler import Scheduler, parse
    from webhooks_testkit import scheduler_configuration, webhook_configurations

    from certs.authority import ServiceIdentity, make_ca, make_serving
    from certs.reload import FileSource, TLSReloader
    from webhooks.runner import Extender, Listeners

    now = dt.datetime.now(dt.UTC)
    ca = make_ca(now)
    pair = make_serving(ca, ServiceIdentity("dynmig", "dynmig"), now)
    crt, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    crt.write_bytes(pair.cert_pem())
    key.write_bytes(pair.key_pem())
    service = start_service()
    tls = TLSReloader(FileSource(crt, key), registry=service.metrics.registry)
    tls.start()
    service.tls = tls
    listeners = Listeners(
        service.app, service.metrics_app, tls=tls, extender=Extender(service.extender_app, tls=tls)
    ).start()
    apiserver.register_service("dynmig", "dynmig", "127.0.0.1", listeners.ports[0])
    for obj in webhook_configurations(ca.cert_pem()):
        apiserver.create(obj)
    scheduler = Scheduler(
        parse(scheduler_configuration(listeners.extender_url, ca.cert_pem())),
        apiserver.api_client("kube-scheduler"),
        initial_backoff=0.05,
        max_backoff=0.5,
        seed=1,
    ).start()
    assert scheduler.wait_synced()
    try:
        yield SimpleNamespace(service=service, listeners=listeners, scheduler=scheduler, ca=ca, tls=tls)
    finally:
        scheduler.stop()
        listeners.stop()
        tls.stop()
