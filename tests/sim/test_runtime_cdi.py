"""The simulated container runtime's CDI, as containerd hands a device plugin's answer to the CDI
library: the CRI field's names, then those of `cdi.k8s.io/*` annotations, each resolved from the spec
files or the whole injection fails with the library's message."""

from __future__ import annotations

import json

import pytest
from sim.kubelet import cdi

from plugin.api import deviceplugin_pb2 as pb


def spec(directory, kind: str, name: str, uuid: str) -> None:
    body = {
        "cdiVersion": "0.6.0",
        "kind": kind,
        "devices": [{"name": name, "containerEdits": {"env": [f"NVIDIA_VISIBLE_DEVICES={uuid}"]}}],
    }
    (directory / f"{kind.replace('/', '-')}_{name}.json").write_text(json.dumps(body))


def test_the_runtime_asks_for_the_cri_fields_names_then_the_annotations_names_each_once():
    answer = pb.ContainerAllocateResponse(
        cdi_devices=[pb.CDIDevice(name="k8s.dynmig.io/mig=MIG-a")],
        annotations={
            "cdi.k8s.io/dynmig-device-plugin_u": "k8s.dynmig.io/mig=MIG-b,k8s.dynmig.io/mig=MIG-a",
            "example.com/other": "not=cdi",
        },
    )
    assert cdi.requested(answer) == ["k8s.dynmig.io/mig=MIG-a", "k8s.dynmig.io/mig=MIG-b"]


def test_a_name_no_spec_defines_fails_the_whole_injection_with_the_cdi_librarys_message(tmp_path):
    spec(tmp_path, "k8s.dynmig.io/mig", "MIG-a", "MIG-a")
    env, _ = cdi.inject([tmp_path], ["k8s.dynmig.io/mig=MIG-a"])
    assert env == {"NVIDIA_VISIBLE_DEVICES": "MIG-a"}
    with pytest.raises(cdi.CdiError, match=r"^unresolvable CDI devices nvidia.com/gpu=MIG-a$"):
        cdi.inject([tmp_path], ["k8s.dynmig.io/mig=MIG-a", "nvidia.com/gpu=MIG-a"])
