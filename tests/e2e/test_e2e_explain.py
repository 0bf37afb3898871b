"""What an operator reads about a pod in the lab: a waiting pod has one aggregated FilteringFailed
event and a FailedScheduling message whose summary comes first and is short; the device plugin's
events show in `kubectl describe pod` (the real kubectl, default settings)."""

from __future__ import annotations

import subprocess

from lab.kit import gpu_pod

from mig.annotations import USE_GPU_TYPE
from mig.placement.reasons import DETAIL_MARK, MAX_HEADLINE

A100 = {USE_GPU_TYPE: "A100"}


def describe(lab, kubectl, name):
    done = subprocess.run(
        [kubectl, "--kubeconfig", str(lab.kubeconfig("admin")), "describe", "pod", name],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def fill_the_a100s_and_wait_one_more(kit):
    for name in ("big-1", "big-2"):
        kit.create(gpu_pod(name, 30000, annotations=A100))  # 7g.40gb: a whole A100
    kit.wait_phase("big-1")
    kit.wait_phase("big-2")
    kit.create(gpu_pod("waits", 30000, annotations=A100))


def test_a_waiting_pod_has_one_filtering_failed_event_whose_count_grows(kit):
    fill_the_a100s_and_wait_one_more(kit)

    kit.wait(
        lambda: [e for e in kit.events("waits") if e["reason"] == "FilteringFailed" and e["count"] >= 3],
        60,
        "the FilteringFailed event of pod waits to be counted three times",
    )
    refused = [e for e in kit.events("waits") if e["reason"] == "FilteringFailed"]
    assert len(refused) == 1
    message = refused[0]["message"]
    assert message.startswith("0/2 nodes: 2 GPUs full, 8 GPUs excluded by the pod's annotations; ")
    assert message.index(DETAIL_MARK) < MAX_HEADLINE
    assert refused[0]["lastTimestamp"] >= refused[0]["firstTimestamp"]


def test_the_failed_scheduling_message_starts_with_a_summary_under_300_characters(kit):
    fill_the_a100s_and_wait_one_more(kit)

    failed = kit.wait_event("waits", "FailedScheduling", 60, contains=DETAIL_MARK)

    summary, detail = failed["message"].split(DETAIL_MARK, 1)
    assert summary == (
        "0/2 nodes are available: 2 node(s) cannot place the pod's MIG devices: "
        "2 GPUs full, 8 GPUs excluded by the pod's annotations; 7g.40gb fits on 0 of 10 GPUs."
    )
    assert len(summary) < MAX_HEADLINE
    assert "gpu-a100/GPU-" in detail and "not enough free slices: free none" in detail
    condition = next(c for c in kit.pod("waits")["status"]["conditions"] if c["type"] == "PodScheduled")
    assert condition["reason"] == "Unschedulable" and condition["message"].startswith(summary)


def test_kubectl_describe_pod_shows_the_device_plugins_events(lab, kit, kubectl):
    kit.create(gpu_pod("shown", 8000, annotations={USE_GPU_TYPE: "RTX PRO 6000"}))
    kit.wait_phase("shown")
    [allocation] = kit.allocations("shown")
    kit.wait_event("shown", "MigInstanceCreated")

    text = describe(lab, kubectl, "shown")

    events = text[text.index("Events:") :]
    created = next(line for line in events.splitlines() if "MigInstanceCreated" in line)
    assert "dynmig-device-plugin" in created
    assert f"1g.24gb@{allocation.placement.start}:3 on {allocation.gpuUUID}" in events
    assert allocation.migUUID in events
    assert "Scheduled" in events


def test_kubectl_describe_shows_a_waiting_pods_refusal_once_with_its_count(lab, kit, kubectl):
    fill_the_a100s_and_wait_one_more(kit)
    kit.wait(
        lambda: [e for e in kit.events("waits") if e["reason"] == "FilteringFailed" and e["count"] >= 2],
        60,
        "a repeated FilteringFailed event",
    )

    events = describe(lab, kubectl, "waits").split("Events:", 1)[1]

    lines = [line for line in events.splitlines() if "FilteringFailed" in line]
    assert len(lines) == 1 and "(x" in lines[0]
