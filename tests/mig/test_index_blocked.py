"""An index with blocked nodes decides as the plain index over the candidates without them.

The scheduler blocks the nodes a bind would fail on (node locks, nodes held for other binds) so
their GPUs leave the ranking; the nodes' GPUs still change while blocked (pods bound there before,
pods ending there), and when a node is unblocked it must rank exactly as if it had never left.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mig.catalog import find_model
from mig.placement import ContainerRequest, GpuState, PlacementIndex, Plan, PodRequest
from mig.placement.reasons import Refusal
from mig.types import Placement
from tests.mig.test_reference_planner import PROFILES, SETTINGS, fleets, pods


def _outcome(result: Plan | Refusal) -> object:
    """What a caller sees: the plan, or the refusal's GPU count and every reason it gives."""
    if isinstance(result, Refusal):
        return ("refused", result.gpus, result.reasons)
    return result


def _free_placement(draw: st.DrawFn, g: GpuState, mask: int) -> Placement | None:
    free = [p for prof in g.profiles for p in prof.placements if not p.mask & mask]
    return draw(st.sampled_from(free)) if free else None


@SETTINGS
@given(fleets(), st.lists(pods(), min_size=1, max_size=8), st.data())
def test_a_blocked_node_is_never_chosen_and_the_others_rank_as_without_it(fleet, stream, data):
    blocked_index, plain = PlacementIndex(fleet), PlacementIndex(fleet)
    names = sorted({g.node for g in fleet})
    by_uuid = {g.uuid: g for g in fleet}
    held: list[tuple[str, Placement]] = []  # placements taken on both indexes, to release later
    for pod in stream:
        # a new blocked set (a node the index does not know may be blocked too)
        blocked = set(data.draw(st.lists(st.sampled_from([*names, "node-unknown"]), unique=True)))
        blocked_index.block(blocked)
        # reservations and releases anywhere, on blocked nodes too (pods bound or ending there)
        for _ in range(data.draw(st.integers(0, 3))):
            if held and data.draw(st.booleans()):
                uuid, placement = held.pop(data.draw(st.integers(0, len(held) - 1)))
                blocked_index.release(uuid, placement)
                plain.release(uuid, placement)
                continue
            g = by_uuid[data.draw(st.sampled_from(sorted(by_uuid)))]
            placement = _free_placement(data.draw, g, plain.occupied_mask(g.uuid))
            if placement is not None:
                blocked_index.reserve(g.uuid, placement)
                plain.reserve(g.uuid, placement)
                held.append((g.uuid, placement))
        nodes = data.draw(st.one_of(st.none(), st.lists(st.sampled_from(names), unique=True)))
        candidates = [n for n in (names if nodes is None else nodes) if n not in blocked]
        chosen = blocked_index.plan(pod, nodes, skip_blocked=True)
        assert _outcome(chosen) == _outcome(plain.plan(pod, candidates))
        # any other reader (defrag, diagnoses) plans over the blocked nodes too
        assert _outcome(blocked_index.plan(pod, nodes)) == _outcome(plain.plan(pod, nodes))
        if isinstance(chosen, Plan) and chosen.devices:
            assert chosen.node not in blocked
            blocked_index.apply(chosen)
            plain.apply(chosen)
            held += [(d.gpu_uuid, d.placement) for d in chosen.devices]


@given(fleets(), pods(), st.data())
def test_an_unblocked_node_ranks_as_if_it_had_never_been_blocked(fleet, pod, data):
    names = sorted({g.node for g in fleet})
    index = PlacementIndex(fleet)
    index.block(data.draw(st.lists(st.sampled_from(names), unique=True)))
    index.block(())
    assert _outcome(index.plan(pod)) == _outcome(PlacementIndex(fleet).plan(pod))


def _gpu(node: str, model: str, occupied: tuple[Placement, ...] = ()) -> GpuState:
    m = find_model(model)
    return GpuState(node, f"GPU-{node}", m.nvml_name, PROFILES[model], occupied, True, 0, m.memory_mib)


def test_a_blocked_nodes_gpus_still_count_when_a_whole_gpu_job_picks_its_model():
    """A whole GPU is priced by its model's GPUs fleet-wide (how many are empty, how many slots of
    each large profile are free): blocking the busy A30's node changes nothing of that, so the job
    lands where an index that simply leaves that node out of `nodes` puts it."""
    busy = PROFILES["A30"][0].placements[0]
    fleet = [_gpu("a30-empty", "A30"), _gpu("a30-busy", "A30", (busy,)), _gpu("a100-empty", "A100-SXM4-40GB")]
    whole = PodRequest.from_annotations([ContainerRequest(1, None)], {})
    index = PlacementIndex(fleet)
    index.block({"a30-busy"})
    chosen = index.plan(whole, skip_blocked=True)
    assert isinstance(chosen, Plan)
    assert _outcome(chosen) == _outcome(PlacementIndex(fleet).plan(whole, ["a30-empty", "a100-empty"]))
