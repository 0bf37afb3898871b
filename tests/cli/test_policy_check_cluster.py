"""`dynmig policy check --cluster`: a policy against the cluster's nodes and running pods, read through
a kubeconfig: what it would leave without MIG, and what running pods hold that it drops. Never an
error: the pods keep running."""

from __future__ import annotations

from dynmig.cli import main
from mig.annotations import MIG_ALLOCATIONS, VGPU_NODE, MigAllocation, encode_allocations
from tests.webhooks.webhooks_testkit import node

ONE_MODEL = (
    'nvidia:\n  migProfileAllowlist:\n    - {models: ["A100-SXM4-40GB"], profiles: ["1g.5gb", "7g.40gb"]}\n'
)


def test_check_cluster_names_the_nodes_left_without_mig_and_the_pods_holding_a_dropped_profile(
    apiserver, tmp_path, capsys
):
    apiserver.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})
    apiserver.create(node("gpu-a100", "A100-SXM4-40GB", 1))
    apiserver.create(node("gpu-rtx", "RTX-PRO-6000", 2))
    held = MigAllocation.model_validate(
        {
            "containerIndex": 0,
            "deviceIndex": 0,
            "gpuUUID": "GPU-gpu-a100-0",
            "profile": "3g.20gb",
            "placement": {"start": 4, "size": 4},
        }
    )
    apiserver.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "train",
                "namespace": "ml",
                "annotations": {VGPU_NODE: "gpu-a100", MIG_ALLOCATIONS: encode_allocations([held])},
            },
            "spec": {"nodeName": "gpu-a100", "containers": [{"name": "main", "image": "cuda"}]},
        }
    )
    policy = tmp_path / "one-model.yaml"
    policy.write_text(ONE_MODEL)

    code = main(["policy", "check", str(policy), "--cluster", "--kubeconfig", str(apiserver.kubeconfig())])

    out = capsys.readouterr().out
    assert code == 0
    assert (
        "cluster: node gpu-rtx (2 × NVIDIA RTX PRO 6000 Blackwell Server Edition) would publish no MIG" in out
    )
    assert "cluster: pod ml/train holds a 3g.20gb on gpu-a100 (NVIDIA A100-SXM4-40GB)" in out
    assert "it keeps running" in out
    assert out.strip().endswith(
        "cluster: 2 MIG node(s), 1 would publish no MIG profile, 1 running reservation(s) of a profile no longer "
        "allowed (they keep running; nothing is refused for this)"
    )


def test_check_cluster_without_a_reachable_cluster_says_so(tmp_path, capsys):
    policy = tmp_path / "p.yaml"
    policy.write_text(ONE_MODEL)

    code = main(["policy", "check", str(policy), "--cluster", "--kubeconfig", str(tmp_path / "none")])

    assert code == 2 and "dynmig policy check --cluster: kubeconfig" in capsys.readouterr().err
