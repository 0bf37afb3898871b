"""The pod's request, read once for its filter and its bind, is never read from an older copy of the
pod or under resource names the device config no longer uses."""

from __future__ import annotations

import copy

import pytest
from webhooks_testkit import gpu_pod

from mig.allowlist import ResourceNames
from webhooks.extender import BadArgs
from webhooks.filter import PodReadings


def test_a_changed_copy_of_the_pod_is_read_again():
    readings = PodReadings()
    first = gpu_pod("p", memory=8000)
    _, request = readings.read(first, ResourceNames(), "Pod")
    assert request is not None
    changed = copy.deepcopy(first)
    del changed["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
    del changed["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"]
    assert readings.read(changed, ResourceNames(), "Pod")[1] is None
    assert readings.read(first, ResourceNames(), "Pod")[1] == request


def test_the_same_copy_is_read_again_when_the_device_config_names_other_resources():
    readings = PodReadings()
    pod = gpu_pod("p", memory=8000)
    assert readings.read(pod, ResourceNames(), "Pod")[1] is not None
    renamed = ResourceNames(count="example.com/gpu", memory="example.com/gpumem")
    assert readings.read(pod, renamed, "Pod")[1] is None  # asks for none of the renamed resources


def test_a_pod_with_a_wrong_field_type_is_refused_each_time_it_is_read():
    readings = PodReadings()
    pod = gpu_pod("p")
    pod["spec"]["containers"][0]["resources"]["limits"] = ["not", "an", "object"]
    for _ in range(2):
        with pytest.raises(BadArgs, match="limits"):
            readings.read(pod, ResourceNames(), "Pod")


def test_only_the_last_copies_read_are_kept():
    readings = PodReadings(size=4)
    pods = [gpu_pod(f"p{i}") for i in range(10)]
    for pod in pods:
        readings.read(pod, ResourceNames(), "Pod")
    assert len(readings._read) == 4
