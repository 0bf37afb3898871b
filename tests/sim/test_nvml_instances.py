"""GPU and compute instances: legal placements, overlap, IDs, MIG devices, destroy rules."""

from __future__ import annotations

import ctypes
import re

import pynvml
import pytest
from nvml_testkit import (
    A30,
    A100,
    H100,
    RTX,
    THREE_MODELS,
    compute_instances,
    create_gi,
    find_model,
    full_ci,
    gpu0,
    gpu_instances,
    mig_uuids_by_index,
)
from sim.nvml import SimulatedNvml, SpecError

MIG_UUID = re.compile(r"MIG-[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


@pytest.fixture
def driver_defaults(monkeypatch):
    """The simulator's own defaults, whatever a whole-suite run set in DYNMIG_SIM_* (spec.py)."""
    monkeypatch.delenv("DYNMIG_SIM_GI_IDS", raising=False)
    monkeypatch.delenv("DYNMIG_SIM_MIG_UUIDS", raising=False)


@pytest.mark.parametrize("model", (*THREE_MODELS, A30))
def test_every_legal_placement_of_every_profile_can_be_created_and_reports_itself(node, model):
    node(model)
    handle = gpu0()
    for spec in find_model(model).profiles:
        for placement in spec.placements:
            gi = create_gi(handle, spec.profile_id, placement.start, placement.size)
            info = pynvml.nvmlGpuInstanceGetInfo(gi)
            assert (info.profileId, info.placement.start, info.placement.size) == (
                spec.profile_id,
                placement.start,
                placement.size,
            )
            assert pynvml.nvmlDeviceGetUUID(info.device) == pynvml.nvmlDeviceGetUUID(handle)
            pynvml.nvmlGpuInstanceDestroy(gi)


@pytest.mark.parametrize(
    "model, profile, start, size",
    [
        (A100, "3g.20gb", 2, 4),  # not aligned
        (A100, "1g.5gb", 7, 1),  # slot 7 is not offered to 1g
        (H100, "2g.20gb", 0, 1),  # wrong size
        (RTX, "1g.24gb", 1, 3),  # 12-slice axis: quarters only
        (RTX, "1g.24gb", 0, 1),  # sliceCount is not the placement size
    ],
)
def test_an_illegal_placement_is_an_invalid_argument(node, model, profile, start, size):
    node(model)
    spec = find_model(model).profile(profile)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        create_gi(gpu0(), spec.profile_id, start, size)


def test_an_unknown_profile_id_is_an_invalid_argument(node):
    node(A100)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        create_gi(gpu0(), 99, 0, 1)


@pytest.mark.parametrize(
    "model, first, second",
    [
        (A100, ("3g.20gb", 4, 4), ("1g.5gb", 5, 1)),
        (H100, ("2g.20gb", 2, 2), ("1g.20gb", 2, 2)),
        (RTX, ("2g.48gb", 6, 6), ("1g.24gb", 9, 3)),
        (RTX, ("1g.24gb", 0, 3), ("4g.96gb", 0, 12)),
    ],
)
def test_an_overlapping_placement_is_insufficient_resources(node, model, first, second):
    node(model)
    catalog = find_model(model)
    create_gi(gpu0(), catalog.profile(first[0]).profile_id, first[1], first[2])
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        create_gi(gpu0(), catalog.profile(second[0]).profile_id, second[1], second[2])


def test_a_media_extension_profile_allows_only_its_instance_count(node):
    node(A100)
    me = find_model(A100).profile("1g.5gb+me")
    create_gi(gpu0(), me.profile_id, 0, 1)
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        create_gi(gpu0(), me.profile_id, 3, 1)


def test_an_all_media_engine_profile_admits_only_no_media_engine_neighbours(node):
    node(RTX)
    catalog = find_model(RTX)
    create_gi(gpu0(), catalog.profile("1g.24gb+me.all").profile_id, 0, 3)
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        create_gi(gpu0(), catalog.profile("1g.24gb").profile_id, 3, 3)
    create_gi(gpu0(), catalog.profile("1g.24gb-me").profile_id, 3, 3)
    assert (
        pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(gpu0(), catalog.profile("2g.48gb").profile_id) == 0
    )


def test_all_media_engine_profile_is_refused_beside_a_profile_with_media_engines(node):
    node(RTX)
    catalog = find_model(RTX)
    create_gi(gpu0(), catalog.profile("1g.24gb").profile_id, 9, 3)
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        create_gi(gpu0(), catalog.profile("2g.48gb+me.all").profile_id, 0, 6)


@pytest.mark.parametrize(
    "model, profile, expected_starts",
    [
        (A100, "1g.5gb", [6, 4, 5, 0, 1, 2, 3]),
        (H100, "1g.10gb", [6, 4, 5, 0, 1, 2, 3]),
        (A100, "3g.20gb", [4, 0]),
        (RTX, "1g.24gb", [0, 3, 6, 9]),
    ],
)
def test_creating_without_a_placement_uses_the_drivers_slot_order(node, model, profile, expected_starts):
    node(model)
    spec = find_model(model).profile(profile)
    starts = []
    for _ in expected_starts:
        gi = pynvml.nvmlDeviceCreateGpuInstance(gpu0(), spec.profile_id)
        starts.append(pynvml.nvmlGpuInstanceGetInfo(gi).placement.start)
    assert starts == expected_starts
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        pynvml.nvmlDeviceCreateGpuInstance(gpu0(), spec.profile_id)


@pytest.mark.parametrize(
    "model, profile, start, gi_id",
    [
        # GPU 0 of an 8-slice node numbers the upper half first, as real drivers were seen to
        (A100, "7g.40gb", 0, 0),
        (A100, "3g.20gb", 0, 2),
        (A100, "4g.20gb", 0, 2),
        (A100, "3g.20gb", 4, 1),
        (A100, "2g.10gb", 2, 6),
        (A100, "1g.5gb", 0, 11),
        (A100, "1g.5gb", 1, 12),  # A100-PCIE, 510.47.03
        (H100, "1g.10gb", 6, 9),
        (H100, "1g.10gb", 4, 7),
        (H100, "1g.10gb", 3, 14),  # H100 PCIe, 570.169
        ("H20", "1g.12gb", 2, 13),
        ("H20", "1g.12gb", 3, 14),
        # RTX PRO 6000 (walkthrough, HAMi fixture) and A30: the plain slice-tree order
        (RTX, "4g.96gb", 0, 0),
        (RTX, "2g.48gb", 0, 1),
        (RTX, "2g.48gb", 6, 2),
        (RTX, "1g.24gb", 0, 3),
        (RTX, "1g.24gb", 9, 6),
        (A30, "4g.24gb", 0, 0),
        (A30, "2g.12gb", 2, 2),
        (A30, "1g.6gb", 1, 4),
    ],
)
def test_gi_ids_are_numbered_as_real_drivers_number_them(node, driver_defaults, model, profile, start, gi_id):
    node(model)
    spec = find_model(model).profile(profile)
    gi = create_gi(gpu0(), spec.profile_id, start, spec.placement_size)
    assert pynvml.nvmlGpuInstanceGetInfo(gi).id == gi_id


@pytest.mark.parametrize(
    "profile, start, gi_id",
    [
        ("3g.20gb", 0, 1),
        ("3g.20gb", 4, 2),
        ("2g.10gb", 0, 3),
        ("2g.10gb", 2, 4),
        ("2g.10gb", 4, 5),
        ("1g.10gb", 6, 6),
        ("1g.5gb", 0, 7),
        ("1g.5gb", 6, 13),  # MIG User Guide A100 walkthroughs
    ],
)
def test_the_second_gpu_of_a_node_numbers_its_gis_the_other_way_seen_on_one_real_node(
    node, driver_defaults, profile, start, gi_id
):
    node({"gpus": [{"model": A100, "count": 2}]})
    spec = find_model(A100).profile(profile)
    gpu1 = pynvml.nvmlDeviceGetHandleByIndex(1)
    assert (
        pynvml.nvmlGpuInstanceGetInfo(create_gi(gpu1, spec.profile_id, start, spec.placement_size)).id
        == gi_id
    )
    assert (
        pynvml.nvmlGpuInstanceGetInfo(create_gi(gpu0(), spec.profile_id, start, spec.placement_size)).id
        != gi_id
    )


@pytest.mark.parametrize("numbering, gi_id", [("heap", 1), ("halves-swapped", 2)])
def test_a_node_spec_can_pin_one_gi_numbering_for_every_gpu(node, numbering, gi_id):
    node({"gpus": [{"model": A100, "count": 2}], "gi_ids": numbering})
    spec = find_model(A100).profile("3g.20gb")
    for index in (0, 1):
        gi = create_gi(pynvml.nvmlDeviceGetHandleByIndex(index), spec.profile_id, 0, 4)
        assert pynvml.nvmlGpuInstanceGetInfo(gi).id == gi_id


def test_shuffled_gi_ids_are_opaque_but_stable_and_placements_stay_true(node):
    spec = {"gpus": [{"model": A100}]}
    node(spec, shuffle_gi_ids=11)
    one_g = find_model(A100).profile("1g.5gb")
    ids, starts = [], []
    for start in range(7):
        info = pynvml.nvmlGpuInstanceGetInfo(create_gi(gpu0(), one_g.profile_id, start, 1))
        ids.append(info.id)
        starts.append(info.placement.start)
    assert starts == list(range(7))
    assert ids != [7 + s for s in range(7)] and len(set(ids)) == 7
    assert all(0 <= i <= 14 for i in ids)
    by_id = pynvml.nvmlGpuInstanceGetInfo(pynvml.nvmlDeviceGetGpuInstanceById(gpu0(), ids[3]))
    assert by_id.placement.start == 3


@pytest.mark.parametrize("model", THREE_MODELS)
def test_gpu_instances_are_listed_per_profile_and_found_by_id(node, model):
    node(model)
    spec = find_model(model).profiles[0]
    created = [
        pynvml.nvmlGpuInstanceGetInfo(create_gi(gpu0(), spec.profile_id, p.start, p.size)).id
        for p in spec.placements[:2]
    ]
    listed = [pynvml.nvmlGpuInstanceGetInfo(gi).id for gi in gpu_instances(gpu0(), spec.profile_id)]
    assert sorted(listed) == sorted(created)
    other = find_model(model).profile_by_enum(pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE)
    assert gpu_instances(gpu0(), other.profile_id) == []
    assert (
        pynvml.nvmlGpuInstanceGetInfo(pynvml.nvmlDeviceGetGpuInstanceById(gpu0(), created[1])).id
        == created[1]
    )
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetGpuInstanceById(gpu0(), 14)


@pytest.mark.parametrize(
    "model, profile, start", [(A100, "3g.20gb", 4), (H100, "1g.10gb", 2), (RTX, "1g.24gb", 9)]
)
def test_a_full_compute_instance_gets_id_0_and_a_mig_device_with_an_r470_uuid(node, model, profile, start):
    sim = node(model)
    spec = find_model(model).profile(profile)
    gi = create_gi(gpu0(), spec.profile_id, start, spec.placement_size)
    ci_profile = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
        gi, spec.slice_count - 1 if spec.slice_count < 4 else 3, 0
    )
    ci = pynvml.nvmlGpuInstanceCreateComputeInstance(gi, ci_profile.id)
    info = pynvml.nvmlComputeInstanceGetInfo(ci)
    gi_id = pynvml.nvmlGpuInstanceGetInfo(gi).id
    assert info.id == 0 and info.profileId == ci_profile.id
    assert pynvml.nvmlGpuInstanceGetInfo(info.gpuInstance).id == gi_id
    ((found_gi, found_ci, uuid),) = mig_uuids_by_index(gpu0())
    assert (found_gi, found_ci) == (gi_id, 0) and MIG_UUID.fullmatch(uuid)
    assert pynvml.nvmlDeviceGetUUID(info.device) == uuid  # the DRA driver's path to the MIG UUID
    assert sim.gpus()[0].mig_uuids == (uuid,)


def _make_1g(spec, start):
    gi = create_gi(gpu0(), spec.profile_id, start, 1)
    ci = full_ci(gi, 1)
    return gi, ci, pynvml.nvmlDeviceGetUUID(pynvml.nvmlComputeInstanceGetInfo(ci).device)


def test_re_creating_the_same_placement_mints_a_new_mig_uuid_by_default(node, driver_defaults):
    node(H100)
    spec = find_model(H100).profile("1g.10gb")
    gi, ci, first = _make_1g(spec, 2)
    pynvml.nvmlComputeInstanceDestroy(ci)
    pynvml.nvmlGpuInstanceDestroy(gi)
    _, _, again = _make_1g(spec, 2)
    assert MIG_UUID.fullmatch(again) and again != first
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetHandleByUUID(first)  # a cached UUID of the old instance finds nothing


def test_stable_mig_uuids_come_back_for_the_same_placement_and_differ_for_another(node):
    node({"gpus": [{"model": H100}], "mig_uuids": "stable"})
    spec = find_model(H100).profile("1g.10gb")
    gi, ci, first = _make_1g(spec, 2)
    pynvml.nvmlComputeInstanceDestroy(ci)
    pynvml.nvmlGpuInstanceDestroy(gi)
    _, _, again = _make_1g(spec, 2)
    _, _, other = _make_1g(spec, 3)
    assert first == again and other != first


def test_the_legacy_mig_gpu_uuid_gi_ci_form_finds_the_same_mig_device(node):
    sim = node(H100)
    spec = find_model(H100).profile("1g.10gb")
    gi, _, uuid = _make_1g(spec, 2)
    gi_id = pynvml.nvmlGpuInstanceGetInfo(gi).id
    legacy = pynvml.nvmlDeviceGetHandleByUUID(f"MIG-{sim.gpu_uuids[0]}/{gi_id}/0")
    assert pynvml.nvmlDeviceGetUUID(legacy) == uuid
    assert pynvml.nvmlDeviceGetGpuInstanceId(legacy) == gi_id
    for wrong in (f"MIG-{sim.gpu_uuids[0]}/{gi_id}/1", f"MIG-{sim.gpu_uuids[0]}/99999/0", "MIG-GPU-x/1/0"):
        with pytest.raises(pynvml.NVMLError_NotFound):
            pynvml.nvmlDeviceGetHandleByUUID(wrong)


def test_mig_devices_are_indexed_by_gi_id_then_ci_id_and_named_after_their_profile(node, driver_defaults):
    sim = node(A100)
    catalog = find_model(A100)
    for name, start in (("1g.5gb", 6), ("3g.20gb", 0), ("2g.10gb", 4)):
        spec = catalog.profile(name)
        full_ci(create_gi(gpu0(), spec.profile_id, start, spec.placement_size), spec.slice_count)
    order = mig_uuids_by_index(gpu0())
    assert [gi for gi, _, _ in order] == [2, 3, 9]  # 3g at 0:4, 2g at 4:2, 1g at 6:1 on GPU 0
    names = [
        pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu0(), i)) for i in range(3)
    ]
    assert names == [f"NVIDIA A100-SXM4-40GB MIG {n}" for n in ("3g.20gb", "2g.10gb", "1g.5gb")]
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu0(), 3)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu0(), 7)
    text = sim.nvidia_smi_L()
    assert text.splitlines()[1] == f"  MIG 3g.20gb     Device  0: (UUID: {order[0][2]})"


def test_compute_instances_split_a_gi_and_are_listed_found_and_destroyed(node):
    sim = node(A100)
    spec = find_model(A100).profile("3g.20gb")
    gi = create_gi(gpu0(), spec.profile_id, 0, 4)
    one_c = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
        gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, 0
    )
    assert (one_c.instanceCount, one_c.name) == (3, "MIG 1c.3g.20gb")
    cis = [pynvml.nvmlGpuInstanceCreateComputeInstance(gi, one_c.id) for _ in range(3)]
    assert [pynvml.nvmlComputeInstanceGetInfo(c).id for c in cis] == [0, 1, 2]
    assert pynvml.nvmlGpuInstanceGetComputeInstanceRemainingCapacity(gi, one_c.id) == 0
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        pynvml.nvmlGpuInstanceCreateComputeInstance(gi, one_c.id)
    assert len(compute_instances(gi, one_c.id)) == 3
    middle = pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, 1)
    pynvml.nvmlComputeInstanceDestroy(middle)
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, 1)
    assert [c.ci_id for c in sim.gpus()[0].gpu_instances[0].compute_instances] == [0, 2]
    assert "1c.3g.20gb" in sim.nvidia_smi_L()


def test_compute_instance_placements_use_the_two_call_pattern_and_create_with_placement(node):
    node(H100)
    spec = find_model(H100).profile("3g.40gb")
    gi = create_gi(gpu0(), spec.profile_id, 4, 4)
    count = ctypes.c_uint(0)
    pynvml.nvmlGpuInstanceGetComputeInstancePossiblePlacements(gi, 0, None, ctypes.byref(count))
    array = (pynvml.c_nvmlComputeInstancePlacement_t * count.value)()
    pynvml.nvmlGpuInstanceGetComputeInstancePossiblePlacements(gi, 0, array, ctypes.byref(count))
    assert [(p.start, p.size) for p in array] == [(0, 1), (1, 1), (2, 1)]
    placement = pynvml.c_nvmlComputeInstancePlacement_t(2, 1)
    ci = pynvml.nvmlGpuInstanceCreateComputeInstanceWithPlacement(gi, 0, ctypes.byref(placement))
    assert pynvml.nvmlComputeInstanceGetInfo(ci).placement.start == 2
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
            gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE, 0
        )


@pytest.mark.parametrize("model", THREE_MODELS)
def test_destroying_a_gi_that_still_has_a_ci_is_in_use_and_ci_first_then_gi_works(node, model):
    sim = node(model)
    spec = find_model(model).profiles[0]
    gi = create_gi(gpu0(), spec.profile_id, spec.placements[0].start, spec.placement_size)
    ci = full_ci(gi, spec.slice_count)
    with pytest.raises(pynvml.NVMLError_InUse):
        pynvml.nvmlGpuInstanceDestroy(gi)
    pynvml.nvmlComputeInstanceDestroy(ci)
    pynvml.nvmlGpuInstanceDestroy(gi)
    assert sim.gpus()[0].gpu_instances == ()
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlGpuInstanceGetInfo(gi)  # a stale handle stays stale


def test_a_placement_passed_by_value_is_refused_and_reported(node):
    sim = node(A100)
    placement = pynvml.c_nvmlGpuInstancePlacement_t(0, 1)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(gpu0(), 19, placement)
    assert "byref" in sim.misuse[0]


def test_a_whole_test_run_can_switch_the_defaults_from_the_environment_and_a_spec_still_wins(
    node, monkeypatch
):
    monkeypatch.setenv("DYNMIG_SIM_MIG_UUIDS", "stable")
    monkeypatch.setenv("DYNMIG_SIM_GI_IDS", "heap")
    node(H100)
    spec = find_model(H100).profile("1g.10gb")
    gi, ci, first = _make_1g(spec, 2)
    assert pynvml.nvmlGpuInstanceGetInfo(gi).id == 9  # heap: 7 + 2
    pynvml.nvmlComputeInstanceDestroy(ci)
    pynvml.nvmlGpuInstanceDestroy(gi)
    assert _make_1g(spec, 2)[2] == first
    monkeypatch.setenv("DYNMIG_SIM_GI_IDS", "sideways")
    with pytest.raises(SpecError, match="gi_ids must be one of"):
        SimulatedNvml({"gpus": [{"model": H100}]})
    pinned = SimulatedNvml({"gpus": [{"model": H100}], "gi_ids": "halves-swapped", "mig_uuids": "fresh"})
    assert pinned.snapshot()["mig_uuids"] == "fresh"
