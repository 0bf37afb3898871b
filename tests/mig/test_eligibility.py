"""Which nodes a pod may run on (mig.eligibility), case by case as kube-scheduler's NodeUnschedulable,
TaintToleration and NodeAffinity filters decide them (component-helpers nodeaffinity, labels
Requirement.Matches, core/v1 Toleration.ToleratesTaint)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mig.eligibility import constraints_of, eligibility, node_facts


def node(name: str = "n1", labels: dict[str, str] | None = None, taints: Any = None, **spec: Any) -> dict:
    body: dict[str, Any] = {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}}
    }
    body["spec"] = {**spec, **({"taints": taints} if taints is not None else {})}
    return body


def pod(**spec: Any) -> dict:
    return {"metadata": {"name": "p", "namespace": "ml"}, "spec": spec}


def refusal(p: dict, n: dict) -> str:
    return constraints_of(p).refusal(node_facts(n))


def required(*terms: dict) -> dict:
    return {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}
    }


def expr(key: str, operator: str, *values: str) -> dict:
    return {"key": key, "operator": operator, **({"values": list(values)} if values else {})}


def test_a_pod_without_constraints_may_run_on_an_untainted_node():
    assert refusal(pod(), node()) == ""


def test_a_node_selector_needs_every_label_with_its_value():
    p = pod(nodeSelector={"gpu": "a100", "zone": "a"})
    assert refusal(p, node(labels={"gpu": "a100", "zone": "a"})) == ""
    assert "nodeSelector" in refusal(p, node(labels={"gpu": "a100"}))
    assert "nodeSelector" in refusal(p, node(labels={"gpu": "h100", "zone": "a"}))


@pytest.mark.parametrize(
    ("requirement", "labels", "holds"),
    [
        (expr("gpu", "In", "a100", "h100"), {"gpu": "h100"}, True),
        (expr("gpu", "In", "a100"), {}, False),
        (expr("gpu", "NotIn", "a100"), {"gpu": "h100"}, True),
        (expr("gpu", "NotIn", "a100"), {}, True),  # an absent label is not in the set
        (expr("gpu", "NotIn", "a100"), {"gpu": "a100"}, False),
        (expr("gpu", "Exists"), {"gpu": ""}, True),
        (expr("gpu", "Exists"), {}, False),
        (expr("gpu", "DoesNotExist"), {}, True),
        (expr("gpu", "DoesNotExist"), {"gpu": "x"}, False),
        (expr("mem", "Gt", "40"), {"mem": "80"}, True),
        (expr("mem", "Gt", "80"), {"mem": "80"}, False),
        (expr("mem", "Lt", "80"), {"mem": "40"}, True),
        (expr("mem", "Lt", "80"), {"mem": "4e1"}, False),  # not a base-10 integer: fails
        (expr("mem", "Gt", "1"), {}, False),  # an absent label never compares
    ],
)
def test_match_expressions_operators_hold_as_kube_scheduler_reads_them(requirement, labels, holds):
    p = pod(affinity=required({"matchExpressions": [requirement]}))
    assert (refusal(p, node(labels=labels)) == "") is holds


@pytest.mark.parametrize(
    "broken",
    [
        expr("gpu", "In"),  # In needs values
        expr("gpu", "Exists", "x"),  # Exists takes none
        expr("mem", "Gt", "1", "2"),  # Gt takes one
        expr("mem", "Gt", "ten"),  # and an integer
        expr("gpu", "Matches", "a100"),  # no such operator
        expr("bad key!", "Exists"),  # not a label key
        expr("gpu", "NotIn", "not a label value"),
    ],
)
def test_a_term_with_a_requirement_kube_scheduler_cannot_parse_matches_no_node(broken):
    p = pod(affinity=required({"matchExpressions": [broken]}))
    assert "node affinity" in refusal(p, node(labels={"gpu": "h100", "mem": "80"}))


def test_terms_are_ored_and_an_empty_term_matches_nothing():
    a100 = {"matchExpressions": [expr("gpu", "In", "a100")]}
    h100 = {"matchExpressions": [expr("gpu", "In", "h100")]}
    assert refusal(pod(affinity=required(a100, h100)), node(labels={"gpu": "h100"})) == ""
    assert refusal(pod(affinity=required({})), node(labels={"gpu": "h100"})) != ""
    assert refusal(pod(affinity=required()), node()) != ""


def test_match_fields_select_by_node_name_with_in_and_not_in():
    only_n1 = pod(affinity=required({"matchFields": [expr("metadata.name", "In", "n1")]}))
    not_n1 = pod(affinity=required({"matchFields": [expr("metadata.name", "NotIn", "n1")]}))
    assert refusal(only_n1, node("n1")) == "" and refusal(only_n1, node("n2")) != ""
    assert refusal(not_n1, node("n2")) == "" and refusal(not_n1, node("n1")) != ""
    two_values = pod(affinity=required({"matchFields": [expr("metadata.name", "In", "n1", "n2")]}))
    assert refusal(two_values, node("n1")) != ""  # kube-scheduler wants exactly one value


def test_a_node_selector_and_the_required_affinity_must_both_match():
    p = pod(nodeSelector={"zone": "a"}, affinity=required({"matchExpressions": [expr("gpu", "In", "a100")]}))
    assert refusal(p, node(labels={"zone": "a", "gpu": "a100"})) == ""
    assert "nodeSelector" in refusal(p, node(labels={"gpu": "a100"}))
    assert "node affinity" in refusal(p, node(labels={"zone": "a"}))


def test_preferred_affinity_never_refuses_a_node():
    preferred = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}]}}
    assert refusal(pod(affinity=preferred), node()) == ""


@pytest.mark.parametrize("effect", ["NoSchedule", "NoExecute"])
def test_an_untolerated_no_schedule_or_no_execute_taint_refuses_the_node(effect):
    n = node(taints=[{"key": "dedicated", "value": "infer", "effect": effect}])
    assert refusal(pod(), n) == f"with taint dedicated=infer:{effect}, not tolerated"


def test_a_prefer_no_schedule_taint_only_scores_and_never_refuses():
    assert refusal(pod(), node(taints=[{"key": "spot", "effect": "PreferNoSchedule"}])) == ""


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        ({"key": "dedicated", "operator": "Equal", "value": "infer", "effect": "NoSchedule"}, True),
        ({"key": "dedicated", "value": "infer"}, True),  # no operator is Equal; no effect is any
        ({"key": "dedicated", "operator": "Equal", "value": "train"}, False),
        ({"key": "dedicated", "operator": "Exists"}, True),
        ({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"operator": "Exists"}, True),  # empty key with Exists: every taint
        ({"key": "other", "operator": "Exists"}, False),
        ({"key": "dedicated", "operator": "Lt", "value": "9"}, False),  # alpha operators: off
    ],
)
def test_tolerations_match_taints_as_kube_scheduler_decides(toleration, tolerated):
    n = node(taints=[{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}])
    assert (refusal(pod(tolerations=[toleration]), n) == "") is tolerated


def test_a_cordoned_node_refuses_pods_that_do_not_tolerate_unschedulable():
    cordoned = node(unschedulable=True)
    assert "cordoned" in refusal(pod(), cordoned)
    tolerates = [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]
    assert refusal(pod(tolerations=tolerates), cordoned) == ""


def test_a_huge_toleration_list_is_indexed_once_and_still_decides():
    many = [{"key": f"k{i}", "operator": "Equal", "value": "v"} for i in range(100_000)]
    constraints = constraints_of(pod(tolerations=many))
    tolerated = node("n1", taints=[{"key": "k99999", "value": "v", "effect": "NoSchedule"}])
    untolerated = node("n2", taints=[{"key": "zz", "effect": "NoSchedule"}])
    result = eligibility(
        constraints, [(n["metadata"]["name"], node_facts(n)) for n in (tolerated, untolerated)]
    )
    assert result.allowed == {"n1"}
    assert result.refused == {"with taint zz:NoSchedule, not tolerated": 1}


def test_a_node_whose_object_is_not_known_counts_as_eligible():
    result = eligibility(
        constraints_of(pod(nodeSelector={"a": "b"})), [("ghost", None), ("n1", node_facts(node()))]
    )
    assert result.allowed == {"ghost"}
    assert result.summary() == "1 of 2 nodes refuse it: 1 not matching its nodeSelector"


def test_when_no_node_refuses_the_pod_advice_plans_over_every_node():
    result = eligibility(constraints_of(pod()), [("n1", node_facts(node()))])
    assert result.restriction is None and result.summary() == ""


@pytest.mark.parametrize(
    "spec",
    [
        {"nodeSelector": ["gpu", "a100"]},
        {"nodeSelector": {"gpu": 7}},
        {"affinity": "near the GPUs"},
        {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}}},
        {"affinity": required({"matchExpressions": "gpu In a100"})},
        {"affinity": required({"matchExpressions": [{"key": ["gpu"], "operator": "In", "values": ["a"]}]})},
        {"affinity": required({"matchExpressions": [expr("gpu", "In", "a100") | {"values": [1, None]}]})},
        {
            "affinity": required(
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [None]}]}
            )
        },
    ],
)
def test_garbage_node_selector_or_affinity_matches_no_node_and_never_raises(spec):
    assert refusal(pod(**spec), node(labels={"gpu": "a100"})) != ""


@pytest.mark.parametrize(
    "tolerations",
    ["all", [None, 3, "x"], [{"key": 1, "operator": "Exists"}], [{"operator": ["Exists"]}], {"key": "x"}],
)
def test_garbage_tolerations_tolerate_nothing_and_never_raise(tolerations):
    n = node(taints=[{"key": "dedicated", "effect": "NoSchedule"}])
    assert "taint" in refusal(pod(tolerations=tolerations), n)


def test_garbage_nodes_read_as_nodes_without_labels_or_taints():
    facts = node_facts(
        {"metadata": {"name": "n", "labels": ["a"]}, "spec": {"taints": "all", "unschedulable": "yes"}}
    )
    assert facts.labels == {} and facts.taints == () and not facts.unschedulable


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(
    spec=st.dictionaries(st.sampled_from(["nodeSelector", "affinity", "tolerations"]), json_values),
    n=json_values,
)
def test_any_json_for_pod_spec_and_node_decides_without_raising(spec, n):
    facts = node_facts(n if isinstance(n, dict) else {})
    assert isinstance(constraints_of({"spec": spec}).refusal(facts), str)
