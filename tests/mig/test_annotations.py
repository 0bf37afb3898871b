"""Annotation codecs: byte-compatible with HAMi, strict where ownership is at stake."""

import json

import pytest

from mig import annotations as ann
from mig.pods import PodRecord

A = {
    "containerIndex": 0,
    "deviceIndex": 0,
    "gpuUUID": "GPU-a",
    "profile": "1g.5gb",
    "placement": {"start": 6, "size": 1},
}


def test_a_profile_encodes_exactly_as_hami_does():
    profile = ann.MigProfile(
        name="1g.5gb", memoryMB=4864, core=15, sliceCount=1, placements=[{"start": 6, "size": 1}]
    )
    assert profile.encode() == (
        '{"name":"1g.5gb","memoryMB":4864,"core":15,"sliceCount":1,"placements":[{"start":6,"size":1}]}'
    )


def test_a_node_registration_with_unknown_keys_decodes_to_its_devices_and_profiles():
    text = (
        '[{"id":"GPU-0","count":7,"devmem":40960,"devcore":100,"type":"NVIDIA-A100-SXM4-40GB","numa":0,'
        '"health":true,"mode":"mig","migProfiles":[{"name":"1g.5gb","memoryMB":5120,"core":14,"sliceCount":1,'
        '"instanceCount":7,"multiprocessorCount":14,"placements":[{"start":6,"size":1}]}]}]'
    )
    (device,) = ann.decode_node_register(text)
    assert device.id == "GPU-0" and device.health and device.mode == "mig"
    (profile,) = device.migProfiles
    assert profile.name == "1g.5gb" and [(p.start, p.size) for p in profile.placements] == [(6, 1)]


def test_node_registration_leaves_zero_values_out_like_go_omitempty():
    device = ann.DeviceInfo(
        id="GPU-0",
        index=0,
        count=4,
        devmem=97887,
        devcore=100,
        type="NVIDIA-RTX",
        numa=0,
        health=True,
        mode="mig",
    )
    encoded = json.loads(ann.encode_node_register([device]))
    assert encoded == [
        {
            "id": "GPU-0",
            "count": 4,
            "devmem": 97887,
            "devcore": 100,
            "type": "NVIDIA-RTX",
            "health": True,
            "mode": "mig",
        }
    ]
    assert ann.decode_node_register(ann.encode_node_register([device])) == (device,)


def test_a_logical_reservation_round_trips_without_runtime_fields():
    entry = ann.MigAllocation.model_validate(A)
    text = ann.encode_allocations([entry])
    assert text == (
        '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.5gb",'
        '"placement":{"start":6,"size":1}}]'
    )
    (back,) = ann.decode_allocations(text)
    assert back == entry and not back.runtime_ready


def test_zero_is_a_valid_instance_id():
    (entry,) = ann.decode_allocations(
        json.dumps([{**A, "migUUID": "MIG-a", "gpuInstanceID": 0, "computeInstanceID": 0}])
    )
    assert entry.runtime_ready and entry.gpuInstanceID == 0 and entry.computeInstanceID == 0


def test_runtime_identity_is_written_back_complete():
    entry = ann.MigAllocation.model_validate(A).with_runtime("MIG-a", 4, 0)
    assert json.loads(ann.encode_allocations([entry]))[0]["gpuInstanceID"] == 4


@pytest.mark.parametrize(
    "entries,field",
    [
        ([A, {**A, "placement": {"start": 5, "size": 1}}], "duplicate reservation"),
        ([{**A, "migUUID": "MIG-a"}], "partial runtime identity"),
        ([{**A, "gpuInstanceID": 3, "computeInstanceID": 0}], "partial runtime identity"),
        ([{**A, "placement": {"start": 0, "size": 0}}], "placement.size"),
        ([{**A, "containerIndex": -1}], "containerIndex"),
        ([{**A, "deviceIndex": -2}], "deviceIndex"),
        ([{**A, "gpuUUID": ""}], "gpuUUID"),
        ([{**A, "profile": ""}], "profile"),
        ([{**A, "containerIndex": "0"}], "containerIndex"),
        ([A, "nonsense"], "[1]"),
    ],
)
def test_any_invalid_entry_rejects_the_whole_annotation(entries, field):
    with pytest.raises(ann.AnnotationError, match=field.replace("[", r"\[").replace("]", r"\]")):
        ann.decode_allocations(json.dumps(entries))


@pytest.mark.parametrize("text", ["{", '{"a":1}', "[1,"])
def test_malformed_json_is_an_annotation_error(text):
    with pytest.raises(ann.AnnotationError, match=r"hami\.io/vgpu-mig-allocations"):
        ann.decode_allocations(text)


def test_an_empty_annotation_means_no_reservations():
    assert ann.decode_allocations("") == () and ann.decode_allocations(None) == ()
    assert ann.encode_allocations([]) is None


def test_device_strings_follow_hamis_container_layout():
    dev = ann.ContainerDevice("GPU-a", "NVIDIA", 5120, 14)
    text = ann.encode_devices([[dev, dev]])
    assert text == "GPU-a,NVIDIA,5120,14:GPU-a,NVIDIA,5120,14:;"
    assert ann.decode_devices(text) == [[dev, dev]]
    two = ann.encode_devices([[], [dev]])
    assert two == ";GPU-a,NVIDIA,5120,14:;"
    assert ann.decode_devices(two) == [[], [dev]]
    assert ann.decode_devices(";") == [[]]


def test_a_broken_device_string_names_its_container_and_entry():
    with pytest.raises(ann.AnnotationError, match=r"\[0\]\[1\]"):
        ann.decode_devices("GPU-a,NVIDIA,5120,14:GPU-b,NVIDIA,lots,14:;")


# A registration as HAMi v2.10's Go device plugin writes it (json.Marshal of []*DeviceInfo: struct
# field order id,index,count,devmem,devcore,type,numa,mode,migProfiles,health; omitempty drops zero
# values; a profile whose placement list was never appended to is `null`). Written for dynmig in
# the shape of HAMi's pkg/device tests; GPU UUIDs are made up.
HAMI_REGISTRATION = (
    '[{"id":"GPU-7b1e0c52-0c8a-4f1e-9d3a-1b2c3d4e5f60","count":7,"devmem":40960,"devcore":100,'
    '"type":"NVIDIA-A100-SXM4-40GB","mode":"mig","migProfiles":['
    '{"name":"1g.5gb","memoryMB":4864,"core":14,"sliceCount":1,"placements":[{"start":0,"size":1},'
    '{"start":1,"size":1},{"start":2,"size":1},{"start":3,"size":1},{"start":4,"size":1},{"start":5,"size":1},'
    '{"start":6,"size":1}]},'
    '{"name":"3g.20gb","memoryMB":19968,"core":42,"sliceCount":3,"placements":[{"start":0,"size":4},'
    '{"start":4,"size":4}]},'
    '{"name":"7g.40gb","memoryMB":40192,"core":100,"sliceCount":7,"placements":null}],"health":true},'
    '{"id":"GPU-9c2f1d63-1d9b-4a2f-8e4b-2c3d4e5f6071","index":1,"count":7,"devmem":40960,"devcore":100,'
    '"type":"NVIDIA-A100-SXM4-40GB","numa":1,"mode":"mig","migProfiles":['
    '{"name":"1g.5gb","memoryMB":4864,"core":14,"sliceCount":1,"placements":[{"start":6,"size":1}]}],'
    '"health":true},'
    '{"id":"GPU-0d3a2e74-2eac-4b30-9f5c-3d4e5f607182","index":2,"count":10,"devmem":81920,"devcore":100,'
    '"type":"NVIDIA-A100-SXM4-80GB","mode":"hami-core"}]'
)


def test_a_hami_registration_re_encodes_byte_for_byte():
    devices = ann.decode_node_register(HAMI_REGISTRATION)
    assert ann.encode_node_register(devices) == HAMI_REGISTRATION


def test_a_profile_whose_placements_are_null_offers_no_placement_and_the_rest_of_the_node_stays():
    first, second, third = ann.decode_node_register(HAMI_REGISTRATION)
    by_name = {p.name: p for p in first.migProfiles}
    assert by_name["7g.40gb"].placements == ()
    assert len(by_name["1g.5gb"].placements) == 7 and len(by_name["3g.20gb"].placements) == 2
    assert second.numa == 1 and second.migProfiles[0].placements[0].to_placement().start == 6
    assert third.mode == "hami-core" and not third.health


def test_null_profile_lists_read_as_no_profiles_as_go_reads_them():
    (device,) = ann.decode_node_register('[{"id":"GPU-0","mode":"mig","migProfiles":null,"health":true}]')
    assert device.migProfiles == ()


def _drained(text: str, container_index: int) -> str:
    return PodRecord({ann.DEVICES_TO_ALLOCATE: text}).drained(container_index)


def test_the_drained_device_list_after_allocate_is_what_hami_leaves_and_still_decodes():
    one = "GPU-a,NVIDIA,4864,14:;"
    assert _drained(one, 0) == ";;"  # HAMi's EncodePodSingleDevice of its own split
    two = "GPU-a,NVIDIA,4864,14:;GPU-b,NVIDIA,9728,15:;"
    after_first = _drained(two, 0)
    assert after_first == ";GPU-b,NVIDIA,9728,15:;;"
    assert _drained(after_first, 1) == ";;;;"
    for drained in (";;", ";", ";;;;"):
        assert not any(ann.decode_devices(drained))
    assert [len(c) for c in ann.decode_devices(after_first)] == [0, 1, 0]


def test_erasing_a_container_from_a_malformed_device_list_names_the_entry():
    with pytest.raises(ann.AnnotationError, match=r"vgpu-devices-to-allocate\[0\]\[0\]"):
        _drained("GPU-a,NVIDIA,lots,14:;", 0)
