"""The rendered chart working with the rest of the system: its certificate hook jobs against the
simulated API server, and its KubeSchedulerConfiguration driving the simulated kube-scheduler
over verified HTTPS to an extender that serves the hook's certificate through certs.reload."""

from __future__ import annotations

import base64
import socket

import kubernetes
import pytest
import yaml
from chart_testkit import NAMESPACE, container, env, of_kind, one, render, scheduler_config
from sim.scheduler import Scheduler, parse
from sim.scheduler.extender import Extender, ExtenderError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from tls_server_testkit import RunningServer
from waiting_testkit import wait_for

from certs.authority import make_ca, utcnow
from certs.main import main as certs_main
from certs.reload import SecretSource, TLSReloader

GPU_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "canary", "namespace": "default"},
    "spec": {
        "schedulerName": "dynmig-scheduler",
        "containers": [
            {"name": "c", "image": "cuda", "resources": {"limits": {"nvidia.com/gpumem": "8000"}}}
        ],
    },
}
NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "gpu-node-1"},
    "spec": {},
    "status": {"conditions": [{"type": "Ready", "status": "True"}]},
}


def run_hook_job(apiserver, job: dict) -> int:
    """Run a rendered hook Job's `dynmig certs ...` command against the simulated API server."""
    args = [a for a in container(job, "certs")["args"][1:] if a != "--in-cluster"]
    return certs_main([*args, "--kubeconfig", str(apiserver.kubeconfig("certs"))])


def hook_jobs(docs) -> dict[str, dict]:
    return {
        j["metadata"]["annotations"]["helm.sh/hook"]: j
        for j in of_kind(docs, "Job")
        if j["metadata"]["labels"]["app.kubernetes.io/component"] == "certs"
    }


@pytest.fixture
def certs_made(apiserver):
    """The chart's pre-install hook has run: the certificate Secrets exist (no webhooks yet)."""
    docs = render("1.35")
    apiserver.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    assert run_hook_job(apiserver, hook_jobs(docs)["pre-install,pre-upgrade"]) == 0
    return apiserver, docs


@pytest.fixture
def installed(certs_made):
    """Then Helm creates the webhook configurations, and the post-install hook injects the CA."""
    apiserver, docs = certs_made
    jobs = hook_jobs(docs)
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        apiserver.create(one(docs, kind))
    assert run_hook_job(apiserver, jobs["post-install,post-upgrade"]) == 0
    return apiserver, docs


def test_the_chart_hook_jobs_fill_the_ca_bundle_of_every_rendered_webhook(installed):
    apiserver, docs = installed
    secret_name = env(container(one(docs, "Deployment"), "server"), "DYNMIG_TLS_SECRET")
    secret = apiserver.get("secrets", secret_name, NAMESPACE)
    assert secret["type"] == "kubernetes.io/tls"
    ca = base64.b64decode(secret["data"]["ca.crt"])
    for plural, kind in (
        ("mutatingwebhookconfigurations", "MutatingWebhookConfiguration"),
        ("validatingwebhookconfigurations", "ValidatingWebhookConfiguration"),
    ):
        live = apiserver.get(plural, one(docs, kind)["metadata"]["name"])
        assert [base64.b64decode(w["clientConfig"]["caBundle"]) for w in live["webhooks"]] == [ca] * len(
            live["webhooks"]
        )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def extender_app(apiserver, seen: list) -> Starlette:
    core = kubernetes.client.CoreV1Api(apiserver.api_client("scheduler"))

    async def filter_(request: Request):
        args = await request.json()
        seen.append(("filter", args))
        return JSONResponse({"NodeNames": args["NodeNames"], "FailedNodes": {}, "Error": ""})

    def bind(args: dict) -> None:
        body = {
            "metadata": {"name": args["PodName"], "uid": args["PodUID"]},
            "target": {"kind": "Node", "name": args["Node"]},
        }
        core.create_namespaced_pod_binding(
            args["PodName"], args["PodNamespace"], body, _preload_content=False
        )

    async def bind_(request: Request):
        args = await request.json()
        seen.append(("bind", args))
        await run_in_threadpool(bind, args)
        return JSONResponse({"Error": ""})

    return Starlette(
        routes=[Route("/filter", filter_, methods=["POST"]), Route("/bind", bind_, methods=["POST"])]
    )


def test_the_rendered_scheduler_configuration_drives_kube_scheduler_over_verified_https(certs_made, tmp_path):
    apiserver, _ = certs_made
    port = free_port()
    docs = render("1.35", f"server.extenderPort={port}")
    server_args = container(one(docs, "Deployment"), "server")
    secret_name = env(server_args, "DYNMIG_TLS_SECRET")
    # what kubelet mounts at the caFile path: ca.crt of the serving Secret
    config = scheduler_config(docs)
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(base64.b64decode(apiserver.get("secrets", secret_name, NAMESPACE)["data"]["ca.crt"]))
    config["extenders"][0]["tlsConfig"]["caFile"] = str(ca_file)

    core = kubernetes.client.CoreV1Api(apiserver.api_client("scheduler"))
    reloader = TLSReloader(SecretSource(core, NAMESPACE, secret_name, watch_timeout=5))
    reloader.start()
    wait_for(reloader.ready)
    seen: list = []
    server = RunningServer(reloader, app=extender_app(apiserver, seen), port=port)
    server.start()
    apiserver.create(NODE)
    scheduler = Scheduler(
        parse(config), apiserver.api_client("kube-scheduler"), initial_backoff=0.05, max_backoff=0.2, seed=1
    ).start()
    try:
        assert scheduler.wait_synced()
        admin = kubernetes.client.CoreV1Api(apiserver.api_client("admin"))
        admin.create_namespaced_pod("default", GPU_POD)
        wait_for(lambda: admin.read_namespaced_pod("canary", "default").spec.node_name == "gpu-node-1")
        (verb, filter_args), (bind_verb, bind_args) = seen[0], seen[-1]
        assert (
            verb == "filter" and filter_args["Nodes"] is None and filter_args["NodeNames"] == ["gpu-node-1"]
        )
        assert bind_verb == "bind" and bind_args["Node"] == "gpu-node-1"

        # verification is real: a kube-scheduler trusting another CA cannot reach the extender
        other = yaml.safe_load(yaml.safe_dump(config))
        foreign = tmp_path / "foreign.crt"
        foreign.write_bytes(make_ca(utcnow()).cert_pem())
        other["extenders"][0]["tlsConfig"]["caFile"] = str(foreign)
        with pytest.raises(ExtenderError, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
            Extender(parse(other).extenders[0]).filter(GPU_POD, [NODE])
    finally:
        scheduler.stop()
        server.stop()
        reloader.stop()
