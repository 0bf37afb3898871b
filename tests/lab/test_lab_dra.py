"""DRA mode in the lab: a node started with `@dra` runs `dynmig dra-plugin` (a real process) beside an
extender node; pods with ResourceClaimTemplates get exactly the placement kube-scheduler allocated,
across deletes, a plugin restart and a kill -9 in the middle of a prepare (the `dra` scenario)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from kubernetes import client
from lab import main
from lab.cluster import DRA_DAEMONSET, PLUGIN_DAEMONSET, Lab, LabError
from lab.dra_scenario import claim_pod, claim_template
from lab.kit import Kit, gpu_pod
from lab.nodes import DRA, EXTENDER, NodeSpecError, parse_nodes
from lab.scenario import Run, ScenarioFailed
from lab.scenarios import SCENARIOS

from mig.annotations import USE_GPU_TYPE
from tests import lab_testkit

NODES = "gpu-ext=1xA100-SXM4-40GB;gpu-dra=2xA100-SXM4-40GB@dra"


# ---- without a lab ------------------------------------------------------------------------------------


def test_a_node_spec_ending_in_at_dra_is_a_dra_node_and_the_others_stay_extender_nodes():
    ext, dra, named = parse_nodes("a=1xA30;b=2xA100-SXM4-40GB@dra;c=1xA30@extender")
    assert (ext.mode, dra.mode, named.mode) == (EXTENDER, DRA, EXTENDER)
    assert dra.gpu_count == 2 and dra.describe().endswith("(DRA)")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("gpu=1xA30@hami", "gpu: the mode after '@' must be one of extender, dra, got 'hami'"),
        ("gpu=1xA30@", "got ''"),
        ("gpu=1xA30@dra@dra", "got 'dra@dra'"),
        ("gpu=@dra", "gpu: expected COUNTxMODEL"),
    ],
)
def test_a_bad_mode_in_a_node_spec_is_named_with_its_node(text, says):
    with pytest.raises(NodeSpecError) as error:
        parse_nodes(text)
    assert str(error.value).startswith("--nodes: ") and says in str(error.value)


def test_the_dra_scenario_on_a_lab_without_a_dra_node_exits_2_saying_how_to_give_one(capsys):
    assert main(["--scenario", "dra", "--nodes", "gpu-a100=2xA100-SXM4-40GB"]) == 2
    err = capsys.readouterr().err
    assert "needs a node in DRA mode" in err and "@dra" in err


def test_an_extender_scenario_does_not_count_a_dra_node_as_its_gpus(capsys):
    assert main(["--scenario", "mixed-1g-2g-3g", "--nodes", "solo=2xA100-SXM4-40GB@dra"]) == 2
    assert "needs a node with A100 GPUs" in capsys.readouterr().err


def test_the_claim_objects_are_the_example_s_with_the_profile_and_names_changed():
    template = claim_template("one-3g", "3g.20gb")
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert template["metadata"] == {"name": "one-3g"}
    assert request["exactly"]["deviceClassName"] == "mig.dynmig.io"
    assert request["exactly"]["selectors"][0]["cel"]["expression"] == (
        'device.attributes["mig.dynmig.io"].profile == "3g.20gb"'
    )
    pod = claim_pod("p", "one-3g")
    assert pod["spec"]["resourceClaims"] == [{"name": "mig", "resourceClaimTemplateName": "one-3g"}]
    assert pod["spec"]["containers"][0]["resources"]["claims"] == [{"name": "mig"}]


# ---- on a lab ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    yield from lab_testkit.started(tmp_path_factory, "dra-lab", NODES)


@pytest.fixture
def kit(lab: Lab) -> Iterator[Kit]:
    yield from lab_testkit.emptied(lab)


def _daemon_pods(lab: Lab, daemonset: str) -> list[str]:
    pods = lab.core().list_namespaced_pod("dynmig").items
    return sorted(
        p.spec.node_name
        for p in pods
        if any(o.name == daemonset for o in p.metadata.owner_references or []) and p.status.phase == "Running"
    )


def test_the_dra_node_is_in_the_dra_pool_and_runs_the_dra_plugin_and_no_device_plugin(lab):
    labels = {n.metadata.name: n.metadata.labels for n in lab.core().list_node().items}
    assert labels["gpu-dra"].get("dynmig.io/mig-mode") == "dra" and "gpu" not in labels["gpu-dra"]
    assert labels["gpu-ext"].get("gpu") == "on" and "dynmig.io/mig-mode" not in labels["gpu-ext"]
    assert _daemon_pods(lab, DRA_DAEMONSET) == ["gpu-dra"]
    assert _daemon_pods(lab, PLUGIN_DAEMONSET) == ["gpu-ext"]
    classes = client.ResourceV1Api(lab.api_client()).list_device_class().items
    assert [c.metadata.name for c in classes] == ["mig.dynmig.io"]


def test_the_dra_plugin_publishes_the_dra_node_s_pool_and_nothing_for_the_extender_node(lab):
    slices = client.ResourceV1Api(lab.api_client()).list_resource_slice().items
    assert slices and {(s.spec.driver, s.spec.pool.name, s.spec.node_name) for s in slices} == {
        ("mig.dynmig.io", "gpu-dra", "gpu-dra")
    }


def test_an_extender_pod_beside_the_dra_node_gets_its_instance_from_the_device_plugin(lab, kit):
    kit.create(gpu_pod("ext", 4000, annotations={USE_GPU_TYPE: "A100"}))
    pod = kit.wait_phase("ext", "Running", 60)
    (entry,) = kit.allocations("ext")
    assert pod["spec"]["nodeName"] == "gpu-ext"
    assert [i.mig_uuid for i in kit.instances("gpu-ext")] == [entry.migUUID]
    assert not kit.instances("gpu-dra")


def test_the_dra_scenario_passes_every_check(lab, kit):
    lines: list[str] = []
    run = Run(lab, echo=lines.append)
    with contextlib.suppress(ScenarioFailed):  # a failed wait stops the scenario; its check is recorded
        SCENARIOS["dra"].run(run)
    text = "\n".join(lines)
    assert run.checks and not run.failed, text
    assert "PASS  dra-chaos ends Running" in text


def test_asking_an_extender_node_for_its_dra_plugin_is_refused_naming_the_node(lab):
    with pytest.raises(LabError, match="gpu-ext is not a DRA node"):
        lab.restart_dra_plugin("gpu-ext")
    assert _daemon_pods(lab, PLUGIN_DAEMONSET) == ["gpu-ext"]
