"""The node lock `hami.io/mutex.lock`: one codec, read the same way by the scheduler and the plugin."""

from __future__ import annotations

import datetime as dt

import pytest

from mig.annotations import NODE_LOCK, NodeLockValue, decode_node_lock, encode_node_lock
from plugin.podfinder import lock_owner
from webhooks.nodelock import node_lock_value

T = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)


def test_a_lock_is_written_as_hamis_time_namespace_and_name_in_utc():
    plus_two = dt.timezone(dt.timedelta(hours=2))
    assert encode_node_lock(T.astimezone(plus_two), "team", "p1") == "2026-01-01T12:00:00Z,team,p1"


@pytest.mark.parametrize(("namespace", "name"), [("team", "a,b"), ("te,am", "p1"), ("team", ",")])
def test_a_name_with_a_comma_is_refused_when_writing_the_lock(namespace, name):
    with pytest.raises(ValueError, match="comma"):
        encode_node_lock(T, namespace, name)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-01-01T12:00:00Z,team,p1", NodeLockValue(T, "team", "p1")),
        ("2026-01-01T12:00:00+00:00,team,p1", NodeLockValue(T, "team", "p1")),
        ("2026-01-01T12:00:00,team,p1", NodeLockValue(T, "team", "p1")),  # no zone: read as UTC
        ("2026-01-01T12:00:00Z", NodeLockValue(T)),  # HAMi's legacy bare timestamp names no pod
        ("2026-01-01T12:00:00Z,,", NodeLockValue(T)),
        ("yesterday,team,p1", NodeLockValue(None, "team", "p1")),  # unreadable time: counts as expired
        ("garbage", NodeLockValue(None)),
        ("2026-01-01T12:00:00Z,team,a,b", NodeLockValue(None)),  # four parts: malformed, as HAMi reads it
        ("2026-01-01T12:00:00Z,team", NodeLockValue(None)),
        (",,,", NodeLockValue(None)),
    ],
)
def test_a_lock_is_read_as_hamis_parse_node_lock_reads_it(value, expected):
    assert decode_node_lock(value) == expected


@pytest.mark.parametrize(
    ("value", "owner"),
    [
        ("2026-01-01T12:00:00Z,team,p1", ("team", "p1")),
        ("2026-01-01T12:00:00Z", None),
        ("2026-01-01T12:00:00Z,,p1", None),
        ("2026-01-01T12:00:00Z,team,", None),
        ("2026-01-01T12:00:00Z,team,a,b", None),  # a name with a comma: no pod is named
        ("2026-01-01T12:00:00Z,te,am,p1", None),
        ("yesterday,team,p1", ("team", "p1")),
    ],
)
def test_the_scheduler_and_the_device_plugin_agree_on_who_holds_the_lock(value, owner):
    node = {"metadata": {"name": "n1", "annotations": {NODE_LOCK: value}}}
    scheduler = node_lock_value(node)
    assert scheduler is not None and scheduler.owner == owner
    assert lock_owner({NODE_LOCK: value}) == owner


def test_a_lock_written_for_a_pod_names_that_pod_on_both_sides():
    value = encode_node_lock(T, "team", "p-1.x")
    assert lock_owner({NODE_LOCK: value}) == ("team", "p-1.x")
    assert decode_node_lock(value) == NodeLockValue(T, "team", "p-1.x")
