"""The DRA plugin makes and releases MIG instances through the node's one instance manager
(`plugin.instances`), the writer the device plugin uses: its per-GPU lock, its journal, its adoption
rule. The plugin runs unchanged (`DraPluginApp`) over the simulated NVML and API server; the device
plugin's side is the manager call its Allocate makes (`InstanceManager.ensure` for a pod)."""

from __future__ import annotations

import json
import threading
from typing import Any

from test_dra_plugin import NS, DraNode, attrs, node  # noqa: F401 - `node` is the fixture
from waiting_testkit import wait_for

from plugin.instances import InstanceError, InstanceKey, InstanceManager
from plugin.journal import Owner

POD = Owner("pod-uid-1", NS, "vgpu-pod")


def _manager(n: DraNode) -> InstanceManager:
    assert n.app is not None and n.app.preparer is not None
    return n.app.preparer.manager


def _journal(n: DraNode) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = json.loads((n.root / "state" / "instances.json").read_text())["entries"]
    return entries


def test_the_dra_plugin_and_the_device_plugin_on_one_node_never_create_overlapping_instances_concurrently(
    node,  # noqa: F811
):
    device = node.first_fit("3g.20gb")
    gpu, _, start, size = attrs(device)
    claim = node.claim("dra-side", device["name"])
    manager = _manager(node)
    overlapping = InstanceKey(gpu, "2g.10gb", start, 2)  # the device plugin's pod wants the same slices
    answers: dict[str, Any] = {}

    def device_plugin() -> None:
        try:
            answers["pod"] = manager.ensure(overlapping, POD)
        except InstanceError as error:
            answers["pod"] = error

    with manager.gpu_lock(gpu):  # one writer per GPU: both sides queue behind this lock
        dra = threading.Thread(target=lambda: answers.setdefault("claim", node.prepare(claim)))
        dra.start()
        wait_for(lambda: manager.gpu_queue(gpu) == 2, what="the DRA prepare waiting on the GPU's lock")
        pod = threading.Thread(target=device_plugin)
        pod.start()
        wait_for(lambda: manager.gpu_queue(gpu) == 3, what="the device plugin waiting on the same lock")
        assert node.instances() == []  # nobody created while another held the GPU
    dra.join(30)
    pod.join(30)

    assert node.instances() == [(gpu, "3g.20gb", start, size)]  # the first in line, alone
    assert answers["claim"].claims[claim["metadata"]["uid"]].error == ""
    assert isinstance(answers["pod"], InstanceError) and answers["pod"].reason == "create-gi"
    assert [(e["gpuUUID"], e["podUID"]) for e in _journal(node)] == [(gpu, claim["metadata"]["uid"])]


def test_a_dra_unprepare_destroys_only_its_own_claims_instance(node):  # noqa: F811
    mine = node.claim("mine", node.first_fit("1g.5gb")["name"])
    node.prepare(mine)
    wait_for(lambda: attrs(node.first_fit("1g.5gb")) not in node.instances(), what="a republished pool")
    other = node.claim("other", node.first_fit("1g.5gb")["name"])
    node.prepare(other)
    free = node.first_fit("2g.10gb")
    gpu, profile, start, size = attrs(free)
    node.app.preparer.manager.ensure(InstanceKey(gpu, profile, start, size), POD)  # a device plugin pod's
    before = node.instances()
    assert len(before) == 3

    assert node.unprepare(mine).claims[mine["metadata"]["uid"]].error == ""

    left = node.instances()
    assert len(left) == 2 and (gpu, profile, start, size) in left
    assert sorted(e["podUID"] for e in _journal(node)) == sorted([other["metadata"]["uid"], POD.pod_uid])


def test_an_instance_recorded_by_the_previous_dra_journal_format_is_adopted_not_destroyed_after_upgrade(
    node,  # noqa: F811
):
    claim = node.claim("upgraded", node.first_fit("3g.20gb")["name"])
    node.prepare(claim)
    (entry,) = _journal(node)
    node.stop()
    # the journal exactly as the DRA plugin before the shared instance manager wrote it
    # (plugin/dra/prepare.py: Entry.intent(key, Owner(claim UID, namespace, name, 0, index)), then
    # with_runtime(GI, CI, MIG UUID); plugin/journal.py encode: compact, keys sorted)
    old = (
        '{"entries":[{"computeInstanceID":%d,"containerIndex":0,"deviceIndex":0,"gpuInstanceID":%d,'
        '"gpuUUID":"%s","migUUID":"%s","name":"upgraded","namespace":"%s","podUID":"%s",'
        '"profile":"3g.20gb","size":%d,"start":%d}],"version":1}'
        % (
            entry["computeInstanceID"],
            entry["gpuInstanceID"],
            entry["gpuUUID"],
            entry["migUUID"],
            NS,
            claim["metadata"]["uid"],
            entry["size"],
            entry["start"],
        )
    )
    (node.root / "state" / "instances.json").write_text(old)
    before = node.instances()

    node.start()

    assert node.instances() == before  # adopted: not destroyed, nothing new made
    again = node.prepare(claim).claims[claim["metadata"]["uid"]]
    assert again.error == "" and node.instances() == before
    assert [e["migUUID"] for e in _journal(node)] == [entry["migUUID"]]
    assert node.unprepare(claim).claims[claim["metadata"]["uid"]].error == ""
    assert node.instances() == []
