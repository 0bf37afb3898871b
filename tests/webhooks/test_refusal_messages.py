"""The extender's refusal as kube-scheduler receives it: every refused node gets the same text, a
short headline first and then the capped per-GPU detail, so the pod's FailedScheduling counts it
once ("0/N nodes are available: N node(s) cannot place ...")."""

from __future__ import annotations

import json

from kubernetes import client
from waiting_testkit import eventually
from webhooks_testkit import gpu_pod, node

from mig.placement.reasons import (
    _CLOSEST_FIRST,
    DETAIL_MARK,
    DEVICES_DO_NOT_FIT_TOGETHER,
    FRAGMENTED,
    MAX_HEADLINE,
    MAX_NODE_TEXT,
    NO_GPUS,
    NOT_ENOUGH_SLICES,
    Reason,
    Refusal,
)
from webhooks.refusal import NODES_PREFIX, refusal_text


def refuse(apiserver, service, extender, nodes: int, gpus: int, memory: int):
    names = [f"n{i}" for i in range(nodes)]
    for name in names:
        apiserver.create(node(name, "A100-SXM4-40GB", gpus=gpus))
    assert eventually(lambda: all(service.fleet.occupancy(n) is not None for n in names))
    pod = apiserver.create(gpu_pod("big", memory=memory))
    assert eventually(lambda: service.cache.pod("team", "big") is not None)
    return extender.post("/filter", json={"Pod": pod, "Nodes": None, "NodeNames": names}).json()


def test_every_refused_node_gets_one_text_with_the_headline_before_the_detail(apiserver, service, extender):
    out = refuse(apiserver, service, extender, nodes=3, gpus=8, memory=60000)

    texts = set(out["FailedNodes"].values())
    assert len(texts) == 1 and out["NodeNames"] == []
    (text,) = texts
    head, detail = text.split(DETAIL_MARK, 1)
    assert (
        head
        == f"{NODES_PREFIX}24 GPUs without a profile large enough; the pod's device fits on 0 of 24 GPUs."
    )
    assert len(head) < MAX_HEADLINE and len(text) <= MAX_NODE_TEXT
    assert detail == "; ".join(
        f"n{i}/GPU-n{i}-0 and 7 more GPUs: no allowlisted profile has 60000 MiB; the largest is 7g.40gb "
        "with 40448 MiB"
        for i in range(3)
    )


def test_the_filtering_failed_event_has_the_fleet_summary_first(apiserver, service, extender):
    refuse(apiserver, service, extender, nodes=2, gpus=1, memory=60000)

    def refused():
        core = client.CoreV1Api(apiserver.api_client("admin"))
        items = json.loads(core.list_namespaced_event("team", _preload_content=False).data)["items"]
        return [e for e in items if e["reason"] == "FilteringFailed"]

    assert eventually(refused)
    (event,) = refused()
    assert event["message"].startswith("0/2 nodes: 2 GPUs without a profile large enough; ")
    assert event["message"].index(DETAIL_MARK) < MAX_HEADLINE


def test_with_every_reason_at_once_kube_schedulers_summary_stays_under_300_characters():
    reasons = [
        Reason(
            code, "why", f"node-{i:04d}", None if code in (NO_GPUS, DEVICES_DO_NOT_FIT_TOGETHER) else f"G{i}"
        )
        for i, code in enumerate(_CLOSEST_FIRST * 300)
    ]
    refusal = Refusal(
        [
            *reasons,
            Reason(FRAGMENTED, "m", "n", "G", "1g.10gb", (1, 2)),
            Reason(NOT_ENOUGH_SLICES, "m", "n", "H", "1g.24gb+me", ()),
            Reason(NOT_ENOUGH_SLICES, "m", "n", "I", "2g.20gb", (3,)),
            Reason(FRAGMENTED, "m", "n", "J", "1g.5gb", (0,)),
        ],
        gpus=10000,
    )
    nodes = len(refusal.by_node())
    summary = f"0/{nodes} nodes are available: {nodes} {refusal_text(refusal, [])}".split(DETAIL_MARK)[0]
    assert len(summary) < MAX_HEADLINE, summary
