"""`dynmig lab --nodes` describes simulated GPU nodes; mistakes are named, not guessed."""

import pytest
from lab.nodes import DEFAULT_NODES, NodeSpecError, parse_nodes


def test_the_default_lab_has_an_a100_node_and_an_rtx_pro_6000_node():
    a100, rtx = parse_nodes(DEFAULT_NODES)
    assert (a100.name, a100.gpu_count, a100.gpus[0].model.nvml_name) == (
        "gpu-a100",
        2,
        "NVIDIA A100-SXM4-40GB",
    )
    assert (rtx.name, rtx.gpu_count) == ("gpu-rtx", 8)
    assert rtx.gpus[0].model.nvml_name == "NVIDIA RTX PRO 6000 Blackwell Server Edition"


def test_a_node_may_mix_models_and_a_count_defaults_to_one():
    (node,) = parse_nodes("mixed=2xH100-SXM5-80GB+A30")
    assert [(g.model.key, g.count) for g in node.gpus] == [("H100-SXM5-80GB", 2), ("A30", 1)]
    assert node.nvml_spec()["gpus"] == [{"model": "H100-SXM5-80GB", "count": 2}, {"model": "A30", "count": 1}]


@pytest.mark.parametrize(
    "text,message",
    [
        ("gpu-a=2xV100", "unknown GPU model 'V100'"),
        ("Gpu_A=1xA30", "NAME=COUNTxMODEL"),
        ("a=1xA30;a=1xA30", "unique"),
        ("a=40xA30", "1 to 16 GPUs"),
        ("", "no nodes given"),
    ],
)
def test_a_bad_nodes_argument_says_what_to_write_instead(text, message):
    with pytest.raises(NodeSpecError, match=message):
        parse_nodes(text)
