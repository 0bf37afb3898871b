"""End-to-end behaviour beyond HAMi v2.10, against a lab whose allowlist adds 4g profiles
(policies/examples/with-4g.yaml): preferences, the protected allocation annotation, devices that
spill to a second GPU, and a certificate rotation while pods are being scheduled."""

from __future__ import annotations

import base64
import hashlib
import itertools
import socket
import ssl
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from lab.kit import gpu_pod

from mig.annotations import MIG_ALLOCATIONS, PROFILE_PREFERENCE, USE_GPU_TYPE

ROOT = Path(__file__).resolve().parents[2]
LAB_POLICY = ROOT / "policies" / "examples" / "with-4g.yaml"


def realized(kit, name):
    """(profile, GPU model) of each reserved device, checked against the simulated GPU."""
    out = []
    for a in kit.allocations(name):
        inst = next(i for i in kit.instances() if i.mig_uuid == a.migUUID)
        assert (inst.gpu_uuid, inst.profile, inst.start, inst.gi, inst.ci) == (
            a.gpuUUID,
            a.profile,
            a.placement.start,
            a.gpuInstanceID,
            a.computeInstanceID,
        )
        out.append((a.profile, kit.gpu(a.gpuUUID)[1].name))
    return out


@pytest.mark.parametrize(
    ("model", "memory", "default", "preferred"),
    [
        ("A100", 10000, "3g.20gb", "4g.20gb"),
        ("RTX PRO 6000", 8000, "1g.24gb", "4g.96gb"),
    ],
)
def test_a_4g_preference_is_honoured_and_without_it_the_smallest_fitting_profile_wins(
    kit, model, memory, default, preferred
):
    kit.create(gpu_pod("plain", memory, annotations={USE_GPU_TYPE: model}))
    kit.create(gpu_pod("prefers-4g", memory, annotations={USE_GPU_TYPE: model, PROFILE_PREFERENCE: "4g"}))
    kit.wait_phase("plain")
    kit.wait_phase("prefers-4g")
    [(plain, plain_gpu)] = realized(kit, "plain")
    [(chosen, chosen_gpu)] = realized(kit, "prefers-4g")
    assert (plain, chosen) == (default, preferred)
    assert model in plain_gpu and model in chosen_gpu
    bound = kit.wait_event("prefers-4g", "Scheduled")  # kube-scheduler's; dynmig posts no success event
    assert bound["message"].endswith(f" to {kit.gpu(kit.allocations('prefers-4g')[0].gpuUUID)[0]}")


def test_a_user_editing_the_allocation_annotation_with_kubectl_is_denied(lab, kit, kubectl):
    kit.create(gpu_pod("guarded", 8000, annotations={USE_GPU_TYPE: "RTX PRO 6000"}))
    kit.wait_phase("guarded")
    before = kit.pod("guarded")["metadata"]["annotations"][MIG_ALLOCATIONS]
    done = subprocess.run(
        [
            kubectl,
            "--kubeconfig",
            str(lab.kubeconfig("alice")),
            "annotate",
            "--overwrite",
            "pod",
            "guarded",
            f"{MIG_ALLOCATIONS}=[]",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode != 0
    assert "controller-owned" in done.stderr
    assert kit.pod("guarded")["metadata"]["annotations"][MIG_ALLOCATIONS] == before
    assert len(kit.instances()) == 1 and kit.instances()[0].busy


def test_a_pod_whose_devices_do_not_fit_on_one_gpu_spills_to_a_second(kit):
    kit.create(gpu_pod("spill", 30000, gpus=3, annotations={USE_GPU_TYPE: "RTX PRO 6000"}))
    kit.wait_phase("spill")
    entries = kit.allocations("spill")
    assert [a.profile for a in entries] == ["2g.48gb"] * 3
    gpus = {a.gpuUUID for a in entries}
    assert len(gpus) >= 2
    for uuid in gpus:
        spans = sorted(
            (a.placement.start, a.placement.start + a.placement.size) for a in entries if a.gpuUUID == uuid
        )
        assert all(x[1] <= y[0] for x, y in itertools.pairwise(spans))
    assert sorted(i.mig_uuid for i in kit.instances()) == sorted(a.migUUID for a in entries)
    assert kit.wait_event("spill", "Scheduled")["message"].endswith(" to gpu-rtx")
    record = kit.lab.nodes["gpu-rtx"].agent.pods_by_name("default", "spill")
    assert sorted(record.env["main"].split(",")) == sorted(a.migUUID for a in entries)


def _served_cert_digest(lab) -> str:
    ctx = ssl.create_default_context(cafile=str(lab.ca_file))  # what kube-scheduler trusts
    with (
        socket.create_connection(("127.0.0.1", lab.serve_port), timeout=5) as raw,
        ctx.wrap_socket(raw, server_hostname="dynmig.dynmig.svc") as tls,
    ):
        return hashlib.sha256(tls.getpeercert(binary_form=True)).hexdigest()


def _secret_cert_digest(lab) -> str:
    """The certificate in the Secret dynmig serve serves from (read through the API, as serve does)."""
    pem = base64.b64decode(
        lab.core().read_namespaced_secret(lab.tls_secret, "dynmig").data["tls.crt"]
    ).decode()
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem)).hexdigest()


def test_a_certificate_rotation_while_pods_are_scheduled_loses_no_pod_and_serve_picks_up_the_new_cert(
    lab, kit
):
    old = _served_cert_digest(lab)
    assert old == _secret_cert_digest(lab)
    assert (
        f"serving certificate from Secret dynmig/{lab.tls_secret}, watched through the API" in lab.serve_log()
    )
    names = [f"rot-{i}" for i in range(8)]
    errors: list[Exception] = []

    def create_all() -> None:
        for name in names:
            try:
                kit.create(gpu_pod(name, 8000, annotations={USE_GPU_TYPE: "RTX PRO 6000"}))
            except Exception as error:  # noqa: BLE001 - reported by the assert below
                errors.append(error)

    creator = threading.Thread(target=create_all)
    creator.start()
    rotated = subprocess.run(
        [
            sys.executable,
            "-m",
            "dynmig.cli",
            "certs",
            "rotate",
            "--force",
            "--namespace",
            "dynmig",
            "--service",
            "dynmig",
            "--kubeconfig",
            str(lab.kubeconfig("certs")),
            "--extra-host",
            "127.0.0.1",
            "--mutating-webhook",
            "dynmig-mutating",
            "--validating-webhook",
            "dynmig-validating",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    creator.join(60)
    assert rotated.returncode == 0, rotated.stderr
    assert not errors
    for name in names:
        pod = kit.wait_phase(name, timeout=60)
        assert pod["spec"]["schedulerName"] == "dynmig-scheduler"  # the mutating webhook saw every pod
        kit.wait_event(name, "Scheduled")
        [(profile, _model)] = realized(kit, name)
        assert profile == "1g.24gb"
    new = _secret_cert_digest(lab)
    assert new != old  # `dynmig certs rotate` has written the Secret
    # picked up through serve's watch on the Secret (no file, no kubelet sync delay)
    kit.wait(lambda: _served_cert_digest(lab) == new, 30, "dynmig serve to serve the rotated certificate")
    assert "certificate renewal failed" not in lab.serve_log()
