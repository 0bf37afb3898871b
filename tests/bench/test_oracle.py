"""The placement bench's oracle (bench/_packing/oracle.py): its proofs and its packings.

The oracle's verdicts are checked against a brute force written here (every node for every pod,
every GPU of that node, covering profile and legal placement for every device), and its packings by a
checker written here, so neither leans on the oracle's own per-GPU search.
"""

from __future__ import annotations

import pytest
from _baselines import BGpu, BNode, catalog_node
from _packing.oracle import INFEASIBLE, PACKED, Oracle, legal_packing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

MODELS = ("A100-SXM4-40GB", "H100-SXM5-80GB", "RTX-PRO-6000")
MEMS = (4000, 9000, 18000, 30000, None)  # None: a whole GPU
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

Mems = tuple[int | None, ...]


def fleet(*nodes: tuple[str, int]) -> list[BNode]:
    """Nodes as (model, GPUs)."""
    return [catalog_node(f"node-{n}", str(n), name, gpus) for n, (name, gpus) in enumerate(nodes)]


def covers(gpu: BGpu, mem: int | None) -> list:
    top = max(p.memory_mb for p in gpu.profiles)
    return [p for p in gpu.profiles if p.memory_mb >= (top if mem is None else mem)]


def brute_force_fits(nodes: list[BNode], pods: list[Mems]) -> bool:
    """Every pod on some node, each device on a GPU of that node at a covering profile's legal
    placement, disjoint per GPU. Exhaustive: largest devices first, states already refuted skipped, and
    of a node's GPUs with the same model and the same free slices only the first is tried (swapping two
    such GPUs gives the same state)."""
    big_first = sorted(
        ((p, m) for p, mems in enumerate(pods) for m in mems),
        key=lambda pm: (pm[1] is None, pm[1] or 0),
        reverse=True,
    )
    gpus = [g for n in nodes for g in n.gpus]
    masks = [0] * len(gpus)
    where: dict[int, BNode] = {}
    refuted: set[tuple] = set()

    def go(d: int) -> bool:
        if d == len(big_first):
            return True
        canonical = tuple(
            tuple(sorted(masks[i] for i, g in enumerate(gpus) if g in node.gpus)) for node in nodes
        )
        state = (d, canonical, tuple(sorted((p, n.name) for p, n in where.items())))
        if state in refuted:
            return False
        pod, mem = big_first[d]
        first = pod not in where
        for node in nodes if first else [where[pod]]:
            where[pod] = node
            tried: set[tuple[str, int]] = set()
            for n, gpu in enumerate(gpus):
                if gpu not in node.gpus or (gpu.type, masks[n]) in tried:
                    continue
                tried.add((gpu.type, masks[n]))
                for prof in covers(gpu, mem):
                    for p in prof.placements:
                        if masks[n] & p.mask:
                            continue
                        masks[n] |= p.mask
                        ok = go(d + 1)
                        masks[n] &= ~p.mask
                        if ok:
                            return True
        if first:
            del where[pod]
        refuted.add(state)
        return False

    return go(0)


def problems(nodes: list[BNode], pods: dict[int, Mems], packing: dict) -> list[str]:
    """This test's own check of a packing: each pod's devices all placed, on one node, at a legal
    placement of a profile its GPU publishes and large enough for the device, disjoint per GPU."""
    out = []
    assert set(packing) == set(pods)
    masks: dict[int, int] = {}
    gpus = {id(g) for n in nodes for g in n.gpus}
    for key, mems in pods.items():
        picks = packing[key]
        if len(picks) != len(mems):
            out.append(f"pod {key} has {len(picks)} of {len(mems)} devices")
        if len({gpu.node for gpu, _, _ in picks}) != 1:
            out.append(f"pod {key} spans nodes")
        for (gpu, place, prof), mem in zip(picks, mems, strict=False):
            if id(gpu) not in gpus or prof not in gpu.profiles or place not in prof.placements:
                out.append(f"pod {key}: {prof.name} at {place} is not legal on {gpu.uuid}")
            if prof not in covers(gpu, mem):
                out.append(f"pod {key}: {prof.name} is too small for {mem}")
            if masks.get(id(gpu), 0) & place.mask:
                out.append(f"pod {key}: overlap on {gpu.uuid}")
            masks[id(gpu)] = masks.get(id(gpu), 0) | place.mask
    return out


def judge(nodes: list[BNode], pods: list[Mems], lay_out: bool = True):
    running = dict(enumerate(pods[:-1]))
    # No solve may stop at its time limit here: the verdict must not depend on how loaded the machine is.
    return Oracle(nodes, lay_out=lay_out, time_limit=600.0).judge(running, pods[-1], len(pods) - 1)


pod_shapes = st.one_of(
    st.tuples(st.sampled_from(MEMS)),
    st.sampled_from(MEMS).map(lambda m: (m, m)),
)


@st.composite
def small_cases(draw) -> tuple[list[BNode], list[Mems]]:
    nodes = fleet(
        *[(draw(st.sampled_from(MODELS)), draw(st.integers(1, 2))) for _ in range(draw(st.integers(1, 2)))]
    )
    pods = draw(st.lists(pod_shapes, min_size=1, max_size=5))
    return nodes, pods


@st.composite
def packed_cases(draw) -> tuple[list[BNode], list[Mems]]:
    """A fleet of up to 3 nodes × 3 GPUs and pods made by placing instances on it at random: a packing
    exists by construction (the one drawn)."""
    nodes = fleet(
        *[(draw(st.sampled_from(MODELS)), draw(st.integers(1, 3))) for _ in range(draw(st.integers(1, 3)))]
    )
    pods: list[Mems] = []
    for node in nodes:
        masks = [0] * len(node.gpus)
        for _ in range(draw(st.integers(0, 8))):
            devices = draw(st.integers(1, 2))
            mem = draw(st.sampled_from(MEMS))
            placed = 0
            for _ in range(devices):
                g = draw(st.integers(0, len(node.gpus) - 1))
                gpu = node.gpus[g]
                free = [p for prof in covers(gpu, mem) for p in prof.placements if not p.mask & masks[g]]
                if not free:
                    break
                masks[g] |= draw(st.sampled_from(free)).mask
                placed += 1
            if placed:
                pods.append((mem,) * placed)
    if not pods:
        pods.append((4000,))
        assert brute_force_fits(nodes, pods)
    return nodes, draw(st.permutations(pods))


# Both ways to a packing: the relaxation's solution laid out on nodes, and the program with nodes alone.
@pytest.mark.parametrize("lay_out", [True, False])
@SETTINGS
@given(case=small_cases())
def test_on_small_fleets_the_oracle_finds_a_packing_exactly_when_the_brute_force_finds_one(case, lay_out):
    nodes, pods = case
    got = judge(nodes, pods, lay_out)
    if brute_force_fits(nodes, pods):
        assert got.verdict == PACKED
        assert problems(nodes, dict(enumerate(pods)), got.packing) == []
    else:
        assert got.verdict == INFEASIBLE


@pytest.mark.parametrize("lay_out", [True, False])
@SETTINGS
@given(case=packed_cases())
def test_the_oracle_never_proves_infeasible_pods_that_were_just_packed_and_its_packing_is_legal(
    case, lay_out
):
    nodes, pods = case
    got = judge(nodes, pods, lay_out)
    assert got.verdict == PACKED
    assert problems(nodes, dict(enumerate(pods)), got.packing) == []


A100, H100, RTX = MODELS


@pytest.mark.parametrize(
    ("nodes", "pods"),
    [
        # 7 1g instances fill an A100 (1g.5gb has no placement at slice 7).
        ([(A100, 1)], [(4000,)] * 8),
        # 3 × 2g + 2 × 1g is 8 slices of 8, yet 2g sits at 0, 2, 4 and 1g never at 7.
        ([(A100, 1)], [(9000,)] * 3 + [(4000,)] * 2),
        # A 4g.96gb-sized pod needs the whole RTX PRO 6000; three 1g.24gb and one 2g.48gb are 15 of 12.
        ([(RTX, 1)], [(4000,)] * 3 + [(30000,)]),
        # Three 30000 MiB devices: one 7g on the A100, two 2g.48gb fill the RTX; the 1g has no room.
        ([(A100, 1), (RTX, 1)], [(30000,)] * 3 + [(4000,)]),
        # Two whole GPUs for one pod, but each node has one GPU: only the node boundary refuses it.
        ([(H100, 1), (H100, 1)], [(None, None)]),
        # Four 2g devices in one pod: 2g.10gb sits at 0, 2, 4 only, so an A100 takes three.
        ([(A100, 1), (A100, 1)], [(9000,) * 4]),
    ],
)
def test_a_set_of_pods_that_cannot_fit_is_proved_infeasible(nodes, pods):
    built = fleet(*nodes)
    assert not brute_force_fits(built, pods)
    assert judge(built, pods).verdict == INFEASIBLE


def test_the_relaxation_alone_proves_a_capacity_shortfall_without_the_program_with_nodes():
    got = judge(fleet((A100, 2), (H100, 2)), [(None,)] * 5)
    assert (got.verdict, got.how) == (INFEASIBLE, "relaxation")


def test_only_the_program_with_nodes_proves_a_pod_wider_than_any_node_infeasible():
    got = judge(fleet((H100, 1), (H100, 1)), [(None, None)])
    assert (got.verdict, got.how) == (INFEASIBLE, "node program")


def test_a_spent_budget_leaves_a_refusal_not_searched_rather_than_guessed():
    oracle = Oracle(fleet((A100, 1), (A100, 1)), budget=0.0)
    # The relaxation's solution laid out on the nodes packs these, with no program with nodes.
    assert oracle.judge({0: (4000,)}, (4000, 4000)).verdict == PACKED
    assert oracle.judge({}, (None, None)).verdict == "not searched"
    assert oracle.judge({n: (4000,) for n in range(14)}, (4000,)).verdict == INFEASIBLE


def test_the_bench_check_of_a_packing_names_an_overlap():
    nodes = fleet((A100, 1))
    gpu = nodes[0].gpus[0]
    one_g = gpu.profiles[0]
    same = one_g.placements[0]
    wrong = legal_packing(nodes, {0: (4000,), 1: (4000,)}, {0: [(gpu, same, one_g)], 1: [(gpu, same, one_g)]})
    assert any("overlaps" in w for w in wrong)
