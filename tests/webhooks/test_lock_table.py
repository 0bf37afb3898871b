"""Which nodes a filter leaves out for their node lock: the lock table kept in step with the watches
says exactly what NodeLock's own rule says, lock by lock, whatever happened in between."""

from __future__ import annotations

import datetime as dt

from hypothesis import given, settings
from hypothesis import strategies as st

from webhooks.nodelock import LockTable, LockValue, NodeLock

T0 = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)
EXPIRY = 300.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> dt.datetime:
        return self.now


def table_and_pods(*pods: tuple[str, str]) -> tuple[LockTable, Clock, set[tuple[str, str]]]:
    clock = Clock()
    return LockTable(EXPIRY, clock), clock, set(pods)


def test_a_lock_blocks_every_pod_but_the_one_it_names():
    table, _, pods = table_and_pods(("team", "p1"), ("team", "p2"))
    table.set("n1", LockValue(T0, "team", "p1"), lambda ns, n: (ns, n) in pods)
    assert dict(table.blocked("team", "p2")) == {
        "n1": "node lock held by team/p1 (a bind is in progress; the device plugin releases it after "
        "Allocate, or it expires after 5m0s)"
    }
    assert dict(table.blocked("team", "p1")) == {}


def test_a_lock_past_its_expiry_blocks_no_pod():
    table, clock, pods = table_and_pods(("team", "p1"))
    table.set("n1", LockValue(T0, "team", "p1"), lambda ns, n: (ns, n) in pods)
    clock.now = T0 + dt.timedelta(seconds=EXPIRY)
    assert list(table.blocked("team", "p2")) == ["n1"]  # exactly at the expiry: still held
    clock.now = T0 + dt.timedelta(seconds=EXPIRY + 1)
    assert list(table.blocked("team", "p2")) == []


def test_a_lock_whose_pod_is_gone_blocks_no_pod_until_a_pod_of_that_name_exists_again():
    table, _, pods = table_and_pods(("team", "p1"))
    table.set("n1", LockValue(T0, "team", "p1"), lambda ns, n: (ns, n) in pods)
    pods.clear()
    table.pod_gone(("team", "p1"))
    assert list(table.blocked("team", "p2")) == []
    pods.add(("team", "p1"))
    table.pod_appeared(("team", "p1"))
    assert list(table.blocked("team", "p2")) == ["n1"]


def test_a_lock_with_an_unreadable_time_blocks_no_pod_and_one_naming_no_pod_blocks_every_pod():
    table, _, _ = table_and_pods()
    table.set("unreadable", LockValue(None, "team", "p1"), lambda ns, n: True)
    table.set("legacy", LockValue(T0), lambda ns, n: False)  # HAMi's bare timestamp names no pod
    assert list(table.blocked("team", "p2")) == ["legacy"]


def test_a_released_lock_blocks_nothing_and_a_taken_over_lock_blocks_for_its_new_owner():
    table, _, pods = table_and_pods(("team", "p1"), ("team", "p2"), ("team", "p3"))
    exists = lambda ns, n: (ns, n) in pods  # noqa: E731
    table.set("n1", LockValue(T0, "team", "p1"), exists)
    table.set("n1", LockValue(T0, "team", "p2"), exists)
    assert list(table.blocked("team", "p1")) == ["n1"]
    assert list(table.blocked("team", "p2")) == []
    table.set("n1", None, exists)
    assert list(table.blocked("team", "p3")) == []
    assert "n1" not in table.values


NODES = ("n1", "n2", "n3")
OWNERS = (("team", "p1"), ("team", "p2"), ("other", "p1"))
operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("lock"),
            st.sampled_from(NODES),
            st.one_of(st.none(), st.integers(-400, 30)),  # seconds from now; None: unreadable time
            st.one_of(st.none(), st.sampled_from(OWNERS)),  # None: a lock naming no pod
        ),
        st.tuples(st.just("unlock"), st.sampled_from(NODES)),
        st.tuples(st.just("delete"), st.sampled_from(OWNERS)),
        st.tuples(st.just("create"), st.sampled_from(OWNERS)),
        st.tuples(st.just("wait"), st.integers(0, 200)),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(operations, st.sets(st.sampled_from(OWNERS)))
def test_the_table_blocks_exactly_the_nodes_whose_lock_nodelock_would_refuse_to_take(ops, initial):
    clock = Clock()
    pods = set(initial)
    exists = lambda ns, n: (ns, n) in pods  # noqa: E731
    table = LockTable(EXPIRY, clock)
    rule = NodeLock(None, EXPIRY, clock=clock)  # type: ignore[arg-type]  # its rule only: no API call
    for op in ops:
        if op[0] == "lock":
            _, node, age, owner = op
            taken = None if age is None else clock.now + dt.timedelta(seconds=age)
            table.set(node, LockValue(taken, *(owner or ("", ""))), exists)
        elif op[0] == "unlock":
            table.set(op[1], None, exists)
        elif op[0] == "delete":
            pods.discard(op[1])
            table.pod_gone(op[1])
        elif op[0] == "create":
            if op[1] not in pods:
                pods.add(op[1])
                table.pod_appeared(op[1])
        else:
            clock.now += dt.timedelta(seconds=op[1])
        for asking in OWNERS:
            expected = {
                node
                for node, value in table.values.items()
                if value.owner != asking and not rule._takeable(value, exists)
            }
            assert set(table.blocked(*asking)) == expected, (op, asking)


def test_a_table_fed_locks_for_hours_without_a_filter_keeps_only_those_within_the_expiry():
    table, clock, _ = table_and_pods()
    for minute in range(600):  # ten hours of a lock taken and released every minute, no filter reading
        clock.now = T0 + dt.timedelta(minutes=minute)
        table.set(f"n{minute % 50}", LockValue(clock.now, "team", f"p{minute}"), lambda ns, n: True)
        table.set(f"n{minute % 50}", None, lambda ns, n: True)
    assert len(table._deadlines) <= EXPIRY / 60 + 1
