"""The pod rules stated once: when a pod is active, what GPU it asks for, what its reservation says."""

from __future__ import annotations

import pytest

from mig import annotations as ann
from mig import pods
from mig.allowlist import ResourceNames
from mig.annotations import AnnotationError, ContainerDevice, decode_devices, drain_container, split_devices
from mig.placement import ContainerRequest, Percent, RequestError

NAMES = ResourceNames()
DELETED = "2026-01-01T00:00:00Z"


def pod(phase: str | None = "Running", deleting: bool = False, **spec) -> dict:
    meta: dict = {"name": "p", "namespace": "team"}
    if deleting:
        meta["deletionTimestamp"] = DELETED
    return {"metadata": meta, "spec": spec, "status": {"phase": phase} if phase is not None else {}}


# ---------------------------------------------------------------- active


@pytest.mark.parametrize(
    ("phase", "deleting", "scheduler", "plugin"),
    [
        ("Pending", False, True, True),
        ("Running", False, True, True),
        (None, False, True, True),  # a pod the API has not given a phase yet
        ("Unknown", False, True, True),  # the node lost contact: its containers may still run
        ("Running", True, True, False),  # terminating: still holds slices, no longer owns its instance
        ("Pending", True, True, False),
        ("Succeeded", False, False, False),
        ("Failed", False, False, False),
        ("Failed", True, False, False),
    ],
)
def test_the_scheduler_counts_a_terminating_pod_until_it_ends_and_the_plugin_lets_go_at_deletion(
    phase, deleting, scheduler, plugin
):
    p = pod(phase, deleting)
    assert pods.active_for_scheduler(p) is scheduler
    assert pods.active_for_plugin(pods.phase_of(p), pods.is_terminating(p)) is plugin


@pytest.mark.parametrize(
    "broken",
    [{}, {"status": None}, {"status": {"phase": 7}}, {"status": []}, {"metadata": "x", "status": "y"}],
)
def test_a_pod_with_no_readable_phase_is_active_for_both(broken):
    assert pods.active_for_scheduler(broken)
    assert pods.active_for_plugin(pods.phase_of(broken), pods.is_terminating(broken))


# ---------------------------------------------------------------- the GPU request


def container(name: str = "c", limits: dict | None = None, requests: dict | None = None) -> dict:
    res: dict = {}
    if limits is not None:
        res["limits"] = limits
    if requests is not None:
        res["requests"] = requests
    return {"name": name, "resources": res}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"containers": [container()]}, None),
        ({"containers": [container(limits={"cpu": "1"})]}, None),
        ({"containers": [container(limits={"nvidia.com/gpu": "0"})]}, None),
        ({"containers": [container(limits={"nvidia.com/gpu": "1"})]}, (ContainerRequest(1),)),
        (
            {"containers": [container(limits={"nvidia.com/gpu": "2", "nvidia.com/gpumem": "8k"})]},
            (ContainerRequest(2, 8000),),
        ),
        (
            {
                "containers": [
                    container(limits={"nvidia.com/gpu": "1"}, requests={"nvidia.com/gpumem": "4000"})
                ]
            },
            (ContainerRequest(1, 4000),),
        ),
        (
            {"containers": [container(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"})]},
            (ContainerRequest(1, None, 50),),
        ),
        (
            {
                "containers": [container("app", limits={"nvidia.com/gpu": "1"})],
                "initContainers": [
                    container("init", limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "5000"})
                ],
            },
            (ContainerRequest(1, 5000), ContainerRequest(1)),  # init containers first, as HAMi orders them
        ),
        (
            {"containers": [container(limits={"nvidia.com/gpu": 1}), "not a container"]},
            (ContainerRequest(1),),
        ),
    ],
)
def test_a_pod_asks_for_the_gpus_its_containers_name_in_hami_order(spec, expected):
    request = pods.gpu_request(pod(**spec), NAMES)
    assert (request.containers if request else None) == expected


def test_a_gpu_request_carries_the_pods_scheduling_annotations_and_name():
    p = pod(containers=[container(limits={"nvidia.com/gpu": "1"})])
    p["metadata"]["annotations"] = {ann.PROFILE_PREFERENCE: "3g, 2g", ann.USE_GPU_TYPE: "A100"}
    request = pods.gpu_request(p, NAMES)
    assert request is not None
    assert request.preference == ("3g", "2g") and request.use_types == ("a100",)
    assert request.name == "team/p"
    assert request.devices() == [(0, 0, None)]


def test_a_percentage_request_asks_for_that_share_of_each_gpu():
    p = pod(containers=[container(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "25"})])
    request = pods.gpu_request(p, NAMES)
    assert request is not None and request.devices() == [(0, 0, Percent(25))]


@pytest.mark.parametrize(
    ("spec", "annotations", "names"),
    [
        ({"containers": [container("main", limits={"nvidia.com/gpu": "one"})]}, {}, "container main"),
        ({"containers": [{"resources": {"limits": {"nvidia.com/gpu": "-1"}}}]}, {}, "containers[0]"),
        (
            {"initContainers": [{"name": 7, "resources": {"limits": {"nvidia.com/gpumem": "1.5"}}}]},
            {},
            "initContainers[0]",
        ),
        ({"containers": [container(limits={"nvidia.com/gpu": "129"})]}, {}, "128"),
        (
            {"containers": [container(f"c{i}", limits={"nvidia.com/gpu": "100"}) for i in range(2)]},
            {},
            "together",
        ),
        (
            {"containers": [container(limits={"nvidia.com/gpu": "1"})]},
            {ann.USE_GPU_UUID: "GPU-x," * 2000},
            ann.USE_GPU_UUID,
        ),
    ],
)
def test_a_request_that_cannot_be_read_or_never_fits_is_refused_naming_what_to_fix(spec, annotations, names):
    p = pod(**spec)
    p["metadata"]["annotations"] = annotations
    with pytest.raises(RequestError, match=names.replace("[", r"\[")):
        pods.gpu_request(p, NAMES)


@pytest.mark.parametrize(
    ("c", "expected"),
    [
        (container(limits={"nvidia.com/gpu": "0"}), True),  # named, even at 0: admission routes it
        (container(requests={"nvidia.com/gpumem": "1000"}), True),
        (container(limits={"nvidia.com/gpumem-percentage": "50"}), True),
        (container(limits={"cpu": "1", "nvidia.com/gpucores": "30"}), False),
        ({"name": "c", "resources": {"limits": ["nvidia.com/gpu"]}}, False),
        ({"name": "c", "resources": "nvidia.com/gpu"}, False),
        ({"name": "c"}, False),
    ],
)
def test_a_container_names_a_gpu_when_any_gpu_resource_appears_in_its_limits_or_requests(c, expected):
    assert pods.names_gpu(c, NAMES) is expected


def test_containers_are_listed_init_first_with_their_field_and_index_and_junk_skipped():
    p = pod(containers=[{"name": "a"}, 3, {"name": "b"}], initContainers=[{"name": "i"}])
    assert [(k, i, pods.container_label(k, i, c)) for k, i, c in pods.containers(p)] == [
        ("initContainers", 0, "i"),
        ("containers", 0, "a"),
        ("containers", 2, "b"),
    ]
    assert pods.containers({"spec": {"containers": "nope"}}) == []


# ---------------------------------------------------------------- the reservation

ALLOC = (
    '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.10gb","placement":{"start":3,"size":1}},'
    '{"containerIndex":1,"deviceIndex":0,"gpuUUID":"GPU-b","profile":"3g.40gb","placement":{"start":0,"size":4},'
    '"migUUID":"MIG-1","gpuInstanceID":1,"computeInstanceID":0}]'
)


def test_a_reservation_reads_node_phase_allocations_and_devices_from_hamis_annotations():
    r = pods.PodRecord(
        {
            ann.VGPU_NODE: "n1",
            ann.BIND_PHASE: ann.BIND_PHASE_ALLOCATING,
            ann.MIG_ALLOCATIONS: ALLOC,
            ann.DEVICES_TO_ALLOCATE: "GPU-a,NVIDIA,10000,0:;GPU-b,NVIDIA,40000,0:;",
            ann.DEVICES_ALLOCATED: "GPU-a,NVIDIA,10000,0:;GPU-b,NVIDIA,40000,0:;",
        }
    )
    assert (r.node, r.bind_phase) == ("n1", ann.BIND_PHASE_ALLOCATING)
    assert [a.gpuUUID for a in r.allocations] == ["GPU-a", "GPU-b"]
    assert r.holds_instance
    assert [[d.uuid for d in c] for c in r.allocated] == [["GPU-a"], ["GPU-b"]]
    assert r.next_container() == (0, [ContainerDevice("GPU-a", "NVIDIA", 10000, 0)])
    assert r.left_after(0) and r.left_after(1)  # the other container still has its device


def test_a_pod_without_a_reservation_has_nothing_to_allocate_and_holds_no_instance():
    r = pods.PodRecord({})
    assert (r.node, r.bind_phase, r.allocations, r.allocated, r.to_allocate) == ("", "", (), (), ())
    assert r.next_container() is None and not r.holds_instance and r.drained(0) == ""


@pytest.mark.parametrize(
    "text",
    [
        "GPU-a,NVIDIA,1,0:;",
        "GPU-a,NVIDIA,1,0:;GPU-b,NVIDIA,2,0:GPU-c,NVIDIA,3,0:;",
        ";GPU-b,NVIDIA,2,0:;",
        "GPU-a,NVIDIA,1,0:;GPU-b,NVIDIA,2,0:",
        ";",
        ";;",
    ],
)
def test_draining_a_container_writes_what_hami_writes_and_leaves_the_rest_to_allocate(text):
    r = pods.PodRecord({ann.DEVICES_TO_ALLOCATE: text})
    assert [list(c) for c in r.to_allocate] == decode_devices(text)
    for index in range(len(r.to_allocate) + 1):
        drained = r.drained(index)
        assert drained == drain_container(split_devices(text), index)
        assert r.left_after(index) is any(decode_devices(drained))


def test_each_annotation_is_decoded_once_per_copy_of_the_pod():
    r = pods.PodRecord({ann.MIG_ALLOCATIONS: ALLOC, ann.DEVICES_TO_ALLOCATE: "GPU-a,NVIDIA,1,0:;"})
    first = (r.allocations, r.to_allocate)
    assert (r.allocations, r.to_allocate) == first
    assert r.allocations is first[0] and r.to_allocate is first[1]


@pytest.mark.parametrize(
    ("annotations", "read"),
    [
        ({ann.MIG_ALLOCATIONS: "not json"}, "allocations"),
        ({ann.MIG_ALLOCATIONS: '[{"containerIndex":0}]'}, "holds_instance"),
        ({ann.DEVICES_TO_ALLOCATE: "GPU-a,NVIDIA:;"}, "to_allocate"),
        ({ann.DEVICES_ALLOCATED: "GPU-a,NVIDIA,x,0:;"}, "allocated"),
    ],
)
def test_an_unreadable_reservation_annotation_raises_naming_it(annotations, read):
    r = pods.PodRecord(annotations)
    with pytest.raises(AnnotationError, match=next(iter(annotations))):
        getattr(r, read)
