"""Defrag advice: the cheapest set of running MIG pods whose removal lets a pending pod be placed."""

from __future__ import annotations

from itertools import combinations

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from base.policyfiles import default_allowlist
from mig.catalog import find_model
from mig.defrag import (
    Advice,
    Budgets,
    Holder,
    advice_text,
    advise,
    cost,
    opted_in,
    pod_priority,
    pod_started,
    within_budgets,
)
from mig.placement import ContainerRequest, GpuState, PlacementIndex, Plan, PodRequest
from mig.placement.published import from_catalog
from mig.types import Placement

ALLOW = default_allowlist()
MODELS = {k: find_model(k) for k in ("A100-SXM4-40GB", "H100-SXM5-80GB")}
PROFILES = {k: from_catalog(m, ALLOW.profiles_for(m.nvml_name)) for k, m in MODELS.items()}
NOW = 10_000.0


def gpu(node: str, i: int, held: list[Placement], model: str = "A100-SXM4-40GB", **kw) -> GpuState:
    m = MODELS[model]
    return GpuState(
        node, f"GPU-{node}-{i}", m.nvml_name, PROFILES[model], tuple(held), True, i, m.memory_mib, **kw
    )


def holder(name: str, node: str, i: int, start: int, size: int, **kw) -> Holder:
    return Holder(f"default/{name}", node, ((f"GPU-{node}-{i}", Placement(start, size)),), **kw)


def pod(mib: int | None, count: int = 1) -> PodRequest:
    return PodRequest((ContainerRequest(count, mib),))


def fleet_of(
    holders: list[Holder], shape: dict[tuple[str, int], str], extra: dict | None = None
) -> list[GpuState]:
    """GPUs (node, index) -> model, occupied by exactly what the holders hold (plus `extra` placements)."""
    out = []
    for (node, i), model in sorted(shape.items()):
        uuid = f"GPU-{node}-{i}"
        held = [p for h in holders for u, p in h.placements if u == uuid] + list((extra or {}).get(uuid, ()))
        out.append(gpu(node, i, held, model))
    return out


def placed_after(advice: Advice, p: PodRequest, fleet: list[GpuState], holders: list[Holder]) -> Plan | None:
    rebuilt = []
    for g in fleet:
        kept = [
            q
            for q in g.occupied
            if not any(u == g.uuid and q == pl for h in advice.victims for u, pl in h.placements)
        ]
        rebuilt.append(
            GpuState(g.node, g.uuid, g.type, g.profiles, tuple(kept), g.healthy, g.index, g.memory_mb)
        )
    result = PlacementIndex(rebuilt).plan(p)
    return result if isinstance(result, Plan) else None


def names(advice: Advice) -> list[str]:
    return sorted(h.name.split("/")[1] for h in advice.victims)


# ---- tables ---------------------------------------------------------------------------------------

SEVEN_ONE_G = [
    holder(f"p{s}", "n0", 0, s, 1, priority=(10 if s < 4 else 0), started=NOW - 100) for s in range(7)
]


def test_a_3g_on_a_full_a100_frees_the_half_held_by_the_lower_priority_pods():
    fleet = fleet_of(SEVEN_ONE_G, {("n0", 0): "A100-SXM4-40GB"})
    advice = advise(pod(20000), fleet, SEVEN_ONE_G, now=NOW)
    assert names(advice) == ["p4", "p5", "p6"]
    assert advice.exact and advice.node == "n0"
    assert advice.plan is not None and advice.plan.devices[0].placement == Placement(4, 4)
    assert placed_after(advice, pod(20000), fleet, SEVEN_ONE_G) is not None


def test_fewer_pods_win_over_more_pods_of_the_same_priority():
    holders = [
        holder("big", "n0", 0, 0, 4, started=NOW - 10),
        *(holder(f"small{s}", "n0", 0, s, 1, started=NOW - 10) for s in (4, 5, 6)),
    ]
    fleet = fleet_of(holders, {("n0", 0): "A100-SXM4-40GB"})
    assert names(advise(pod(20000), fleet, holders, now=NOW)) == ["big"]


def test_between_equal_sets_the_younger_pods_go():
    holders = [
        holder("old", "n0", 0, 0, 4, started=NOW - 5000),
        holder("young", "n0", 0, 4, 4, started=NOW - 5),
    ]
    fleet = fleet_of(holders, {("n0", 0): "A100-SXM4-40GB"})
    assert names(advise(pod(20000), fleet, holders, now=NOW)) == ["young"]


def test_a_budget_that_allows_no_disruption_moves_the_advice_to_the_other_set():
    holders = [
        holder("guarded", "n0", 0, 4, 4, started=NOW - 5, groups=("default/web",)),
        holder("free", "n0", 0, 0, 4, started=NOW - 5000),
    ]
    fleet = fleet_of(holders, {("n0", 0): "A100-SXM4-40GB"})
    advice = advise(pod(20000), fleet, holders, {"default/web": 0}, now=NOW)
    assert names(advice) == ["free"]
    assert advice.blocked_by_budget == ("default/web",)


def test_a_more_important_pod_goes_when_the_only_cheaper_set_is_held_by_a_budget():
    # 0:4 is held by a guarded priority-0 pod, 4:4 by a priority-5 one: the cheaper set on the leading
    # terms is illegal, so it must not hide the dearer one that works (found by the brute force below)
    holders = [
        holder("guarded", "n0", 0, 0, 1, started=NOW - 1, groups=("default/web",)),
        holder("other", "n0", 0, 4, 1, priority=5, started=NOW - 1, request=pod(4000)),
    ]
    fleet = fleet_of(holders, {("n0", 0): "A100-SXM4-40GB"})
    advice = advise(pod(10000), fleet, holders, {"default/web": 0}, now=NOW)
    assert names(advice) == ["other"]
    assert advice.blocked_by_budget == ("default/web",)
    assert placed_after(advice, pod(10000), fleet, holders) is not None


def test_a_budget_counts_every_pod_of_its_group_in_the_set():
    web = [holder(f"w{s}", "n0", 0, s, 1, groups=("default/web",)) for s in (4, 5, 6)]
    fleet = fleet_of(web, {("n0", 0): "A100-SXM4-40GB"}, {"GPU-n0-0": [Placement(0, 4)]})
    assert not advise(pod(20000), fleet, web, {"default/web": 2}, now=NOW).found
    assert names(advise(pod(20000), fleet, web, {"default/web": 3}, now=NOW)) == ["w4", "w5", "w6"]
    assert within_budgets(web, {"default/web": 2}) == "default/web"


def test_when_every_set_is_blocked_by_budgets_the_advice_says_which():
    holders = [
        holder("a", "n0", 0, 0, 4, groups=("default/a",)),
        holder("b", "n0", 0, 4, 4, groups=("default/b",)),
    ]
    fleet = fleet_of(holders, {("n0", 0): "A100-SXM4-40GB"})
    advice = advise(pod(20000), fleet, holders, {}, now=NOW)
    assert not advice.found
    assert (
        "default/a" in advice.why_none
        and "default/b" in advice.why_none
        and "PodDisruptionBudget" in advice.why_none
    )


def test_pods_that_are_not_candidates_and_slices_no_pod_owns_are_never_freed():
    holders = [holder("stays", "n0", 0, 0, 4, candidate=False), holder("goes", "n0", 0, 4, 1)]
    fleet = fleet_of(holders, {("n0", 0): "A100-SXM4-40GB"}, {"GPU-n0-0": [Placement(5, 1)]})  # a leftover
    advice = advise(pod(20000), fleet, holders, now=NOW)
    assert not advice.found
    assert "no set" in advice.why_none


def test_the_cheapest_set_may_lie_on_another_node_and_another_model():
    holders = [
        holder("a100-hi", "n0", 0, 0, 4, priority=100),
        holder("a100-hi2", "n0", 0, 4, 4, priority=100),
        holder("h100-lo", "n1", 0, 0, 4, priority=1),
        holder("h100-lo2", "n1", 0, 4, 4, priority=1),
    ]
    fleet = fleet_of(holders, {("n0", 0): "A100-SXM4-40GB", ("n1", 0): "H100-SXM5-80GB"})
    advice = advise(pod(20000), fleet, holders, now=NOW)
    assert advice.node == "n1" and len(advice.victims) == 1
    assert placed_after(advice, pod(20000), fleet, holders) is not None


def test_a_pod_that_fits_already_needs_no_advice():
    holders = [holder("a", "n0", 0, 0, 1)]
    advice = advise(pod(5000), fleet_of(holders, {("n0", 0): "A100-SXM4-40GB"}), holders, now=NOW)
    assert not advice.found and "fits without" in advice.why_none
    assert advice_text(advice).startswith("defrag: ")


def test_two_3g_devices_on_one_node_free_two_halves_of_the_cheapest_gpus():
    holders = [
        holder("g0-lo", "n0", 0, 0, 4, priority=0),
        holder("g0-hi", "n0", 0, 4, 4, priority=50),
        holder("g1-lo", "n0", 1, 0, 4, priority=0),
        holder("g1-hi", "n0", 1, 4, 4, priority=50),
    ]
    fleet = fleet_of(holders, {("n0", 0): "A100-SXM4-40GB", ("n0", 1): "A100-SXM4-40GB"})
    advice = advise(pod(20000, count=2), fleet, holders, now=NOW)
    assert names(advice) == ["g0-lo", "g1-lo"] and advice.exact
    assert advice.plan is not None and len(advice.plan.devices) == 2
    assert placed_after(advice, pod(20000, count=2), fleet, holders) is not None


def test_a_capped_search_still_names_a_working_set_and_says_it_is_not_proven_cheapest():
    holders = [holder(f"p{s}-{i}", "n0", i, s, 1) for i in range(2) for s in range(7)]
    fleet = fleet_of(holders, {("n0", 0): "A100-SXM4-40GB", ("n0", 1): "A100-SXM4-40GB"})
    advice = advise(pod(20000, count=2), fleet, holders, now=NOW, max_checks=3)
    assert advice.found and not advice.exact
    assert placed_after(advice, pod(20000, count=2), fleet, holders) is not None
    assert "not proven cheapest" in advice_text(advice)


def test_the_advice_line_names_the_pods_the_node_what_the_pod_then_gets_and_that_bare_pods_are_lost():
    fleet = fleet_of(SEVEN_ONE_G, {("n0", 0): "A100-SXM4-40GB"})
    text = advice_text(advise(pod(20000), fleet, SEVEN_ONE_G, now=NOW))
    assert text == (
        "defrag: removing 3 pod(s) on n0 (default/p4, default/p5, default/p6) would let it be placed "
        "and get 3g.20gb on GPU-n0-0 at 4:4; evicts default/p4 (not recreated), default/p5 (not "
        "recreated), default/p6 (not recreated)"
    )


# ---- where the removed pods go -------------------------------------------------------------------

ONE_G, WHOLE = pod(4000), pod(None)


def test_the_advisor_moves_two_small_services_rather_than_evict_a_whole_gpu_job_that_has_no_other_home():
    # n0: a whole-GPU job on GPU 0, two 1g services on GPU 1; n1: one A100 with room for both services.
    holders = [
        holder("job", "n0", 0, 0, 8, started=NOW - 5, request=WHOLE),
        holder("svc-a", "n0", 1, 0, 1, started=NOW - 5, request=ONE_G),
        holder("svc-b", "n0", 1, 1, 1, started=NOW - 5, request=ONE_G),
        holder("other", "n1", 0, 0, 4, candidate=False, request=pod(20000)),
    ]
    shape = {("n0", 0): "A100-SXM4-40GB", ("n0", 1): "A100-SXM4-40GB", ("n1", 0): "A100-SXM4-40GB"}
    fleet = fleet_of(holders, shape)
    advice = advise(WHOLE, fleet, holders, now=NOW)
    assert names(advice) == ["svc-a", "svc-b"] and advice.exact and not advice.lost
    assert [(m.victim.name, m.plan.node if m.plan else None) for m in advice.moves] == [
        ("default/svc-a", "n1"),
        ("default/svc-b", "n1"),
    ]
    assert placed_after(advice, WHOLE, fleet, holders) is not None


def test_between_single_pods_the_one_whose_replacement_has_a_home_goes_even_if_it_ran_longer():
    # n0: a young bare 3g pod at 0:4 and an old 2g service at 4:2; n1 has room for a 2g, not a 3g.
    holders = [
        holder("young-bare", "n0", 0, 0, 4, started=NOW - 5),  # no request: nothing recreates it
        holder("old", "n0", 0, 4, 2, started=NOW - 5000, request=pod(9000)),
        holder("n1-job", "n1", 0, 0, 4, candidate=False, request=pod(20000)),
        holder("n1-svc", "n1", 0, 6, 1, candidate=False, request=ONE_G),
    ]
    fleet = fleet_of(holders, {("n0", 0): "A100-SXM4-40GB", ("n1", 0): "A100-SXM4-40GB"})
    advice = advise(pod(20000), fleet, holders, now=NOW)
    assert names(advice) == ["old"] and not advice.lost
    text = advice_text(advice)
    assert text.endswith("; moves default/old to n1 (2g.10gb on GPU-n1-0 at 4:2)"), text


def test_a_more_important_pod_is_never_disturbed_to_spare_a_less_important_one_its_home():
    holders = [
        holder("low-stuck", "n0", 0, 0, 4, priority=0, request=pod(20000)),
        holder("high-mobile", "n0", 0, 4, 4, priority=5, request=ONE_G),
        holder("n1-job", "n1", 0, 0, 4, candidate=False, request=pod(20000)),
        holder("n1-svc", "n1", 0, 6, 1, candidate=False, request=ONE_G),
    ]
    fleet = fleet_of(holders, {("n0", 0): "A100-SXM4-40GB", ("n1", 0): "A100-SXM4-40GB"})
    advice = advise(pod(20000), fleet, holders, now=NOW)
    assert names(advice) == ["low-stuck"]
    assert [h.name for h in advice.lost] == ["default/low-stuck"]
    assert "evicts default/low-stuck (no other home)" in advice_text(advice)


def test_with_homes_required_a_set_that_strands_a_pod_is_never_named_and_the_refusal_says_why():
    holders = [holder("job", "n0", 0, 0, 8, request=WHOLE)]
    fleet = fleet_of(holders, {("n0", 0): "A100-SXM4-40GB"})
    assert names(advise(WHOLE, fleet, holders, now=NOW)) == ["job"]
    moving = advise(WHOLE, fleet, holders, now=NOW, require_homes=True)
    assert not moving.found
    assert "no other home" in moving.why_none


def test_with_homes_required_the_advisor_takes_a_dearer_set_whose_pods_all_move():
    holders = [
        holder("job", "n0", 0, 0, 8, priority=0, request=WHOLE),
        holder("svc", "n0", 1, 0, 1, priority=3, request=ONE_G),
    ]
    # n1 holds slices no candidate owns (0:4 and 4:1): room for a 1g, not for a whole-GPU job
    fleet = fleet_of(holders, {("n0", 0): "A100-SXM4-40GB", ("n0", 1): "A100-SXM4-40GB"})
    fleet.append(gpu("n1", 0, [Placement(0, 4), Placement(4, 1)]))
    assert names(advise(WHOLE, fleet, holders, now=NOW)) == ["job"]  # priority 0 beats 3
    advice = advise(WHOLE, fleet, holders, now=NOW, require_homes=True)
    assert names(advice) == ["svc"] and advice.moves[0].plan is not None
    assert advice.moves[0].plan.node == "n1"


def test_a_two_device_pods_advice_also_prefers_the_set_whose_pods_can_move():
    # n0: two A100s, each with a young 3g job and an old 1g service; n1 has room for two 1g, no 3g.
    # The pod asks for two 3g devices: both jobs (no other home) or both services (they move).
    holders = [
        holder("job0", "n0", 0, 0, 4, started=NOW - 1, request=pod(20000)),
        holder("svc0", "n0", 0, 4, 1, started=NOW - 500, request=ONE_G),
        holder("job1", "n0", 1, 0, 4, started=NOW - 1, request=pod(20000)),
        holder("svc1", "n0", 1, 4, 1, started=NOW - 500, request=ONE_G),
        holder("n1-job", "n1", 0, 0, 4, candidate=False, request=pod(20000)),
        holder("n1-svc", "n1", 0, 4, 1, candidate=False, request=ONE_G),
    ]
    shape = {("n0", 0): "A100-SXM4-40GB", ("n0", 1): "A100-SXM4-40GB", ("n1", 0): "A100-SXM4-40GB"}
    fleet = fleet_of(holders, shape)
    advice = advise(pod(20000, count=2), fleet, holders, now=NOW)
    assert names(advice) == ["svc0", "svc1"] and advice.exact and not advice.lost
    assert placed_after(advice, pod(20000, count=2), fleet, holders) is not None


# ---- brute force on small fleets ---------------------------------------------------------------


REQUESTS = {1: [pod(4000), pod(9000)], 2: [pod(9000)], 4: [pod(20000)], 8: [pod(None)]}


@st.composite
def small_worlds(draw: st.DrawFn):
    shape = {}
    for n in range(draw(st.integers(1, 2))):
        for i in range(draw(st.integers(1, 2))):
            shape[(f"n{n}", i)] = draw(st.sampled_from(sorted(MODELS)))
    holders: list[Holder] = []
    for (node, i), model in sorted(shape.items()):
        mask = 0
        for k in range(draw(st.integers(0, 5))):
            profile = draw(st.sampled_from(PROFILES[model]))
            p = draw(st.sampled_from(profile.placements))
            if p.mask & mask:
                continue
            mask |= p.mask
            known = REQUESTS.get(p.size, []) if model == "A100-SXM4-40GB" else []
            holders.append(
                Holder(
                    f"ns/{node}-{i}-{k}",
                    node,
                    ((f"GPU-{node}-{i}", p),),
                    priority=draw(st.sampled_from([0, 0, 5, 100])),
                    started=NOW - draw(st.sampled_from([1, 50, 900])),
                    groups=draw(st.sampled_from([(), (), ("ns/web",)])),
                    candidate=draw(st.integers(0, 5)) > 0,
                    request=draw(st.sampled_from([*known, pod(profile.memory_mb), None])),
                )
            )
    budgets = {"ns/web": draw(st.integers(0, 2))}
    request = draw(st.sampled_from([None, 5000, 10000, 20000, 40000]))
    count = draw(st.sampled_from([1, 1, 2]))
    return shape, holders, budgets, pod(request, count)


def _lost_after(shape, holders, subset, p) -> int | None:
    """Independently of the advisor: free the subset, place the pod anywhere, then each removed pod's
    replacement anywhere, in the controller's order (most important first; then the pod whose slices
    a pod placed so far took; else those whose request fits nowhere before, then by name); how many
    find no place, or None when the pod does not land or a removed pod is in no one's way (neither
    the pod's nor another replacement's)."""
    before = PlacementIndex(fleet_of(holders, shape))
    gone = {h.name for h in subset}
    index = PlacementIndex(fleet_of([h for h in holders if h.name not in gone], shape))
    plan = index.plan(p)
    if not isinstance(plan, Plan) or not plan.devices:
        return None
    index.apply(plan)
    placed, plans, lost = [plan], {}, 0

    def overlaps(q: Plan, h: Holder) -> bool:
        return any(
            u == d.gpu_uuid and pl.mask & d.placement.mask for u, pl in h.placements for d in q.devices
        )

    def fits_before(h: Holder) -> bool:
        return h.request is not None and isinstance(before.plan(h.request), Plan)

    left = sorted(subset, key=lambda h: (-h.priority, fits_before(h), h.name))
    while left:
        top = left[0].priority
        h = next((x for x in left if x.priority == top and any(overlaps(q, x) for q in placed)), left[0])
        left.remove(h)
        again = index.plan(h.request) if h.request is not None else None
        if isinstance(again, Plan) and again.devices:
            index.apply(again)
            placed.append(again)
            plans[h.name] = again
        else:
            lost += 1
    for h in subset:
        if not overlaps(plan, h) and not any(overlaps(q, h) for n, q in plans.items() if n != h.name):
            return None
    return lost


def _brute_force(shape, holders, budgets, p, require_homes=False):
    """Every subset of candidates (on any nodes), cheapest by the cost's priority/lost/count/sum/age."""
    best = None
    pool = [h for h in holders if h.candidate]
    for k in range(1, len(pool) + 1):
        for subset in combinations(pool, k):
            if within_budgets(subset, budgets):
                continue
            lost = _lost_after(shape, holders, subset, p)
            if lost is None or (require_homes and lost):
                continue
            c = cost("", subset, NOW, lost)[:5]
            best = c if best is None or c < best else best
    return best


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_worlds(), st.booleans())
def test_no_cheaper_set_exists_than_the_advice_and_the_advice_places_the_pod(world, require_homes):
    shape, holders, budgets, p = world
    fleet = fleet_of(holders, shape)
    advice = advise(p, fleet, holders, budgets, now=NOW, require_homes=require_homes)
    if isinstance(PlacementIndex(fleet).plan(p), Plan):
        assert not advice.found
        return
    assume(sum(h.candidate for h in holders) <= 9)  # 2^9 subsets: brute force stays quick
    cheapest = _brute_force(shape, holders, budgets, p, require_homes)
    if advice.found:  # whatever the search's limits: a set that works as it says
        lost = len(advice.lost)
        assert _lost_after(shape, holders, advice.victims, p) == lost  # the moves it names are the engine's
        assert len(advice.moves) == len(advice.victims)
        assert within_budgets(advice.victims, budgets) == ""
        assert all(h.candidate for h in advice.victims)
        assert placed_after(advice, p, fleet, holders) is not None
        assert cheapest is not None and cost("", advice.victims, NOW, lost)[:5] >= cheapest
    if advice.exact:  # proven cheapest: nothing cheaper by brute force
        assert (cost("", advice.victims, NOW, len(advice.lost))[:5] if advice.found else None) == cheapest


# ---- reading pods and budgets --------------------------------------------------------------------


def test_a_pods_priority_start_and_consent_are_read_defensively():
    pod = {
        "metadata": {
            "annotations": {"dynmig.io/evictable": " TRUE "},
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {"priority": 7},
        "status": {"startTime": "2026-01-01T00:01:40Z"},
    }
    assert (pod_priority(pod), opted_in(pod)) == (7, True)
    assert pod_started(pod) - pod_started({"metadata": pod["metadata"]}) == 100
    hostile = {
        "metadata": {"annotations": ["x"]},
        "spec": {"priority": True},
        "status": {"startTime": "x" * 10**5},
    }
    assert (pod_priority(hostile), opted_in(hostile), pod_started(hostile)) == (0, False, 0.0)


def test_a_budget_selects_by_labels_in_its_namespace_and_an_empty_or_unreadable_selector_selects_nothing():
    pdbs = [
        {
            "metadata": {"namespace": "a", "name": "web"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
            "status": {"disruptionsAllowed": 1},
        },
        {
            "metadata": {"namespace": "a", "name": "all"},
            "spec": {"selector": {}},
            "status": {"disruptionsAllowed": 5},
        },
        {
            "metadata": {"namespace": "a", "name": "odd"},
            "spec": {"selector": {"matchExpressions": [{"key": "app", "operator": "Near"}]}},
        },
        {
            "metadata": {"namespace": "a", "name": "new", "generation": 2},
            "spec": {"selector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]}},
            "status": {"disruptionsAllowed": 3, "observedGeneration": 1},
        },
        {
            "metadata": {"namespace": "b", "name": "web"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
        },
    ]
    budgets = Budgets.from_objects(pdbs)
    pod = {"metadata": {"namespace": "a", "labels": {"app": "web"}}}
    assert budgets.groups(pod) == ("a/web", "a/new")
    assert budgets.allowed["a/web"] == 1 and budgets.allowed["a/new"] == 0  # not yet synced: nothing allowed


def test_a_hostile_budget_object_allows_nothing_and_never_raises():
    pdbs = [
        {
            "metadata": {"namespace": "a", "name": "x", "generation": "2"},
            "spec": [],
            "status": {"observedGeneration": {}},
        },
        {"metadata": "nope", "status": {"disruptionsAllowed": "9"}},
        {
            "metadata": {"namespace": "a", "name": "y"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
            "status": {"disruptionsAllowed": True},
        },
    ]
    budgets = Budgets.from_objects(pdbs)
    assert set(budgets.allowed.values()) == {0}
    assert budgets.groups({"metadata": {"namespace": "a", "labels": {"app": "web"}}}) == ("a/y",)
