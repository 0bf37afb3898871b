"""The committed device-plugin stubs match our .proto, and the .proto matches kubelet's wire
contract (deviceplugin v1beta1: services, rpcs, messages, field names and numbers)."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf.descriptor import FieldDescriptor as F

from plugin.api import deviceplugin_pb2 as pb
from plugin.api import deviceplugin_pb2_grpc as rpc
from plugin.api.generate import HERE, generate

R, O = "repeated", "optional"  # noqa: E741 (O reads as "optional" in the field tables)
S, B, I32, I64, MSG, MAP = F.TYPE_STRING, F.TYPE_BOOL, F.TYPE_INT32, F.TYPE_INT64, F.TYPE_MESSAGE, "map"

# message -> {field: (number, type, label)} from k8s-contracts §3.2
CONTRACT = {
    "DevicePluginOptions": {"pre_start_required": (1, B, O), "get_preferred_allocation_available": (2, B, O)},
    "RegisterRequest": {
        "version": (1, S, O),
        "endpoint": (2, S, O),
        "resource_name": (3, S, O),
        "options": (4, MSG, O),
    },
    "Empty": {},
    "ListAndWatchResponse": {"devices": (1, MSG, R)},
    "TopologyInfo": {"nodes": (1, MSG, R)},
    "NUMANode": {"ID": (1, I64, O)},
    "Device": {"ID": (1, S, O), "health": (2, S, O), "topology": (3, MSG, O)},
    "PreStartContainerRequest": {"devices_ids": (1, S, R)},
    "PreStartContainerResponse": {},
    "PreferredAllocationRequest": {"container_requests": (1, MSG, R)},
    "ContainerPreferredAllocationRequest": {
        "available_deviceIDs": (1, S, R),
        "must_include_deviceIDs": (2, S, R),
        "allocation_size": (3, I32, O),
    },
    "PreferredAllocationResponse": {"container_responses": (1, MSG, R)},
    "ContainerPreferredAllocationResponse": {"deviceIDs": (1, S, R)},
    "AllocateRequest": {"container_requests": (1, MSG, R)},
    "ContainerAllocateRequest": {"devices_ids": (1, S, R)},
    "CDIDevice": {"name": (1, S, O)},
    "AllocateResponse": {"container_responses": (1, MSG, R)},
    "ContainerAllocateResponse": {
        "envs": (1, MAP, R),
        "mounts": (2, MSG, R),
        "devices": (3, MSG, R),
        "annotations": (4, MAP, R),
        "cdi_devices": (5, MSG, R),
    },
    "Mount": {"container_path": (1, S, O), "host_path": (2, S, O), "read_only": (3, B, O)},
    "DeviceSpec": {"container_path": (1, S, O), "host_path": (2, S, O), "permissions": (3, S, O)},
}
SERVICES = {
    "Registration": {"Register": ("RegisterRequest", "Empty", False)},
    "DevicePlugin": {
        "GetDevicePluginOptions": ("Empty", "DevicePluginOptions", False),
        "ListAndWatch": ("Empty", "ListAndWatchResponse", True),
        "GetPreferredAllocation": ("PreferredAllocationRequest", "PreferredAllocationResponse", False),
        "Allocate": ("AllocateRequest", "AllocateResponse", False),
        "PreStartContainer": ("PreStartContainerRequest", "PreStartContainerResponse", False),
    },
}


def test_the_committed_stubs_are_what_the_proto_generates_today(tmp_path: Path):
    for path in generate(tmp_path):
        assert path.read_text() == (HERE / path.name).read_text(), (
            f"plugin/api/{path.name} drifted from its .proto: run `make proto` and commit the result"
        )


@pytest.mark.parametrize("name", ["deviceplugin_pb2_grpc.py", "deviceplugin_pb2_grpc.pyi"])
def test_the_grpc_module_and_its_type_stub_import_the_messages_from_the_package(name):
    source = (HERE / name).read_text()
    assert "from plugin.api import deviceplugin_pb2" in source and "\nimport deviceplugin_pb2" not in source
    assert rpc.deviceplugin__pb2 is pb


def test_the_type_stubs_declare_every_message_and_service_of_the_proto():
    messages = (HERE / "deviceplugin_pb2.pyi").read_text()
    services = (HERE / "deviceplugin_pb2_grpc.pyi").read_text()
    assert {m for m in CONTRACT if f"\nclass {m}(_message.Message):" not in messages} == set()
    for service in SERVICES:
        assert f"\nclass {service}Servicer(" in services and f"\nclass {service}Stub:" in services


def test_the_proto_package_is_v1beta1():
    assert pb.DESCRIPTOR.package == "v1beta1"


def _field_kind(field) -> tuple[int, object, str]:
    is_map = field.type == F.TYPE_MESSAGE and field.message_type.GetOptions().map_entry
    label = R if field.is_repeated else O
    return field.number, MAP if is_map else field.type, label


@pytest.mark.parametrize("message", sorted(CONTRACT))
def test_every_message_has_exactly_the_contract_fields_names_and_numbers(message):
    descriptor = pb.DESCRIPTOR.message_types_by_name[message]
    assert {f.name: _field_kind(f) for f in descriptor.fields} == CONTRACT[message]


def test_there_are_no_messages_beyond_the_contract():
    assert set(pb.DESCRIPTOR.message_types_by_name) == set(CONTRACT)


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_every_service_has_the_contract_rpcs_with_their_wire_paths(service):
    descriptor = pb.DESCRIPTOR.services_by_name[service]
    found = {m.name: (m.input_type.name, m.output_type.name, m.server_streaming) for m in descriptor.methods}
    assert found == SERVICES[service]
    assert {m.full_name for m in descriptor.methods} == {f"v1beta1.{service}.{m}" for m in SERVICES[service]}


def test_map_fields_carry_string_keys_and_values():
    response = pb.ContainerAllocateResponse(envs={"NVIDIA_VISIBLE_DEVICES": "MIG-x"}, annotations={"a": "b"})
    again = pb.ContainerAllocateResponse.FromString(response.SerializeToString())
    assert dict(again.envs) == {"NVIDIA_VISIBLE_DEVICES": "MIG-x"} and dict(again.annotations) == {"a": "b"}
