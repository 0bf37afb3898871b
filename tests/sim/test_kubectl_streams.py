"""kubectl's container streams (exec, attach, port-forward, debug) against the simulation, which runs
no container runtime: each ends at once with a message that says so, never a hang or a crash."""

from __future__ import annotations

import pytest
from kubernetes import client
from sim.apiserver.errors import no_route

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "one"},
    "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
}


@pytest.fixture
def pod(apiserver):
    apiserver.create(POD)
    core = client.CoreV1Api(apiserver.api_client("admin"))
    core.patch_namespaced_pod_status("one", "default", {"status": {"phase": "Running"}})
    return "one"


@pytest.mark.parametrize(
    ("args", "what"),
    [
        (("exec", "one", "--", "nvidia-smi", "-L"), "pods/exec"),
        (("attach", "one"), "pods/attach"),
        (("port-forward", "pod/one", "0:80"), "pods/portforward"),
    ],
)
def test_a_stream_into_a_container_is_refused_naming_what_is_not_simulated(pod, run, args, what):
    error = run(*args, ok=False)
    assert f"{what} is not simulated" in error
    assert "kubectl logs one" in error


def test_kubectl_debug_says_ephemeral_containers_are_off_instead_of_crashing(pod, run):
    error = run("debug", "one", "--image=busybox", "--profile=general", ok=False)
    assert "ephemeral containers are disabled for this cluster" in error
    assert "panic" not in error


def test_a_path_the_server_does_not_serve_is_a_404_with_empty_details(apiserver, run):
    error = run("get", "--raw", "/api/v1/namespaces/default/pods/one/nope", ok=False)
    assert "the server could not find the requested resource" in error
    assert no_route().status()["details"] == {}  # what kubectl debug tells a missing route by
