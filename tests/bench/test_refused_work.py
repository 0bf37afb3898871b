"""The placement bench's refused work: what a refusal costs the user who asked, not just that it happened.

`churn` is imported from bench/placement.py, so this checks exactly what `make bench` prints.
"""

from __future__ import annotations

import placement
import pytest

WHOLE, SERVICE = (None,), (4000,)


@pytest.mark.parametrize("policy", placement.POLICIES, ids=lambda p: p.name)
def test_a_refused_whole_gpu_job_weighs_its_gpu_minutes_and_a_refused_service_its_share_of_a_gpu(policy):
    # One A100, one H100 and one RTX PRO 6000 (the bench's models in turn): three whole-GPU jobs take
    # them all, so the fourth job (100 minutes of a whole GPU) and a 4 GB service (10 minutes of a
    # 1g, an eighth of an A100 or H100, its cheapest models) are refused.
    arrivals = [(1.0, WHOLE, 100.0), (2.0, WHOLE, 100.0), (3.0, WHOLE, 100.0), (4.0, WHOLE, 100.0)]
    arrivals.append((5.0, SERVICE, 10.0))
    got = placement.churn(policy, arrivals, 3, 1)
    assert got["refused"] == 2
    assert got["refused_work"] == pytest.approx(100.0 + 10.0 / 8)


def test_a_pod_that_fits_costs_no_refused_work():
    arrivals = [(1.0, SERVICE, 10.0), (2.0, WHOLE, 50.0)]
    got = placement.churn(placement.Dynmig, arrivals, 3, 1)
    assert (got["refused"], got["refused_work"]) == (0, 0.0)
