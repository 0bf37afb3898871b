"""The placement bench's defrag eviction replay (bench/_packing/eviction.py): dynmig's engine places, the
real advisor names each set, and every pod is accounted for.

The replay runs with the bench's own harness (its dynmig adapter, its checked `apply` and `release`),
imported from bench/placement.py, so these tests exercise exactly what `make bench` prints.
"""

from __future__ import annotations

import placement
import pytest
from _baselines import BNode, catalog_node
from _packing.eviction import (
    EVERYONE,
    EVERYONE_MOVES,
    JOBS,
    JOBS_MOVES,
    NONE,
    PER_MINUTE,
    RANKINGS,
    EvictionSet,
    Harness,
    Outcome,
    churn_evicting,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

HARNESS = Harness(placement.Dynmig, placement.apply, placement.release, placement.gpu_states, placement.kind)
WHOLE, ONE_G, TWO_G, THREE_G = (None,), (4000,), (9000,), (18000,)  # sizes on an A100-40GB


def a100s(gpus: int) -> list[BNode]:
    return [catalog_node("node-0", "0", "A100-SXM4-40GB", gpus)]


def replay(arrivals: list, nodes: list[BNode], ranking=EVERYONE) -> Outcome:
    return churn_evicting(arrivals, nodes, HARNESS, ranking, check=True)


def test_a_whole_gpu_job_with_no_empty_gpu_evicts_the_youngest_single_pod_which_then_has_nowhere_to_go():
    # Two A100s: a whole-GPU job on one, a 1g service on the other; a second whole-GPU job arrives.
    # Both single-pod sets cost one pod of priority 0; the 1g service ran 1 minute, the job 2: the
    # service goes, the job takes its GPU, and the recreated service finds both GPUs full.
    trace = [(0.0, WHOLE, 100.0), (1.0, ONE_G, 100.0), (2.0, WHOLE, 100.0)]
    for ranking in (EVERYONE, JOBS):
        out = replay(trace, a100s(2), ranking)
        assert out.sets == [EvictionSet(2.0, 2, (1,), True, (), True)], ranking.name
        assert (out.arrivals_refused, out.evictions, out.evicted_lost, out.refused) == (0, 1, 1, 1)
        assert out.recovered == 1 and out.lost_minutes == 1.0
        assert out.refused_work == 1 / 8 * 99.0  # a 1g (1 of 8 slices) for the 99 minutes it had left


def test_with_move_only_the_controller_evicts_no_pod_the_engine_cannot_place_again():
    # The same two A100s: every set would strand a pod (the 1g service or the first job), so nothing
    # is evicted and the second job is refused, as plain dynmig refuses it.
    trace = [(0.0, WHOLE, 100.0), (1.0, ONE_G, 100.0), (2.0, WHOLE, 100.0)]
    for ranking in (EVERYONE_MOVES, JOBS_MOVES):
        out = replay(trace, a100s(2), ranking)
        assert (out.arrivals_refused, out.no_set, out.evictions, out.refused) == (1, 1, 0, 1), ranking.name


def test_the_advisor_moves_small_pods_rather_than_evict_a_whole_gpu_job_that_has_no_other_home():
    # Three A100s: a whole-GPU job (GPU 0), two 1g services, a 3g job and a 2g service on the other
    # two. A second whole-GPU job arrives. Evicting the first job is one pod, but it has no other
    # home; the smaller pods fit again beside each other, so they go and the fleet refuses nothing.
    trace = [(0.0, WHOLE, 100.0), (0.5, ONE_G, 100.0), (0.6, ONE_G, 100.0), (1.0, THREE_G, 100.0)]
    trace += [(1.1, TWO_G, 100.0), (2.0, WHOLE, 100.0)]
    for ranking in (EVERYONE, EVERYONE_MOVES):
        out = replay(trace, a100s(3), ranking)
        (evicted,) = out.sets
        assert (evicted.pending, evicted.placed, evicted.exact) == (5, True, True), ranking.name
        assert 0 not in evicted.victims and evicted.replaced == evicted.victims, evicted
        assert (out.refused, out.evicted_lost, out.advised_lost, out.misjudged) == (0, 0, 0, 0)


def test_the_engine_keeps_a_gpu_whole_so_a_whole_gpu_job_needs_no_eviction():
    # Three A100s, no departures: the 1g and both 3g share GPUs (a 3g at 0:4 beside the 1g at 6, the
    # other 3g at 4:4 beside it or on a second GPU), so the whole-GPU job finds an empty GPU.
    trace = [(0.0, ONE_G, 100.0), (1.0, THREE_G, 100.0), (2.0, THREE_G, 100.0), (3.0, WHOLE, 100.0)]
    for ranking in (EVERYONE, JOBS):
        out = replay(trace, a100s(3), ranking)
        assert (out.sets, out.refused, out.evictions) == ([], 0, 0), ranking.name


def test_the_evicted_pod_is_placed_again_where_slices_are_left_and_nothing_is_refused():
    # Three A100s of two 3g each; one 3g leaves GPU 0 and one leaves GPU 1, so each holds one 3g and no
    # GPU is empty when a whole-GPU job arrives. All opted in: one 3g goes and fits again beside the
    # other lone 3g, and the job takes the GPU it freed.
    trace = [(i * 0.1, THREE_G, 1.0 if i in (0, 2) else 100.0) for i in range(6)] + [(5.0, WHOLE, 100.0)]
    out = replay(trace, a100s(3), EVERYONE)
    (evicted,) = out.sets
    assert len(evicted.victims) == 1 and evicted.replaced == evicted.victims and evicted.placed, evicted
    assert evicted.victims[0] in (1, 3), evicted  # a lone 3g, not one of the pair sharing GPU 2
    assert (out.refused, out.evictions, out.evicted_lost) == (0, 1, 0)


def test_a_set_larger_than_the_controllers_bucket_is_never_evicted():
    # Seven 1g services fill one A100; a whole-GPU job needs all seven gone, and the bucket holds 6.
    trace = [(i * 0.1, ONE_G, 100.0) for i in range(7)] + [(1.0, WHOLE, 100.0)]
    out = replay(trace, a100s(1))
    assert (out.arrivals_refused, out.rate_limited, out.too_large, out.evictions) == (1, 1, 1, 0)
    assert out.by_kind == {"whole": 1} and out.sets == []
    assert out.refused_work == 100.0  # a whole GPU for its 100 minutes


def test_the_rate_limit_holds_evictions_to_six_within_a_minute_of_trace_time():
    # Three A100s of three 2g services each; three whole-GPU jobs within 0.02 minutes. Only services may
    # go: the first two jobs evict three each, the third finds the bucket empty and is refused.
    trace = [(i * 0.01, TWO_G, 100.0) for i in range(9)]
    trace += [(1.0, WHOLE, 100.0), (1.01, WHOLE, 100.0), (1.02, WHOLE, 100.0)]
    out = replay(trace, a100s(3), JOBS)
    assert [s.victims for s in out.sets] == [(6, 7, 8), (3, 4, 5)]
    assert out.evictions == PER_MINUTE and out.peak_per_minute == PER_MINUTE
    assert (out.arrivals_refused, out.rate_limited, out.too_large, out.evicted_lost) == (1, 1, 0, 6)
    assert out.refused == 7


def test_with_equal_priorities_the_pending_pod_outranks_no_one_and_nothing_is_evicted():
    # Under "jobs > services" a refused service outranks no running pod (the controller wants strictly
    # lower priority): one A100 full of 2g services refuses a fourth, and nothing is evicted.
    trace = [(i * 0.1, TWO_G, 100.0) for i in range(4)]
    out = replay(trace, a100s(1), JOBS)
    assert (out.arrivals_refused, out.no_set, out.evictions) == (1, 1, 0)


def _accounted(out: Outcome, arrivals: list, ranking) -> None:
    """Every eviction is of a candidate, every pod ends placed or counted, the totals add up."""
    assert all(s.placed for s in out.sets), "a set was evicted and the engine still refused the pod"
    assert out.advice_missed == 0
    assert out.evictions == sum(len(s.victims) for s in out.sets)
    assert out.evicted_lost == out.evictions - sum(len(s.replaced) for s in out.sets)
    assert out.recovered == len(out.sets)
    assert out.arrivals_refused == out.no_set + out.rate_limited + out.advice_missed
    assert out.arrivals_refused == sum(out.by_kind.values())
    assert out.misjudged == 0, "an evicted pod fared otherwise than the advice said"
    if ranking.move_only:
        assert out.evicted_lost == 0 and out.advised_lost == 0
    for s in out.sets:
        assert s.pending not in s.victims and set(s.replaced) <= set(s.victims)
        assert all(v < s.pending for v in s.victims)  # only pods that arrived earlier (running) go
        if ranking is JOBS:
            assert ranking.priority(arrivals[s.pending][1]) == 1
            assert all(ranking.evictable(arrivals[v][1]) for v in s.victims)


@pytest.mark.parametrize("ranking", [EVERYONE, JOBS, EVERYONE_MOVES, JOBS_MOVES], ids=lambda r: r.name)
def test_on_a_churn_trace_under_overload_every_pod_is_on_its_picks_and_every_eviction_accounted_for(ranking):
    arrivals = placement.trace(
        80, 2.0, placement.SEED, placement.MIX
    )  # 2 nodes × 4 GPUs, overloaded (12-43 evictions)
    nodes = [catalog_node(f"node-{n}", str(n), m, 4) for n, m in enumerate(placement.MODELS[:2])]
    out = replay(arrivals, nodes, ranking)
    _accounted(out, arrivals, ranking)
    assert out.evictions > 0  # the trace is loaded enough to exercise the mode


def test_with_no_pod_opted_in_the_replay_refuses_exactly_what_the_benchs_dynmig_row_refuses():
    arrivals = placement.trace(400, 2.0, placement.SEED + 1, placement.INFERENCE)
    plain = placement.churn(placement.Dynmig, arrivals, 3, 4)
    out = replay(arrivals, placement.make_fleet(3, 4), NONE)
    assert plain["refused"] > 0
    assert (out.refused, out.evictions, out.by_kind) == (plain["refused"], 0, plain["by_kind"])


SIZES = st.sampled_from([WHOLE, ONE_G, TWO_G, THREE_G, (30000,), (4000, 4000), (18000, 18000)])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.floats(0.0, 2.0), SIZES, st.floats(0.5, 20.0)), min_size=1, max_size=40),
    st.sampled_from(RANKINGS),
)
def test_any_trace_keeps_the_fleet_consistent_and_accounts_for_every_pod(steps, ranking):
    arrivals, t = [], 0.0
    for gap, mems, life in steps:
        t += gap
        arrivals.append((t, mems, life))
    nodes = [catalog_node("node-0", "0", "A100-SXM4-40GB", 2), catalog_node("node-1", "1", "RTX-PRO-6000", 1)]
    out = replay(arrivals, nodes, ranking)  # check=True: the fleet is checked after every arrival
    _accounted(out, arrivals, ranking)
