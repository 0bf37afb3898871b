"""The journal file is node-local state that a crash, a full disk or a hostile hand may have mangled:
anything not fully understood proves nothing, in bounded time and memory."""

from __future__ import annotations

import json

import pytest

from plugin.journal import JOURNAL_FILE, MAX_BYTES, MAX_ENTRIES, Entry, Journal, Owner, decode, encode
from plugin.metrics import PluginMetrics

OWNER = Owner("uid-1", "default", "a", 0, 1)
KEY = ("GPU-1", "1g.5gb", 0, 1)


def entry(**changes) -> dict:
    base = Entry.intent(KEY, OWNER).with_runtime(3, 0, "MIG-1").model_dump(exclude_none=True)
    return {**base, **changes}


def test_a_journal_round_trips_through_its_text():
    entries = [
        Entry.intent(KEY, OWNER),
        Entry.intent(("GPU-1", "2g.10gb", 2, 2), OWNER).with_runtime(1, 0, "MIG-2"),
    ]
    assert decode(encode(entries)) == sorted(entries, key=lambda e: e.key)


@pytest.mark.parametrize(
    "text, problem",
    [
        ("", "not JSON"),
        ("{", "not JSON"),
        ("[" * 600_000 + "]" * 600_000, "larger than"),
        ("[" * 50_000 + "]" * 50_000, "not JSON"),
        (json.dumps({"version": 2, "entries": []}), "version"),
        (json.dumps({"version": 1}), "entries"),
        (json.dumps({"version": 1, "entries": [entry(start="0")]}), "start"),
        (json.dumps({"version": 1, "entries": [entry(size=0)]}), "size"),
        (json.dumps({"version": 1, "entries": [entry(extra=1)]}), "extra"),
        (json.dumps({"version": 1, "entries": [entry(podUID="x" * 300)]}), "podUID"),
        (json.dumps({"version": 1, "entries": [entry(), entry(gpuInstanceID=4)]}), "same GPU"),
        (json.dumps({"version": 1, "entries": [entry(start=i) for i in range(MAX_ENTRIES + 1)]}), "entries"),
    ],
)
def test_a_journal_that_is_not_fully_understood_is_rejected_whole(text, problem):
    with pytest.raises(ValueError, match=problem):
        decode(text)


def test_an_oversized_journal_file_is_read_only_up_to_its_bound_and_set_aside(tmp_path):
    (tmp_path / JOURNAL_FILE).write_bytes(b" " * (MAX_BYTES * 3))
    metrics = PluginMetrics()
    journal = Journal(tmp_path, metrics)

    assert journal.load() == "corrupt"
    assert journal.entries() == []
    assert (tmp_path / (JOURNAL_FILE + ".corrupt")).exists() and not (tmp_path / JOURNAL_FILE).exists()
    assert metrics.value("dynmig_plugin_journal_problems_total", reason="corrupt") == 1


def test_each_record_is_on_disk_when_the_call_returns(tmp_path):
    journal = Journal(tmp_path / "state")
    assert journal.load() == "missing"
    journal.record(Entry.intent(KEY, OWNER))

    reread = Journal(tmp_path / "state")
    assert reread.load() == "ok"
    assert [e.key for e in reread.entries()] == [KEY]
    journal.remove([KEY])
    assert Journal(tmp_path / "state").load() == "ok" and Journal(tmp_path / "state").entries() == []
    assert sorted(p.name for p in (tmp_path / "state").iterdir()) == [JOURNAL_FILE]
