"""`dynmig status` says which scheduler owns a waiting MIG pod that is not dynmig's, instead of
promising that dynmig places it at its next try (a pod handed to `hami-scheduler` during a HAMi
handover, or one the webhook did not route)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from registration_testkit import registration
from sim.apiserver import ApiServer

from dynmig.status.main import main
from mig.annotations import NODE_REGISTER

NAMES = ("1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb")


def waiting(name: str, scheduler: str) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "schedulerName": scheduler,
            "containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}],
        },
    }


@pytest.fixture
def api() -> Iterator[ApiServer]:
    server = ApiServer().start()
    server.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})
    register = registration("", "A100-SXM4-40GB", 1, names=NAMES, ids=("GPU-a",))
    server.create(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "gpu-1", "annotations": {NODE_REGISTER: register}},
        }
    )
    try:
        yield server
    finally:
        server.stop()


def status(api: ApiServer, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["--kubeconfig", str(api.kubeconfig()), "--color", "never", *args]) == 0
    return capsys.readouterr().out


def test_a_pod_for_hami_scheduler_is_said_to_be_hamis_not_placed_at_dynmigs_next_try(api, capsys):
    api.create(waiting("handed", "hami-scheduler"))
    out = status(api, capsys)
    assert "ml/handed" in out
    assert (
        "scheduler 'hami-scheduler' owns it, not dynmig (dynmig-scheduler): dynmig does not place it" in out
    )
    assert "places it at its next try" not in out


def test_a_pod_the_webhook_did_not_route_is_said_to_be_the_default_schedulers(api, capsys):
    api.create(waiting("unrouted", "default-scheduler"))
    out = status(api, capsys)
    assert "kube-scheduler's default-scheduler owns it, not dynmig (dynmig-scheduler)" in out


def test_when_dynmig_runs_as_hami_scheduler_the_same_pod_is_dynmigs(api, capsys):
    api.create(waiting("handed", "hami-scheduler"))
    out = status(api, capsys, "--scheduler-name", "hami-scheduler")
    assert "fits now: the scheduler places it at its next try" in out
    assert "owns it" not in out
