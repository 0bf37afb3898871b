"""The DRA plugin makes and releases MIG instances through the node's one instance manager
(`plugin.instances`), the writer the device plugin uses: its per-GPU lock, its journal, its adoption
rule. The plugin runs unchanged (`DraPluginApp`) over the simulated NVML and API server; the device
plugin's side is its instance manager, built as its process builds it, and the call its Allocate
makes (`InstanceManager.ensure` for a pod)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from test_dra_plugin import NS, DraNode, attrs, node  # noqa: F401 - `node` is the fixture
from waiting_testkit import wait_for

from base.policyfiles import default_allowlist
from plugin.config import DeviceFilter
from plugin.discovery import discover
from plugin.instances import InstanceError, InstanceKey, InstanceManager
from plugin.journal import Journal, Owner
from plugin.nvml import Nvml

POD = Owner("pod-uid-1", NS, "vgpu-pod")


def _journal(n: DraNode) -> list[dict[str, Any]]:
    path = n.root / "state" / "instances.json"
    entries: list[dict[str, Any]] = json.loads(path.read_text())["entries"] if path.exists() else []
    return entries


def _device_plugin(n: DraNode) -> InstanceManager:
    """The device plugin's instance manager as its process builds it (plugin/main.py): its own
    NVML session and journal, the node's per-GPU lock files."""
    nvml = Nvml()
    nvml.init()
    state = n.root / "device-plugin"
    journal = Journal(state)
    journal.load()
    return InstanceManager(
        nvml, discover(nvml, default_allowlist(), DeviceFilter()), journal=journal, lock_dir=n.root / "gpus"
    )


def test_the_dra_plugin_and_the_device_plugin_on_one_node_never_create_overlapping_instances_concurrently(
    node,  # noqa: F811
):
    device = node.first_fit("3g.20gb")
    gpu, _, start, _ = attrs(device)
    claim = node.claim("dra-side", device["name"])
    pods = _device_plugin(node)
    overlapping = InstanceKey(gpu, "2g.10gb", start, 2)  # a device plugin pod's reservation, same slices
    answers: dict[str, Any] = {}

    def device_plugin() -> None:
        try:
            answers["pod"] = pods.ensure(overlapping, POD)
        except InstanceError as error:
            answers["pod"] = error

    with pods.gpu_lock(gpu):  # the device plugin is writing on this GPU
        prepare = threading.Thread(target=lambda: answers.setdefault("claim", node.prepare(claim)))
        prepare.start()
        wait_for(
            lambda: _blocked(node.root / "gpus") == 1,
            what="the DRA prepare blocked on the lock file the device plugin holds",
        )
        allocate = threading.Thread(target=device_plugin)
        allocate.start()
        wait_for(lambda: pods.gpu_queue(gpu) == 2, what="a second device plugin call at the GPU's lock")
        assert node.instances() == []  # neither created while the other process held the GPU
    prepare.join(30)
    allocate.join(30)

    made = node.instances()
    assert len(made) == 1 and made[0][0] == gpu and made[0][2] == start  # one of the two, alone
    refused = [a for a in (answers["pod"], answers["claim"].claims[claim["metadata"]["uid"]]) if _failed(a)]
    assert len(refused) == 1
    journaled = [e["podUID"] for e in _journal(node)] + [e.podUID for e in pods.journal.entries()]
    assert len(journaled) == 1 and journaled[0] in (POD.pod_uid, claim["metadata"]["uid"])


def _blocked(lock_dir: Path) -> int:
    """How many callers the kernel shows waiting for a flock on a file in `lock_dir` (the `->` lines
    of /proc/locks, whose device field ends in the file's inode)."""
    inodes = {f.stat().st_ino for f in lock_dir.glob("*.lock")}
    waiting = 0
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "->" in fields:
            device = next((f for f in fields if f.count(":") == 2), "")
            waiting += device.rsplit(":", 1)[-1].isdigit() and int(device.rsplit(":", 1)[-1]) in inodes
    return waiting


def _failed(answer: Any) -> bool:
    return isinstance(answer, InstanceError) or bool(getattr(answer, "error", ""))


def _overlaps(device: tuple[str, str, int, int], held: list[tuple[str, str, int, int]]) -> bool:
    gpu, _, start, size = device
    return any(g == gpu and s < start + size and start < s + z for g, _, s, z in held)


def test_a_dra_unprepare_destroys_only_its_own_claims_instance(node):  # noqa: F811
    mine = node.claim("mine", node.first_fit("1g.5gb")["name"])
    node.prepare(mine)
    wait_for(lambda: attrs(node.first_fit("1g.5gb")) not in node.instances(), what="a republished pool")
    other = node.claim("other", node.first_fit("1g.5gb")["name"])
    node.prepare(other)
    # the free 2g must come from a publication that already shows `other` (a stale one may offer
    # the very slices `other` now holds, and the device plugin's create is then refused)
    held = node.instances()
    wait_for(lambda: not _overlaps(attrs(node.first_fit("2g.10gb")), held), what="a publication showing both")
    free = node.first_fit("2g.10gb")
    gpu, profile, start, size = attrs(free)
    pods = _device_plugin(node)
    pods.ensure(InstanceKey(gpu, profile, start, size), POD)  # a device plugin pod's
    before = node.instances()
    assert len(before) == 3

    assert node.unprepare(mine).claims[mine["metadata"]["uid"]].error == ""

    left = node.instances()
    assert len(left) == 2 and (gpu, profile, start, size) in left
    assert [e["podUID"] for e in _journal(node)] == [other["metadata"]["uid"]]
    assert [e.podUID for e in pods.journal.entries()] == [POD.pod_uid]


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
    e, uid = entry, claim["metadata"]["uid"]
    old = (
        f'{{"entries":[{{"computeInstanceID":{e["computeInstanceID"]},"containerIndex":0,"deviceIndex":0,'
        f'"gpuInstanceID":{e["gpuInstanceID"]},"gpuUUID":"{e["gpuUUID"]}","migUUID":"{e["migUUID"]}",'
        f'"name":"upgraded","namespace":"{NS}","podUID":"{uid}","profile":"3g.20gb","size":{e["size"]},'
        f'"start":{e["start"]}}}],"version":1}}'
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


def test_a_prepared_claim_whose_instance_went_with_a_gpu_reset_is_prepared_anew_at_its_placement(
    node,  # noqa: F811
):
    claim = node.claim("reset", node.first_fit("2g.10gb")["name"])
    node.prepare(claim)
    (made,) = node.instances()
    (before,) = _journal(node)
    node.sim.reset_gpu(made[0])
    assert node.instances() == []

    again = node.prepare(claim).claims[claim["metadata"]["uid"]]

    assert again.error == "" and node.instances() == [made]
    (after,) = _journal(node)
    assert after["migUUID"] != before["migUUID"]
