"""The lab's Deployment and ReplicaSet controller logic, pass by pass, as tables: which ReplicaSet
is made or scaled to what, what the Deployment's revision and status become, what pods a
ReplicaSet deletes first."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from lab import replicasets, rollout

NOW = 1_800_000_000.0


def _template(image: str) -> dict[str, Any]:
    return {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": image}]}}


def _deploy(
    replicas: int = 3, image: str = "v2", strategy: dict[str, Any] | None = None, **spec: Any
) -> dict:
    return {
        "metadata": {
            "name": "web",
            "namespace": "default",
            "uid": "d-uid",
            "generation": 1,
            "annotations": {},
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": _template(image),
            "strategy": strategy
            or {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
            **spec,
        },
    }


def _rs(image: str, replicas: int, available: int, rev: int, created: str = "2026-01-01T00:00:00Z") -> dict:
    made = rollout.new_replica_set(_deploy(image=image), replicas, rev)
    made["metadata"].update(uid=f"uid-{image}", creationTimestamp=created, generation=1)
    made["status"] = {
        "replicas": replicas,
        "readyReplicas": available,
        "availableReplicas": available,
        "observedGeneration": 1,
    }
    return made


def _image(rs: dict[str, Any]) -> str:
    return str(rs["spec"]["template"]["spec"]["containers"][0]["image"])


@pytest.mark.parametrize(
    ("value", "total", "round_up", "expected"),
    [
        ("25%", 10, True, 3),
        ("25%", 10, False, 2),
        ("25%", 1, True, 1),
        ("25%", 1, False, 0),
        (2, 10, True, 2),
        ("0%", 4, True, 0),
    ],
)
def test_a_percentage_of_replicas_rounds_up_for_surge_and_down_for_unavailable(
    value, total, round_up, expected
):
    assert rollout.scaled(value, total, round_up, "maxSurge") == expected


def test_a_rolling_update_that_allows_neither_surge_nor_unavailability_still_takes_one_pod_at_a_time():
    deploy = _deploy(
        4, strategy={"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}}
    )
    assert (rollout.max_surge(deploy), rollout.max_unavailable(deploy)) == (0, 1)


def test_a_new_deployment_gets_one_replica_set_named_by_its_template_hash_at_revision_one():
    plan = rollout.plan(_deploy(3), [], now=NOW)
    [made] = plan.create
    digest = made["spec"]["template"]["metadata"]["labels"][rollout.HASH_LABEL]
    assert made["metadata"]["name"] == f"web-{digest}"
    assert made["spec"]["selector"]["matchLabels"] == {"app": "web", "pod-template-hash": digest}
    assert made["spec"]["replicas"] == 3
    assert made["metadata"]["annotations"] == {
        rollout.REVISION: "1",
        rollout.DESIRED: "3",
        rollout.MAX: "4",
    }
    assert made["metadata"]["ownerReferences"][0] | {"uid": "d-uid"} == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "web",
        "uid": "d-uid",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert plan.revision == "1"
    assert plan.events == [f"Scaled up replica set web-{digest} to 3 from 0"]
    progressing = plan.status["conditions"][1]
    assert (progressing["type"], progressing["reason"]) == ("Progressing", "NewReplicaSetCreated")


@pytest.mark.parametrize(
    ("replicas", "new", "old", "expected"),
    [
        # (spec, available) of the new and the old ReplicaSet -> their replicas after the pass
        pytest.param(
            4, None, (4, 4), {"new": 1, "old": 3}, id="a template change surges one and retires one"
        ),
        pytest.param(4, (1, 0), (3, 3), {"new": 2, "old": 3}, id="the new set grows within the surge"),
        pytest.param(
            4, (2, 0), (3, 3), {"new": 2, "old": 3}, id="nothing moves until new pods are available"
        ),
        pytest.param(4, (2, 2), (3, 3), {"new": 2, "old": 1}, id="available new pods let old ones go"),
        pytest.param(4, (4, 4), (1, 1), {"new": 4, "old": 0}, id="the last old pod goes once all new are up"),
        pytest.param(4, (3, 3), (2, 0), {"new": 3, "old": 0}, id="unavailable old pods go at no cost"),
        pytest.param(2, (4, 4), (0, 0), {"new": 2, "old": 0}, id="a scale down shrinks the new set"),
    ],
)
def test_a_rolling_update_moves_within_max_surge_and_max_unavailable(replicas, new, old, expected):
    sets = [_rs("v1", old[0], old[1], 1)]
    if new is not None:
        sets.append(_rs("v2", new[0], new[1], 2, created="2026-01-02T00:00:00Z"))
    plan = rollout.plan(_deploy(replicas), sets, now=NOW)
    after = {"new": new[0] if new else 0, "old": old[0]}
    for body in plan.create:
        after["new"] = body["spec"]["replicas"]
    for rs, n, _ in plan.update:
        after["new" if _image(rs) == "v2" else "old"] = n
    assert after == expected


def test_scaling_events_name_the_replica_set_and_the_replicas_before_and_after():
    plan = rollout.plan(_deploy(4), [_rs("v1", 3, 3, 1), _rs("v2", 2, 2, 2, "2026-01-02T00:00:00Z")], now=NOW)
    name = next(rs["metadata"]["name"] for rs, _, _ in plan.update if _image(rs) == "v1")
    assert plan.events == [f"Scaled down replica set {name} to 1 from 3"]


def test_recreate_scales_every_old_replica_set_to_zero_before_making_the_new_one():
    deploy = _deploy(2, strategy={"type": "Recreate"})
    first = rollout.plan(deploy, [_rs("v1", 2, 2, 1)], old_pods=2, now=NOW)
    assert (first.create, [n for _, n, _ in first.update]) == ([], [0])
    waiting = rollout.plan(deploy, [_rs("v1", 0, 0, 1)], old_pods=1, now=NOW)
    assert (waiting.create, waiting.update, waiting.revision) == ([], [], "")
    done = rollout.plan(deploy, [_rs("v1", 0, 0, 1)], old_pods=0, now=NOW)
    assert [(_image(rs), rs["spec"]["replicas"]) for rs in done.create] == [("v2", 2)]
    assert done.revision == "2"


def test_a_rollback_makes_the_old_replica_set_new_again_with_the_next_revision():
    sets = [_rs("v1", 0, 0, 1), _rs("v2", 3, 3, 2, "2026-01-02T00:00:00Z")]
    plan = rollout.plan(_deploy(3, image="v1"), sets, now=NOW)
    assert plan.create == []
    revised = next(a for rs, _, a in plan.update if _image(rs) == "v1" and rollout.REVISION in a)
    assert revised[rollout.REVISION] == "3"
    assert revised[rollout.REVISION_HISTORY] == "1"
    assert plan.revision == "3"


def test_the_deployments_change_cause_is_copied_to_its_new_replica_set_but_not_its_revision():
    deploy = _deploy(1)
    deploy["metadata"]["annotations"] = {"kubernetes.io/change-cause": "v2 please", rollout.REVISION: "7"}
    [made] = rollout.plan(deploy, [], now=NOW).create
    assert made["metadata"]["annotations"]["kubernetes.io/change-cause"] == "v2 please"
    assert made["metadata"]["annotations"][rollout.REVISION] == "1"


def test_old_replica_sets_beyond_the_revision_history_limit_are_deleted_oldest_revision_first():
    olds = [_rs(f"old{i}", 0, 0, i) for i in range(1, 5)]
    for rs in olds:
        rs["status"]["replicas"] = 0
    current = _rs("v2", 2, 2, 5, "2026-01-02T00:00:00Z")
    plan = rollout.plan(_deploy(2, revisionHistoryLimit=2), [*olds, current], now=NOW)
    assert sorted(rollout.revision(rs) for rs in plan.delete) == [1, 2]


def test_an_old_replica_set_is_kept_while_the_rollout_is_not_complete():
    olds = [_rs(f"old{i}", 0, 0, i) for i in range(1, 4)]
    plan = rollout.plan(_deploy(2, revisionHistoryLimit=0), [*olds, _rs("v2", 2, 1, 4)], now=NOW)
    assert plan.delete == []


@pytest.mark.parametrize(
    ("new", "old", "available", "progressing"),
    [
        pytest.param(
            (3, 3),
            (0, 0),
            ("True", "MinimumReplicasAvailable"),
            ("True", "NewReplicaSetAvailable"),
            id="complete",
        ),
        pytest.param(
            (1, 0),
            (3, 3),
            ("True", "MinimumReplicasAvailable"),
            ("True", "ReplicaSetUpdated"),
            id="in flight",
        ),
        pytest.param(
            (3, 0),
            (0, 0),
            ("False", "MinimumReplicasUnavailable"),
            ("True", "ReplicaSetUpdated"),
            id="none up",
        ),
    ],
)
def test_the_deployments_conditions_say_whether_it_is_available_and_how_the_rollout_goes(
    new, old, available, progressing
):
    deploy = _deploy(3)
    deploy["status"] = {
        "conditions": [{"type": "Progressing", "status": "True", "reason": "NewReplicaSetCreated"}]
    }
    sets = [_rs("v1", *old, 1), _rs("v2", *new, 2, "2026-01-02T00:00:00Z")]
    sets[1]["status"]["replicas"] = new[0]
    status = rollout.plan(deploy, sets, now=NOW).status
    conditions = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert conditions == {"Available": available, "Progressing": progressing}


def test_the_deployments_counts_sum_its_replica_sets():
    sets = [_rs("v1", 2, 2, 1), _rs("v2", 2, 1, 2, "2026-01-02T00:00:00Z")]
    status = rollout.plan(_deploy(3), sets, now=NOW).status
    counts = {k: v for k, v in status.items() if k != "conditions"}
    assert counts == {
        "observedGeneration": 1,
        "replicas": 4,
        "updatedReplicas": 2,
        "readyReplicas": 3,
        "availableReplicas": 3,
        "unavailableReplicas": 1,
    }


def test_a_rollout_without_progress_past_its_deadline_is_marked_progress_deadline_exceeded():
    deploy = _deploy(3, progressDeadlineSeconds=60)
    stale = "2027-01-15T08:00:00Z"  # NOW is 2027-01-15T08:00:00Z; 61 s later nothing moved
    deploy["status"] = {
        "replicas": 3,
        "updatedReplicas": 3,
        "readyReplicas": 0,
        "availableReplicas": 0,
        "conditions": [
            {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated", "lastUpdateTime": stale}
        ],
    }
    sets = [_rs("v2", 3, 0, 1)]
    status = rollout.plan(deploy, sets, now=NOW + 61).status
    progressing = status["conditions"][1]
    assert (progressing["status"], progressing["reason"]) == ("False", "ProgressDeadlineExceeded")


def test_a_paused_deployment_is_counted_and_not_rolled_out():
    plan = rollout.plan(_deploy(3, paused=True), [_rs("v1", 3, 3, 1)], now=NOW)
    assert (plan.create, plan.update, plan.delete) == ([], [], [])
    assert plan.status["availableReplicas"] == 3
    progressing = plan.status["conditions"][1]
    assert (progressing["status"], progressing["reason"]) == ("Unknown", "DeploymentPaused")


@pytest.mark.parametrize(
    ("sets", "scaled"),
    [
        pytest.param([("v2", 3)], {"v2": 5}, id="the new one"),
        pytest.param([("v1", 3)], {"v1": 5}, id="an old one when the template changed while paused"),
        pytest.param([("v1", 0), ("v2", 0)], {"v2": 5}, id="the new one when none is active"),
        pytest.param([("v1", 2), ("v2", 1)], {}, id="none while two are active"),
    ],
)
def test_a_paused_deployment_still_scales_its_one_active_replica_set(sets, scaled):
    made = [_rs(image, n, n, i + 1, f"2026-01-0{i + 1}T00:00:00Z") for i, (image, n) in enumerate(sets)]
    plan = rollout.plan(_deploy(5, paused=True), made, now=NOW)
    assert {_image(rs): n for rs, n, _ in plan.update} == scaled


def test_a_resumed_deployment_says_so_until_it_progresses():
    deploy = _deploy(3)
    deploy["status"] = {
        "replicas": 3,
        "updatedReplicas": 3,
        "readyReplicas": 0,
        "availableReplicas": 0,
        "conditions": [{"type": "Progressing", "status": "Unknown", "reason": "DeploymentPaused"}],
    }
    plan = rollout.plan(deploy, [_rs("v2", 3, 0, 1)], now=NOW)
    progressing = plan.status["conditions"][1]
    assert (progressing["status"], progressing["reason"]) == ("Unknown", "DeploymentResumed")
    moved = rollout.plan(deploy, [_rs("v2", 3, 1, 1)], now=NOW).status["conditions"][1]
    assert (moved["status"], moved["reason"]) == ("True", "ReplicaSetUpdated")


def test_a_replica_sets_refused_pods_show_on_the_deployment_as_replica_failure():
    failing = _rs("v2", 3, 0, 1)
    failing["status"]["conditions"] = [
        {
            "type": "ReplicaFailure",
            "status": "True",
            "reason": "FailedCreate",
            "message": "denied: no GPU fits",
        }
    ]
    status = rollout.plan(_deploy(3), [failing], now=NOW).status
    failure = status["conditions"][2]
    assert (failure["type"], failure["reason"], failure["message"]) == (
        "ReplicaFailure",
        "FailedCreate",
        "denied: no GPU fits",
    )
    healed = rollout.plan({**_deploy(3), "status": status}, [_rs("v2", 3, 0, 1)], now=NOW).status
    assert [c["type"] for c in healed["conditions"]] == ["Available", "Progressing"]


def test_a_refused_pod_is_retried_after_a_back_off_that_doubles_to_a_minute():
    first = replicasets.refused(None, "denied", NOW)
    delays = [first.delay]
    last = first
    for _ in range(8):
        last = replicasets.refused(last, "denied", NOW)
        delays.append(last.delay)
    assert delays[:4] == [1.0, 2.0, 4.0, 8.0] and delays[-1] == 60.0
    assert last.since == first.since, "the same refusal keeps the time it began"


def test_a_template_from_a_protobuf_body_equals_the_same_template_in_json():
    spelled = copy.deepcopy(_template("v1"))
    spelled["spec"]["containers"][0].update(stdin=False, tty=False)
    spelled["spec"]["hostNetwork"] = False
    assert rollout.same_template(spelled, _template("v1"))
    assert not rollout.same_template(spelled, _template("v2"))


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ({"replicas": 100000}, "spec.replicas 100000"),
        ({"replicas": -1}, "spec.replicas -1"),
        ({"replicas": "3"}, "spec.replicas 3"),
        ({"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "lots"}}}, "maxSurge 'lots'"),
        (
            {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": True}}},
            "maxUnavailable True",
        ),
    ],
)
def test_a_deployment_the_lab_cannot_roll_out_is_refused_naming_the_field(spec, named):
    deploy = _deploy(3)
    deploy["spec"].update(spec)
    with pytest.raises(ValueError, match=named):
        rollout.plan(deploy, [], now=NOW)


def _pod(name: str, node: str = "n1", phase: str = "Running", ready: bool = True, created: str = "") -> dict:
    conditions = (
        [{"type": "Ready", "status": "True", "lastTransitionTime": "2027-01-15T08:00:00Z"}] if ready else []
    )
    return {
        "metadata": {
            "name": name,
            "creationTimestamp": created or "2026-01-01T00:00:00Z",
            "labels": {"app": "web"},
        },
        "spec": {"nodeName": node},
        "status": {"phase": phase, "conditions": conditions},
    }


@pytest.mark.parametrize(
    ("pods", "count", "deleted"),
    [
        pytest.param(
            [_pod("a"), _pod("b", node="")], 1, ["b"], id="an unscheduled pod before a scheduled one"
        ),
        pytest.param(
            [_pod("a"), _pod("b", phase="Pending", ready=False)], 1, ["b"], id="pending before running"
        ),
        pytest.param([_pod("a"), _pod("b", ready=False)], 1, ["b"], id="not ready before ready"),
        pytest.param(
            [_pod("a", created="2026-01-01T00:00:00Z"), _pod("b", created="2026-01-02T00:00:00Z")],
            1,
            ["b"],
            id="the newest among equals",
        ),
        pytest.param([_pod("a"), _pod("b")], 0, [], id="none when there is no surplus"),
    ],
)
def test_a_replica_set_deletes_the_pods_that_cost_least_first(pods, count, deleted):
    assert [p["metadata"]["name"] for p in replicasets.surplus(pods, count)] == deleted


def test_a_replica_set_counts_a_pod_available_only_after_min_ready_seconds():
    rs = _rs("v1", 2, 0, 1)
    rs["spec"]["minReadySeconds"] = 30
    rs["spec"]["template"]["metadata"]["labels"] = {"app": "web"}
    pods = [_pod("a"), _pod("b", ready=False)]
    before = replicasets.status(rs, pods, NOW + 10)
    after = replicasets.status(rs, pods, NOW + 31)
    assert (before["readyReplicas"], before["availableReplicas"]) == (1, 0)
    assert (after["readyReplicas"], after["availableReplicas"], after["replicas"]) == (1, 1, 2)


def test_a_replica_set_pod_is_its_template_owned_by_the_replica_set():
    rs = _rs("v1", 1, 0, 1)
    pod = replicasets.pod_for(rs)
    assert pod["metadata"]["generateName"] == f"{rs['metadata']['name']}-"
    assert pod["metadata"]["labels"] == rs["spec"]["template"]["metadata"]["labels"]
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
    assert pod["metadata"]["ownerReferences"][0]["controller"] is True


@pytest.mark.parametrize("written", ["", "x", "-3", "9" * 5000, "3.5"])
def test_a_revision_annotation_that_is_not_a_revision_counts_as_none(written):
    rs = _rs("v1", 0, 0, 1)
    rs["metadata"]["annotations"][rollout.REVISION] = written
    assert rollout.revision(rs) == 0
