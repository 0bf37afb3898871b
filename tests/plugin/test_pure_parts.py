"""The plugin's pure parts on plain data: profile resolution, registration JSON, desired state,
reservation matching, pod finding and kubelet answers."""

from __future__ import annotations

import pytest

from mig.allowlist import Allowlist, AllowlistEntry
from mig.annotations import (
    BIND_PHASE,
    DEVICES_TO_ALLOCATE,
    MIG_ALLOCATIONS,
    VGPU_NODE,
    ContainerDevice,
    MigAllocation,
    encode_node_register,
)
from mig.types import Placement
from plugin.allocate import (
    AllocateError,
    answer,
    container_reservations,
    physical_id,
    preferred,
)
from plugin.discovery import GpuInventory, Inventory, core_percent, device_info, registration, resolve_allowed
from plugin.instances import InstanceKey, ManagedInstance
from plugin.kube import PodView
from plugin.nvml import GiProfile, GpuDevice, profile_name
from plugin.podfinder import lock_owner, next_container, pick_pending
from plugin.reconcile import active_reservations, plan_reclaim

GPU = "GPU-11111111-2222-3333-4444-555555555555"


def gi(
    name: str, pid: int, sm: int, mem: int, slices: int, count: int, placements: list[tuple[int, int]]
) -> GiProfile:
    return GiProfile(name, 0, pid, mem, sm, slices, count, tuple(Placement(*p) for p in placements))


A100_80 = (
    gi("1g.10gb", 19, 14, 9728, 1, 7, [(i, 1) for i in range(7)]),
    gi("1g.10gb+me", 20, 14, 9728, 1, 1, [(i, 1) for i in range(7)]),
    gi("1g.20gb", 15, 14, 19968, 1, 4, [(0, 2), (2, 2), (4, 2), (6, 2)]),
    gi("2g.20gb", 14, 28, 19968, 2, 3, [(0, 2), (2, 2), (4, 2)]),
    gi("7g.80gb", 0, 98, 80896, 7, 1, [(0, 8)]),
)


@pytest.mark.parametrize(
    ("raw", "name"),
    [
        (b"1g.10gb", "1g.10gb"),
        (b"MIG 1g.10gb\x00\x00", "1g.10gb"),
        (b"MIG 1g.10gb+me", "1g.10gb+me"),
        ("2g.48gb", "2g.48gb"),
    ],
)
def test_profile_names_come_from_nvml_without_the_mig_prefix(raw, name):
    assert profile_name(raw) == name


def test_profiles_resolve_by_full_name_so_me_and_double_memory_variants_stay_distinct():
    allowlist = Allowlist(
        (AllowlistEntry(("A100-SXM4-80GB",), ("1g.20gb", "1g.10gb+me", "1g.10gb", "3g.40gb")),)
    )

    allowed = resolve_allowed(allowlist, "NVIDIA A100-SXM4-80GB", A100_80)

    assert [(p.name, p.id) for p in allowed] == [("1g.20gb", 15), ("1g.10gb+me", 20), ("1g.10gb", 19)]


@pytest.mark.parametrize(("profile", "core"), [(0, 15), (3, 29), (4, 100)])
def test_core_is_the_ceiling_of_sms_over_the_largest_profile(profile, core):
    assert core_percent(A100_80[profile], A100_80) == core


def inventory(excluded: bool = False, allowed: tuple[GiProfile, ...] = A100_80[:1]) -> Inventory:
    device = GpuDevice(2, GPU, "NVIDIA A100-SXM4-80GB", 81920, 1, None)
    return Inventory((GpuInventory(device, A100_80, allowed, excluded),))


def test_registration_is_hami_json_with_omitempty_and_no_instance_count():
    text = encode_node_register(registration(inventory()))

    assert text == (
        f'[{{"id":"{GPU}","index":2,"count":7,"devmem":81920,"devcore":100,"type":"NVIDIA A100-SXM4-80GB",'
        '"numa":1,"mode":"mig","migProfiles":[{"name":"1g.10gb","memoryMB":9728,"core":15,'
        '"sliceCount":1,"placements":[{"start":0,"size":1},{"start":1,"size":1},{"start":2,"size":1},'
        '{"start":3,"size":1},{"start":4,"size":1},{"start":5,"size":1},{"start":6,"size":1}]}],"health":true}]'
    )


def test_excluded_gpus_and_gpus_without_allowed_profiles_are_not_registered():
    assert registration(inventory(excluded=True)) == []
    assert registration(inventory(allowed=())) == []
    assert device_info(inventory().gpus[0]).type == "NVIDIA A100-SXM4-80GB"


def pod(
    name: str, allocations: str = "", phase: str = "Running", deleting: bool = False, **annotations: str
) -> PodView:
    return PodView(
        "default",
        name,
        uid=f"uid-{name}",
        phase=phase,
        deleting=deleting,
        annotations={MIG_ALLOCATIONS: allocations, **annotations},
    )


def alloc(
    c: int, d: int, profile: str = "1g.10gb", start: int = 0, size: int = 1, gpu: str = GPU, **rt
) -> str:
    return MigAllocation.model_validate(
        {
            "containerIndex": c,
            "deviceIndex": d,
            "gpuUUID": gpu,
            "profile": profile,
            "placement": {"start": start, "size": size},
            **rt,
        }
    ).model_dump_json(exclude_none=True)


def test_only_active_pods_back_instances():
    pods = [
        pod("run", f"[{alloc(0, 0, start=1)}]"),
        pod("pend", f"[{alloc(0, 0, start=2)}]", phase="Pending"),
        pod("done", f"[{alloc(0, 0, start=3)}]", phase="Succeeded"),
        pod("fail", f"[{alloc(0, 0, start=4)}]", phase="Failed"),
        pod("bye", f"[{alloc(0, 0, start=5)}]", deleting=True),
    ]

    node = active_reservations(pods, {GPU})

    assert sorted(k.start for k in node.keys) == [1, 2]
    assert node.problems == ()


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("not json", "malformed-annotation"),
        (f"[{alloc(0, 0, migUUID='MIG-a')}]", "malformed-annotation"),
        (f"[{alloc(0, 0, gpu='GPU-elsewhere')}]", "unknown-gpu"),
    ],
)
def test_anything_not_fully_understood_is_a_reason_to_skip_destroys(text, reason):
    node = active_reservations([pod("ok", f"[{alloc(0, 0)}]"), pod("bad", text)], {GPU})

    assert node.skip_reason == reason


def test_reclaim_plans_exactly_the_instances_no_reservation_backs():
    keep, drop = InstanceKey(GPU, "1g.10gb", 0, 1), InstanceKey(GPU, "1g.10gb", 1, 1)
    managed = [ManagedInstance(keep, 7, 0, "MIG-a"), ManagedInstance(drop, 8, 0, "MIG-b")]

    assert [m.key for m in plan_reclaim(managed, frozenset({keep}))] == [drop]


def test_a_container_takes_its_own_reservations_in_device_order():
    from mig.annotations import decode_allocations

    allocations = decode_allocations(
        f"[{alloc(1, 1, start=4)},{alloc(0, 0, start=0)},{alloc(1, 0, start=2)}]"
    )
    devices = [ContainerDevice(GPU, "NVIDIA", 1, 1), ContainerDevice(GPU, "NVIDIA", 1, 1)]

    assert [a.placement.start for a in container_reservations(allocations, 1, devices)] == [2, 4]
    with pytest.raises(AllocateError, match="2 device"):
        container_reservations(allocations, 0, devices)
    with pytest.raises(AllocateError, match="GPU-other"):
        container_reservations(allocations, 1, [ContainerDevice("GPU-other", "NVIDIA", 1, 1)] * 2)


def test_the_next_container_is_the_first_with_devices_left_and_erasing_keeps_the_others():
    text = f";{GPU},NVIDIA,10,15:;{GPU},NVIDIA,20,29:;"
    p = pod("p", **{DEVICES_TO_ALLOCATE: text})

    index, devices = next_container(p)

    assert index == 1 and [d.usedmem for d in devices] == [10]
    assert p.reservation.drained(1) == f";;{GPU},NVIDIA,20,29:;;"  # HAMi keeps the piece after the last ;
    assert p.reservation.left_after(1)


def test_the_node_lock_names_the_pod_and_the_legacy_form_names_none():
    assert lock_owner({"hami.io/mutex.lock": "2026-01-01T00:00:00Z,ns,p"}) == ("ns", "p")
    assert lock_owner({"hami.io/mutex.lock": "2026-01-01T00:00:00Z"}) is None
    assert lock_owner({}) is None


def test_without_a_lock_the_pending_allocating_pod_for_this_node_is_chosen():
    ready = {VGPU_NODE: "n1", BIND_PHASE: "allocating", DEVICES_TO_ALLOCATE: f"{GPU},NVIDIA,1,1:;"}
    pods = [
        pod("running", phase="Running", **ready),
        pod("other-node", phase="Pending", **{**ready, VGPU_NODE: "n2"}),
        pod("done-allocating", phase="Pending", **{**ready, DEVICES_TO_ALLOCATE: ";"}),
        pod("mine", phase="Pending", **ready),
    ]

    assert pick_pending(pods, "n1").name == "mine"


@pytest.mark.parametrize(
    ("device_id", "gpu"),
    [(f"{GPU}-0", GPU), (f"{GPU}-10", GPU), (f"{GPU}::3", GPU), (GPU, GPU), ("MIG-abc", "MIG-abc")],
)
def test_replica_ids_map_back_to_their_physical_gpu(device_id, gpu):
    assert physical_id(device_id) == gpu


def test_preferred_allocation_picks_replicas_of_the_reserved_gpus_first():
    other = "GPU-99999999-2222-3333-4444-555555555555"
    available = [f"{other}-0", f"{other}-1", f"{GPU}-0", f"{GPU}-1"]

    assert preferred(available, [], 2, [GPU, GPU]) == [f"{GPU}-0", f"{GPU}-1"]
    assert preferred(available, [], 1, []) == [f"{other}-0"]


def test_answers_follow_the_device_list_strategy():
    assert answer("envvar", ["MIG-a", "MIG-b"], "u").envs == {"NVIDIA_VISIBLE_DEVICES": "MIG-a,MIG-b"}
    assert answer("cdi-cri", ["MIG-a"], "u").cdi_devices == ("nvidia.com/gpu=MIG-a",)
    assert answer("cdi-annotations", ["MIG-a"], "u").annotations == {
        "cdi.k8s.io/dynmig-device-plugin_u": "nvidia.com/gpu=MIG-a"
    }
