"""The real-trace replay (bench/_packing/traces.py): a trace's pods become MIG requests by the declared
mappings, refused work is counted in the window a pod arrives in, and without the trace file the bench
says how to fetch it instead of failing. The pods below are made up in the trace's own format."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import placement
import pytest
from _baselines import FirstFit
from _packing import traces

ROOT = Path(__file__).resolve().parents[2]
HEAD = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
DAY = 86400


def _row(n: int, gpus: int, milli: int, at: float, end: float) -> str:
    return f"pod-{n},4000,1024,{gpus},{milli},,LS,Running,{at:.0f},{end:.0f},{at:.0f}"


def test_a_pod_of_81_percent_of_an_a100_asks_its_memory_as_memory_and_a_whole_gpu_as_compute():
    job = traces.Job(0.0, 60.0, 1, 810)
    (mem,) = traces.ask(job, "memory", "A100-40GB x5")
    assert 0.80 * 40960 < mem < 0.82 * 40960  # a 7g.40gb covers it; a 4g.20gb does not
    assert traces.ask(job, "compute", "A100-40GB x5") == (None,)  # 6 of 7 compute slices: the whole GPU


def test_a_pod_of_23_percent_asks_a_2g_as_compute_slices_and_multi_gpu_pods_ask_whole_gpus():
    (mem,) = traces.ask(traces.Job(0.0, 60.0, 1, 230), "compute", "A100-40GB x5")
    assert 9000 < mem < 10240  # the 2g.10gb's memory: 0.23 of 7 slices rounds up to 2
    assert traces.ask(traces.Job(0.0, 60.0, 8, 1000), "memory", "mixed x6") == (None,) * 8


def test_cpu_only_pods_are_left_out_and_pods_come_in_creation_order():
    lines = [HEAD, _row(1, 1, 500, 200, 300), _row(2, 0, 0, 100, 900), _row(3, 4, 1000, 50, 80)]
    jobs = traces.parse(lines)
    assert [(j.at, j.gpus, j.life) for j in jobs] == [(50.0, 4, 30.0), (200.0, 1, 100.0)]


def test_a_malformed_row_is_named_with_the_fields_it_needs():
    with pytest.raises(ValueError, match="trace line 2: num_gpu, gpu_milli"):
        traces.parse([HEAD, "pod-1,4000,1024,two,500,,LS,Running,1,2,1"])


def test_an_8_gpu_job_finding_no_empty_node_is_refused_work_in_the_window_it_arrived_in():
    day = 125 * DAY  # in window 2 (days 120-130)
    lines = [HEAD]
    # seven 8-GPU jobs fill a 7-node pool for a day; an eighth arrives an hour later and finds no node
    lines += [_row(n, 8, 1000, day + n, day + DAY) for n in range(7)]
    lines += [_row(7, 8, 1000, day + 3600, day + 3600 + 600)]
    jobs = traces.parse(lines)
    got = traces.replay(FirstFit, "A100-40GB x7", "memory", jobs, placement.apply, placement.release)
    w = got["windows"][traces.window_of(day)]
    assert w["refused"] == 1
    assert w["refused_work"] == pytest.approx(8 * 10.0)  # 8 GPUs for 10 minutes
    assert w["by_kind"] == {"8 GPUs": pytest.approx(80.0)}
    assert sum(x["refused"] for x in got["windows"]) == 1


def _eight_gpu_jobs_and_shares() -> list[traces.Job]:
    day = 125 * DAY
    lines = [HEAD] + [
        _row(n, 8 if n % 5 == 0 else 1, 1000 if n % 5 == 0 else 300, day + n, day + n + 60) for n in range(60)
    ]
    return traces.parse(lines)


def test_the_dynmig_arm_prices_no_node_slots_as_serve_by_default_and_the_nodes_arm_does():
    arms = {}
    for cls in (placement.Dynmig, placement.DynmigNodes):

        class Kept(cls):  # the adapter the replay made, kept to read its index afterwards
            def __init__(self, nodes):
                super().__init__(nodes)
                arms[self.name] = self

        traces.replay(
            Kept, "A100-40GB x5", "memory", _eight_gpu_jobs_and_shares(), placement.apply, placement.release
        )
    assert arms["dynmig"].index.node_demand == ()
    assert [n for n, _ in arms["dynmig+nodes"].index.node_demand] == [8]


def test_the_node_pricing_arm_is_measured_beside_dynmig_and_never_taken_for_the_best_baseline():
    runs = {
        name: {"windows": [{"refused_work": work, "refused": 1, "offered_work": 100.0, "by_kind": {}}] * 4}
        for name, work in (("dynmig", 6.0), ("dynmig+nodes", 2.0), ("first-fit", 4.0), ("best-fit", 5.0))
    }
    s = traces.summarise("A100-40GB x5", "memory", 1, runs)
    assert s["best_baseline"] == "first-fit"
    assert (s["ratio"], s["ratio_nodes"]) == (1.5, 0.5)


def test_the_held_out_windows_are_not_the_tuning_windows():
    assert not set(traces.TUNING_WINDOWS) & set(traces.HELD_OUT_WINDOWS)


def test_a_changed_trace_file_is_refused_by_its_checksum(tmp_path):
    source = traces.SOURCES["alibaba-2023"]
    (tmp_path / source.file).write_text(HEAD + "\n")
    with pytest.raises(ValueError, match="SHA-256"):
        traces.load(source, tmp_path)


def test_without_the_trace_file_the_bench_says_how_to_fetch_it_and_replays_nothing(tmp_path):
    done = subprocess.run(
        [sys.executable, "bench/placement.py", "--traces", "--trace-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0
    assert "skipped" in done.stdout and "--traces --fetch" in done.stdout
    assert "best baseline" not in done.stdout
