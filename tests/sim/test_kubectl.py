"""kubectl 1.35 against the simulated API server: the verbs operators and the lab use."""

from __future__ import annotations

import json
import subprocess
import threading

import pytest
from kubernetes import client
from waiting_testkit import wait_for

POD = """apiVersion: v1
kind: Pod
metadata:
  name: trainer
  labels: {app: train}
spec:
  containers: [{name: c, image: busybox, resources: {limits: {nvidia.com/gpumem: "8000"}}}]
"""


@pytest.fixture
def start(apiserver, kubectl, tmp_path):
    """start(*args) -> a running kubectl (stdout/stderr to pipes); killed at teardown if still running."""
    kubeconfig = str(apiserver.kubeconfig("admin"))
    procs: list[subprocess.Popen] = []

    def kubectl_start(*args: str) -> subprocess.Popen:
        proc = subprocess.Popen(
            [kubectl, "--kubeconfig", kubeconfig, "--cache-dir", str(tmp_path / "cache"), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        return proc

    yield kubectl_start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


@pytest.fixture
def fake_kubelet(apiserver):
    """Plays the kubelet's part of a graceful deletion: a pod with a deletionTimestamp is deleted
    with grace period 0 (its containers have stopped)."""
    core = client.CoreV1Api(apiserver.api_client("kubelet"))
    done = threading.Event()

    def run() -> None:
        while not done.wait(0.1):
            for p in core.list_pod_for_all_namespaces().items:
                if p.metadata.deletion_timestamp:
                    core.delete_namespaced_pod(p.metadata.name, p.metadata.namespace, grace_period_seconds=0)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield
    done.set()
    thread.join(5)


def _ready(apiserver, name: str) -> None:
    core = client.CoreV1Api(apiserver.api_client("kubelet"))
    containers = [c["name"] for c in apiserver.get("pods", name, "default")["spec"]["containers"]]
    core.patch_namespaced_pod_status(
        name,
        "default",
        {
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [
                    {
                        "name": c,
                        "ready": True,
                        "restartCount": 0,
                        "image": "busybox",
                        "imageID": "",
                        "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                    }
                    for c in containers
                ],
            }
        },
    )


BOUND_POD = """apiVersion: v1
kind: Pod
metadata: {name: worker}
spec:
  nodeName: gpu-node-1
  terminationGracePeriodSeconds: 3600
  containers: [{name: c, image: busybox}]
"""


def test_kubectl_wait_for_ready_returns_when_the_pod_turns_ready(run, start, apiserver, tmp_path):
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(BOUND_POD)
    run("create", "-f", str(manifest))
    waiting = start("wait", "--for=condition=Ready", "pod/worker", "--timeout=50s")
    _ready(apiserver, "worker")
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, err
    assert "pod/worker condition met" in out


@pytest.mark.parametrize("watch_delay", [0.0, 1.0], ids=["prompt", "slow-watch"])
def test_kubectl_get_watch_shows_the_phase_change(run, start, apiserver, tmp_path, watch_delay):
    """slow-watch: kubectl's watch request is served a second late, as on a loaded machine."""
    apiserver.faults.add_latency(watch_delay, verb="watch", resource="pods")
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(BOUND_POD)
    run("create", "-f", str(manifest))
    watchers = apiserver.open_watches("pods")
    watching = start("get", "pod", "worker", "-w")
    killer = threading.Timer(60, watching.kill)  # a watch that never shows it fails, not hangs
    killer.start()
    try:
        header, first = watching.stdout.readline().split(), watching.stdout.readline().split()
        assert header == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
        assert first[:4] == ["worker", "0/1", "Pending", "0"]
        # kubectl prints the pod it GETs, then watches that one pod from resourceVersion 0 and
        # hides the watch's first (synthetic ADDED) event: a change that lands before its watch
        # request is served is never printed, against any API server. Change it once the watch is on.
        wait_for(lambda: apiserver.open_watches("pods") > watchers)
        _ready(apiserver, "worker")
        seen = []
        for line in watching.stdout:  # ends at EOF if the killer fires
            seen.append(line.split()[:4])
            if seen[-1] == ["worker", "1/1", "Running", "0"]:
                break
        assert seen and seen[-1] == ["worker", "1/1", "Running", "0"], seen
    finally:
        killer.cancel()


def test_kubectl_delete_of_a_bound_pod_returns_once_the_kubelet_confirms(
    run, fake_kubelet, apiserver, tmp_path
):
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(BOUND_POD)
    run("create", "-f", str(manifest))
    # The grace period is an hour: only the kubelet's grace-0 delete can end this within the timeout.
    assert 'pod "worker" deleted' in run("delete", "pod", "worker")
    assert apiserver.get("pods", "worker", "default") is None


def test_kubectl_creates_annotates_labels_reads_and_deletes_a_pod(run, tmp_path, apiserver):
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(POD)
    assert "pod/trainer created" in run("create", "-f", str(manifest))
    run("annotate", "pod", "trainer", "nvidia.com/mig-profile-preference=1g.24gb")
    run("label", "pod", "trainer", "tier=gpu")
    pod = json.loads(run("get", "pod", "trainer", "-o", "json"))
    assert pod["metadata"]["annotations"] == {"nvidia.com/mig-profile-preference": "1g.24gb"}
    assert pod["metadata"]["labels"] == {"app": "train", "tier": "gpu"}
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpumem": "8k"}  # canonical
    table = run("get", "pods", "-l", "tier=gpu")
    assert table.split("\n")[0].split()[0] == "NAME" and "trainer" in table
    run("delete", "pod", "trainer")
    assert apiserver.get("pods", "trainer", "default") is None


def test_kubectl_lists_nodes_and_namespaces_as_tables(run, apiserver):
    apiserver.create(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "gpu-node-1"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
    )
    nodes = run("get", "nodes")
    assert "gpu-node-1" in nodes and "Ready" in nodes
    listed = json.loads(run("get", "namespaces", "-o", "json"))
    assert {"default", "kube-system"} <= {n["metadata"]["name"] for n in listed["items"]}


def test_kubectl_creates_a_namespace_configmap_secret_and_serviceaccount_with_its_protobuf_bodies(
    run, apiserver
):
    assert "namespace/ml created" in run("create", "namespace", "ml")
    assert apiserver.get("namespaces", "ml")["status"]["phase"] == "Active"
    run("create", "configmap", "settings", "-n", "ml", "--from-literal=profile=1g.10gb")
    run("create", "secret", "generic", "token", "-n", "ml", "--from-literal=key=s3cret")
    run("create", "serviceaccount", "trainer", "-n", "ml")
    assert apiserver.get("configmaps", "settings", "ml")["data"] == {"profile": "1g.10gb"}
    assert apiserver.get("secrets", "token", "ml")["data"] == {"key": "czNjcmV0"}
    assert apiserver.get("serviceaccounts", "trainer", "ml") is not None


TYPO_POD = """apiVersion: v1
kind: Pod
metadata: {name: typo}
spec:
  containers: [{name: c, imagee: busybox}]
"""


def test_kubectl_create_refuses_a_typoed_field_by_default_naming_it(run, apiserver):
    err = run("create", "-f", "-", stdin=TYPO_POD, ok=False)
    assert 'strict decoding error: unknown field "spec.containers[0].imagee"' in err
    assert apiserver.get("pods", "typo", "default") is None


def test_kubectl_create_with_validate_warn_creates_and_prints_the_unknown_field(
    run, apiserver, kubectl, tmp_path
):
    out = subprocess.run(
        [kubectl, "--kubeconfig", str(apiserver.kubeconfig("admin")), "create", "-f", "-", "--validate=warn"],
        input=TYPO_POD,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert 'Warning: unknown field "spec.containers[0].imagee"' in out.stderr
    assert apiserver.get("pods", "typo", "default") is not None


def test_kubectl_explain_reads_the_served_schema(run):
    out = run("explain", "pod.spec.containers.resources")
    assert "FIELD: resources <ResourceRequirements>" in out and "limits" in out


DEPLOYMENT = """apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: c, image: busybox}]
"""


def test_kubectl_apply_creates_then_updates_a_deployment(run, apiserver):
    assert "deployment.apps/web created" in run("apply", "-f", "-", stdin=DEPLOYMENT)
    run("apply", "-f", "-", stdin=DEPLOYMENT.replace("image: busybox", "image: busybox:2"))
    stored = apiserver.get("deployments", "web", "default")
    assert [c["image"] for c in stored["spec"]["template"]["spec"]["containers"]] == ["busybox:2"]


def test_kubectl_delete_namespace_waits_for_its_pods_to_terminate_and_returns(run, fake_kubelet, apiserver):
    run("create", "namespace", "ml")
    run("create", "-n", "ml", "-f", "-", stdin=BOUND_POD)
    assert 'namespace "ml" deleted' in run("delete", "namespace", "ml")
    assert apiserver.get("namespaces", "ml") is None and apiserver.get("pods", "worker", "ml") is None


def test_kubectl_create_in_a_terminating_namespace_is_refused_with_the_reason(run, apiserver):
    apiserver.registry.reap_after_grace = False
    run("create", "namespace", "ml")
    run("create", "-n", "ml", "-f", "-", stdin=BOUND_POD)  # keeps the namespace terminating
    run("delete", "namespace", "ml", "--wait=false")
    err = run("create", "-n", "ml", "-f", "-", stdin=TYPO_POD.replace("imagee", "image"), ok=False)
    assert "unable to create new content in namespace ml because it is being terminated" in err


def _write_log(apiserver, name: str, container: str, text: str) -> None:
    pod = apiserver.get("pods", name, "default")
    with apiserver.log_path("default", name, pod["metadata"]["uid"], container).open("a") as f:
        f.write(text)


def test_kubectl_logs_prints_what_the_kubelet_wrote_for_the_container(run, apiserver):
    run("create", "-f", "-", stdin=BOUND_POD)
    assert "is waiting to start: ContainerCreating" in run("logs", "worker", ok=False)
    _ready(apiserver, "worker")
    _write_log(apiserver, "worker", "c", "loading model\nstep 1 loss 0.9\nstep 2 loss 0.7\n")
    assert run("logs", "worker") == "loading model\nstep 1 loss 0.9\nstep 2 loss 0.7\n"
    assert run("logs", "worker", "--tail=1") == "step 2 loss 0.7\n"
    assert run("logs", "worker", "--limit-bytes=7") == "loading"


def test_kubectl_logs_follow_streams_appended_output_until_the_pod_finishes(run, start, apiserver):
    run("create", "-f", "-", stdin=BOUND_POD)
    _ready(apiserver, "worker")
    _write_log(apiserver, "worker", "c", "epoch 1\n")
    following = start("logs", "-f", "worker")
    killer = threading.Timer(60, following.kill)
    killer.start()
    try:
        assert following.stdout.readline() == "epoch 1\n"
        _write_log(apiserver, "worker", "c", "epoch 2\n")
        assert following.stdout.readline() == "epoch 2\n"
        core = client.CoreV1Api(apiserver.api_client("kubelet"))
        core.patch_namespaced_pod_status("worker", "default", {"status": {"phase": "Succeeded"}})
        assert following.wait(timeout=60) == 0
    finally:
        killer.cancel()


def test_kubectl_logs_of_a_pod_with_two_containers_names_the_one_it_shows(run, apiserver):
    two = BOUND_POD.replace(
        "containers: [{name: c, image: busybox}]",
        "containers: [{name: main, image: busybox}, {name: sidecar, image: busybox}]",
    )
    run("create", "-f", "-", stdin=two)
    _ready(apiserver, "worker")
    _write_log(apiserver, "worker", "sidecar", "sidecar up\n")
    assert run("logs", "worker", "-c", "sidecar") == "sidecar up\n"
    assert "container nope is not valid for pod worker" in run("logs", "worker", "-c", "nope", ok=False)


def test_kubectl_sees_a_round_mib_request_as_kubernetes_stores_it(run):
    run("create", "-f", "-", stdin=POD.replace('"8000"', "30000"))  # a YAML number, as users write it
    limits = run("get", "pod", "trainer", "-o", "jsonpath={.spec.containers[0].resources.limits}")
    assert json.loads(limits) == {"nvidia.com/gpumem": "30k"}


def test_kubectl_get_pods_prints_kubernetes_columns_with_wide_ones_on_request(run, apiserver):
    run("create", "-f", "-", stdin=BOUND_POD)
    assert run("get", "pods").splitlines()[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    wide = run("get", "pods", "-o", "wide").splitlines()
    assert wide[0].split()[:7] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"]
    assert wide[1].split()[6] == "gpu-node-1"
    core = client.CoreV1Api(apiserver.api_client("kubelet"))
    core.patch_namespaced_pod_status(
        "worker",
        "default",
        {
            "status": {
                "phase": "Pending",
                "containerStatuses": [
                    {
                        "name": "c",
                        "ready": False,
                        "restartCount": 2,
                        "image": "busybox",
                        "imageID": "",
                        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    }
                ],
            }
        },
    )
    assert run("get", "pods", "--no-headers").split()[:4] == ["worker", "0/1", "CrashLoopBackOff", "2"]


def test_kubectl_logs_never_reads_outside_the_log_folder(run, apiserver):
    sneaky = BOUND_POD.replace("{name: c, image: busybox}", "{name: ../../../etc, image: busybox}")
    run("create", "-f", "-", stdin=sneaky)
    _ready(apiserver, "worker")
    assert "not a valid container name" in run("logs", "worker", "-c", "../../../etc", ok=False)


def test_kubectl_create_deployment_and_service_work_with_their_protobuf_bodies(run, apiserver):
    assert "deployment.apps/web created" in run(
        "create", "deployment", "web", "--image=nginx", "--replicas=3", "--port=8080", "--", "sleep", "10"
    )
    spec = apiserver.get("deployments", "web", "default")["spec"]
    assert spec["replicas"] == 3 and spec["selector"] == {"matchLabels": {"app": "web"}}
    (container,) = spec["template"]["spec"]["containers"]
    assert (container["image"], container["command"], container["ports"]) == (
        "nginx",
        ["sleep", "10"],
        [{"containerPort": 8080, "protocol": "TCP"}],
    )
    run("create", "service", "clusterip", "web", "--tcp=80:8080")
    assert apiserver.get("services", "web", "default")["spec"]["ports"][0]["targetPort"] == 8080


def _event(name: str, reason: str, last: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": "default"},
        "involvedObject": {"kind": "Pod", "name": "trainer", "namespace": "default"},
        "reason": reason,
        "message": f"{reason} happened",
        "type": "Normal",
        "firstTimestamp": last,
        "lastTimestamp": last,
        "count": 1,
    }


def test_kubectl_get_events_sorted_by_last_timestamp_lists_them_oldest_first(run, apiserver):
    apiserver.create(_event("later", "Started", "2026-01-01T00:05:00Z"))
    apiserver.create(_event("earlier", "Scheduled", "2026-01-01T00:01:00Z"))
    table = run("get", "events", "--sort-by=.lastTimestamp")
    assert "No resources found" not in table
    assert table.index("Scheduled") < table.index("Started"), table
