"""The packing grid's idle-reuse arm (bench/_packing/reuse.py): ended pods' instances stay idle and are
handed to a later pod of the same namespace, placements never overlap what is held or what is idle,
an idle instance past its TTL is gone, and with reuse off the arm decides every arrival as dynmig
does. (Its command line is tested in test_placement_cli.py.)"""

from __future__ import annotations

from functools import partial

import placement
import pytest
from _packing import grid, reuse

CELL = grid.Cell("A100-40GB", grid.BASE, 1.05)
ONE_G = (grid.asks(CELL.fleet)["1g"],)


class Recorder:
    """The bench's own `apply`, then a check a user cares about: no idle instance shares a slice
    with a placement that is held (the plugin destroyed or handed over every one in the way)."""

    def __init__(self) -> None:
        self.placed: dict[int, tuple[str, int, int]] = {}

    def apply(self, policy, picks, key, mems) -> None:
        placement.apply(policy, picks, key, mems)
        gpu, place, _prof = picks[0]
        self.placed[key] = (gpu.uuid, place.start, place.size)
        if isinstance(policy, reuse.DynmigReuse):
            for gpus in policy.shelf.kept.values():
                for uuid, instances in gpus.items():
                    held = policy.engine.by_uuid[uuid].mask
                    for m in instances:
                        assert not m.key.placement.mask & held, f"idle {m.key} overlaps a held placement"


def _arm(namespaces, **options):
    return partial(reuse.DynmigReuse, engine=placement.Dynmig, namespaces=namespaces, **options)


def _replay(arrivals, namespaces, **options):
    rec = Recorder()
    got = grid.replay(_arm(namespaces, **options), CELL, arrivals, rec.apply, placement.release)
    return got, rec.placed


def test_a_churning_trace_hands_instances_over_and_never_overlaps_a_held_or_idle_placement():
    arrivals = grid.trace(CELL, grid.TUNING_SEEDS[0])[:400]
    names = reuse.namespaces(CELL.label, grid.TUNING_SEEDS[0], len(arrivals), 2)
    got, _ = _replay(arrivals, names)
    counts = got["reuse"]
    assert counts["handed over"] > 0 and counts["kept idle"] > 0
    assert counts["handed over"] <= counts["placed devices"]


def test_an_ended_pods_instance_goes_to_the_next_pod_of_its_namespace_and_not_to_another_namespace():
    # pod 0 (team-a) ends at 1.0; pod 1 (team-b) arrives at 2.0, pod 2 (team-a) at 3.0
    arrivals = [(0.0, ONE_G, 1.0), (2.0, ONE_G, 100.0), (3.0, ONE_G, 100.0)]
    got, placed = _replay(arrivals, ["team-a", "team-b", "team-a"])
    assert placed[2] == placed[0]  # handed over: the same GPU and placement, no create
    assert placed[1] != placed[0] and placed[1][0] == placed[0][0]  # planned around it, same GPU
    assert got["reuse"]["handed over"] == 1 and got["reuse"]["planned around idle"] == 1


def test_an_idle_instance_past_its_ttl_is_gone_and_not_handed_over():
    arrivals = [(0.0, ONE_G, 1.0), (1.0 + reuse.TTL_MINUTES + 0.5, ONE_G, 100.0)]
    got, _ = _replay(arrivals, ["team-a", "team-a"])
    assert got["reuse"]["expired"] == 1
    assert "handed over" not in got["reuse"]


def test_with_reuse_off_the_arm_places_every_arrival_where_dynmig_does():
    arrivals = grid.trace(CELL, grid.TUNING_SEEDS[1])[:400]
    names = reuse.namespaces(CELL.label, grid.TUNING_SEEDS[1], len(arrivals))
    off = Recorder()
    plain = grid.replay(placement.Dynmig, CELL, arrivals, off.apply, placement.release)
    got, placed = _replay(arrivals, names, ttl_minutes=0.0)
    assert placed == off.placed
    assert got["refused_work"] == plain["refused_work"]


def test_namespaces_out_of_range_are_refused_naming_the_field():
    with pytest.raises(ValueError, match="namespaces"):
        reuse.namespaces("cell", 1, 10, 0)
