"""Each policy against the best of the other baselines (bench/_packing/others.py): whether any simple
rule meets a target of "every cell ≤ 1.0×, median ≤ M×" against the rest. The cells are made up."""

from __future__ import annotations

import pytest
from _packing import others

NODES = "dynmig+nodes"


def _cell(name: str, judged: bool = True, **work: float) -> dict:
    return {"cell": name, "judged": judged, "refused_work": {_name(k): v for k, v in work.items()}}


def _name(key: str) -> str:
    return NODES if key == "dynmig_nodes" else key.replace("_", "-")


def test_the_best_baseline_of_a_cell_is_measured_against_the_second_best_not_against_itself():
    cells = [_cell("a", dynmig=5.0, first_fit=3.0, best_fit=6.0, driver=12.0)]
    got = others.against_others(cells, 0.9)["policies"]
    assert got["first-fit"]["per_cell"]["a"] == pytest.approx(0.5)  # 3 over best fit's 6
    assert got["best-fit"]["per_cell"]["a"] == pytest.approx(2.0)  # 6 over first fit's 3
    assert got["dynmig"]["per_cell"]["a"] == pytest.approx(5.0 / 3.0)  # dynmig: the bench's usual ratio


def test_a_dynmig_arm_refusing_least_is_never_the_yardstick_of_a_baseline_or_of_the_other_arm():
    cells = [_cell("a", dynmig=8.0, dynmig_nodes=1.0, first_fit=4.0, best_fit=10.0)]
    got = others.against_others(cells, 0.9)["policies"]
    assert got["first-fit"]["per_cell"]["a"] == pytest.approx(0.4)  # 4 over best fit's 10, not over 1
    assert got["dynmig"]["per_cell"]["a"] == pytest.approx(2.0)  # 8 over first fit's 4, not over 1
    assert got[NODES]["per_cell"]["a"] == pytest.approx(0.25)


def test_a_rule_meets_the_targets_against_the_rest_only_if_no_judged_cell_is_above_one_and_the_median_is_low():
    cells = [
        _cell("a", dynmig=9.0, first_fit=8.0, best_fit=10.0),
        _cell("b", dynmig=9.0, first_fit=7.0, best_fit=10.0),
        _cell("c", dynmig=9.0, first_fit=10.0, best_fit=10.0),  # a tie: 1.0×, still within target
        _cell("d", judged=False, dynmig=9.0, first_fit=90.0, best_fit=10.0),  # outside the band: ignored
    ]
    got = others.against_others(cells, 0.9)["policies"]
    ff = got["first-fit"]
    assert (ff["worst"], ff["worst_cell"], ff["above"], ff["cells"]) == (1.0, "c", 0, 3)
    assert ff["median"] == pytest.approx(0.8) and ff["met"]
    bf = got["best-fit"]
    assert (bf["above"], bf["met"]) == (2, False)  # 1.25× and 1.43×; the tie is not above
    assert not others.against_others(cells, 0.75)["policies"]["first-fit"]["met"]  # median 0.8 > 0.75


def test_an_arm_that_ran_in_some_cells_only_is_measured_in_those_cells():
    cells = [
        _cell("a", dynmig=2.0, first_fit=4.0, best_fit=8.0),
        _cell("b", dynmig=2.0, dynmig_nodes=6.0, first_fit=4.0, best_fit=8.0),
    ]
    got = others.against_others(cells, 0.9)["policies"]
    assert got[NODES]["per_cell"] == {"b": pytest.approx(1.5)}
    assert got["dynmig"]["cells"] == 2


def test_the_printed_table_has_a_line_per_policy_with_its_worst_cell_median_and_verdict():
    cells = [
        _cell("a", dynmig=5.0, first_fit=3.0, best_fit=6.0),
        _cell("b", dynmig=1.0, first_fit=3.0, best_fit=6.0),
    ]
    lines = others.table(others.against_others(cells, 0.9), ["a", "b"])
    ff = next(line for line in lines if line.startswith("first-fit"))
    assert "0.50×" in ff and "met" in ff and "not met" not in ff
    assert "not met" in next(line for line in lines if line.startswith("best-fit"))
    assert lines[-2:] == ["  c1: a", "  c2: b"]
