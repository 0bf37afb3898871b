"""bench/extender_cost.py: the write counter counts what the API server receives, by identity, verb
and resource; HAMi's count per pod is the reference's steps. (No timing is asserted.)"""

from __future__ import annotations

from pathlib import Path

import extender_cost
import pytest
from kubernetes import client
from sim.apiserver import ApiServer


def test_counter_counts_writes_by_identity_verb_and_resource(tmp_path: Path) -> None:
    api = ApiServer(workdir=tmp_path / "api").start()
    try:
        counts = extender_cost.install_counter(api)
        admin = client.CoreV1Api(api.api_client("admin"))
        admin.create_node({"metadata": {"name": "n1"}})
        admin.create_namespaced_pod(
            "default", {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
        )
        sched = client.CoreV1Api(api.api_client("scheduler"))
        sched.read_node("n1")  # a read: not counted
        sched.list_node()
        sched.patch_node("n1", {"metadata": {"annotations": {"a": "b"}}})
        sched.create_namespaced_pod_binding(
            "p",
            "default",
            {"metadata": {"name": "p"}, "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}},
            _preload_content=False,
        )
        api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "direct"}})  # not over HTTP
    finally:
        api.stop()
    assert dict(counts) == {
        ("admin", "create", "nodes"): 1,
        ("admin", "create", "pods"): 1,
        ("scheduler", "patch", "nodes"): 1,
        ("scheduler", "create", "pods/binding"): 1,
    }
    assert extender_cost.per_pod(counts, "scheduler", 2) == {"create pods/binding": 0.5, "patch nodes": 0.5}


def test_hami_count_is_the_reference_steps() -> None:
    steps = extender_cost.HAMI_WRITES
    assert extender_cost.hami_count(True) == len(steps) == 10
    assert extender_cost.hami_count(False) == 8
    by = {(verb, res) for _, verb, res, _ in steps}
    assert by == {("patch", "pods"), ("patch", "nodes"), ("create", "pods/binding"), ("create", "events")}
    assert sum(1 for _, v, r, _ in steps if (v, r) == ("patch", "pods")) == 5
    assert sum(1 for _, v, r, _ in steps if (v, r) == ("patch", "nodes")) == 2


def test_help_and_a_mistyped_flag_end_with_a_message_instead_of_starting_the_six_minute_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as helped:
        extender_cost.parse(["--help"])
    assert helped.value.code == 0 and "--cpu-only" in capsys.readouterr().out
    with pytest.raises(SystemExit) as typo:
        extender_cost.parse(["--cpu-olny"])
    assert typo.value.code == 2 and "--cpu-olny" in capsys.readouterr().err
    assert extender_cost.parse(["--cpu-only"]).cpu_only
