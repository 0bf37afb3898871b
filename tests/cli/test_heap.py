"""dynmig serve's heap keeper (dynmig/heap.py): what the caches hold leaves the collector's view once
they sync, and garbage among those objects is still reclaimed at the next settling. Each scenario runs
in a child interpreter: freezing is process-wide and must not touch the test process's heap."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from base.heap import HeapKeeper

ROOT = Path(__file__).resolve().parents[2]


def _child(script: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


PRELUDE = """
import gc, threading, time, weakref
from base.heap import HeapKeeper, YOUNG_THRESHOLD

def until(check, what):
    deadline = time.monotonic() + 20
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)
"""


def test_nothing_is_frozen_before_the_caches_sync_and_what_they_hold_is_frozen_after():
    out = _child(
        """
        synced = threading.Event()
        keeper = HeapKeeper(synced.is_set, interval=3600, poll=0.01).start()
        cache = {f"node-{i}": {"gpus": [{"uuid": f"GPU-{i}-{g}"} for g in range(8)]} for i in range(2000)}
        time.sleep(0.2)
        before = gc.get_freeze_count()
        synced.set()
        until(lambda: keeper.settled == 1, "settled once the caches synced")
        frozen = gc.get_freeze_count() >= 2000 * 2  # each node's dict and list (str-only dicts are untracked)
        print(before, frozen, gc.get_threshold()[0] == YOUNG_THRESHOLD)
        keeper.stop()
        """
    )
    assert out == "0 True True"


def test_a_cycle_that_became_garbage_after_it_was_frozen_is_reclaimed_at_the_next_settling():
    out = _child(
        """
        class Node:
            pass
        a, b = Node(), Node()
        a.peer, b.peer = b, a  # a reference cycle: only the cyclic collector can free it
        holder = [a]
        gone = weakref.ref(a)
        del a, b
        keeper = HeapKeeper(lambda: True, interval=0.3, poll=0.01).start()
        until(lambda: keeper.settled >= 1, "settled")
        holder.clear()  # now garbage, but frozen: gc.collect() alone does not look at it
        gc.collect()
        alive_after_collect = gone() is not None
        # reclaimed inside a later settling, which counts itself once it returns
        until(lambda: gone() is None and keeper.settled >= 2, "the cycle reclaimed by a later settling")
        print(alive_after_collect)
        keeper.stop()
        """
    )
    assert out == "True"


def test_a_stopped_keeper_that_never_saw_its_caches_sync_freezes_nothing():
    out = _child(
        """
        keeper = HeapKeeper(lambda: False, poll=0.01).start()
        time.sleep(0.1)
        keeper.stop()
        print(keeper.settled, gc.get_freeze_count())
        """
    )
    assert out == "0 0"


@pytest.mark.parametrize("interval, poll", [(0, 1), (1, 0), (-5, 1)])
def test_a_keeper_refuses_intervals_that_are_not_positive_seconds(interval, poll):
    with pytest.raises(ValueError, match="must be positive seconds"):
        HeapKeeper(lambda: True, interval=interval, poll=poll)
