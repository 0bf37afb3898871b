"""charts/dynmig: what a cluster admin relies on, checked on the rendered manifests."""

from __future__ import annotations

import json
import re
import tomllib

import pytest
import yaml
from chart_testkit import (
    CHART,
    KUBE_VERSIONS,
    NAMESPACE,
    ROOT,
    arg,
    container,
    env,
    helm,
    of_kind,
    one,
    render,
    scheduler_config,
)

from webhooks.config import parse_args
from webhooks.tls import settings_problem

MODES = ["self", "cert-manager"]
ALLOCATIONS = "hami.io/vgpu-mig-allocations"


def test_helm_lint_strict_passes():
    done = helm("lint", "--strict", str(CHART))
    assert done.returncode == 0, done.stdout + done.stderr


def test_chart_version_app_version_and_image_tag_equal_the_package_version():
    package = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == package
    images = {
        c["image"]
        for d in render()
        if d["kind"] in ("Deployment", "DaemonSet", "Job")
        for c in d["spec"]["template"]["spec"]["containers"]
        if "dynmig" in c["image"]
    }
    assert images == {f"ghcr.io/dynmig/dynmig:{package}"}


def test_the_charts_default_device_config_is_the_projects_default_policy():
    assert (CHART / "files" / "device-config.yaml").read_text() == (
        ROOT / "policies" / "default.yaml"
    ).read_text()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_renders_for_every_supported_kubernetes_version_with_both_webhooks(kube_version, mode):
    docs = render(kube_version, f"certs.mode={mode}")
    mutating = one(docs, "MutatingWebhookConfiguration")
    validating = one(docs, "ValidatingWebhookConfiguration")
    assert [w["rules"][0]["operations"] for w in mutating["webhooks"]] == [["CREATE"]]
    assert {w["name"] for w in validating["webhooks"]} == {
        "pods.validate.dynmig.io",
        "device-config.validate.dynmig.io",
    }
    minor = int(kube_version.split(".")[1])
    assert len(of_kind(docs, "ValidatingAdmissionPolicy")) == (1 if minor >= 30 else 0)
    assert len(of_kind(docs, "ValidatingAdmissionPolicyBinding")) == (1 if minor >= 30 else 0)
    image = container(one(docs, "Deployment"), "kube-scheduler")["image"]
    assert image == f"registry.k8s.io/kube-scheduler:v{kube_version}.0"
    if mode == "cert-manager":
        certificate = one(docs, "Certificate", "-serving")
        ref = f"{NAMESPACE}/{certificate['metadata']['name']}"
        for config in (mutating, validating):
            assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == ref
        # no certificate Job (the device-config check is the one hook Job of this mode)
        assert [j["metadata"]["name"] for j in of_kind(docs, "Job")] == ["dynmig-device-config-check"]
    else:
        assert of_kind(docs, "Certificate") == []


def test_the_mutating_webhook_has_the_documented_defaults_and_skips_ignored_objects():
    hook = one(render(), "MutatingWebhookConfiguration")["webhooks"][0]
    assert hook["failurePolicy"] == "Fail"  # only dynmig's pods are sent (matchConditions)
    assert hook["admissionReviewVersions"] == ["v1"] and hook["sideEffects"] == "None"
    ignore = {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}
    assert ignore in hook["namespaceSelector"]["matchExpressions"]
    assert ignore in hook["objectSelector"]["matchExpressions"]
    assert hook["clientConfig"]["service"]["path"] == "/mutate"
    assert (
        one(render("1.35", "webhook.mutating.failurePolicy=Ignore"), "MutatingWebhookConfiguration")[
            "webhooks"
        ][0]["failurePolicy"]
        == "Ignore"
    )


def controller_users(docs) -> list[str]:
    deployment, daemonset = one(docs, "Deployment"), one(docs, "DaemonSet")
    return [
        f"system:serviceaccount:{NAMESPACE}:{w['spec']['template']['spec']['serviceAccountName']}"
        for w in (deployment, daemonset)
    ]


def test_the_pod_validating_webhook_sees_only_pods_with_the_allocation_annotation_from_non_controllers():
    docs = render()
    hook = next(
        w for w in one(docs, "ValidatingWebhookConfiguration")["webhooks"] if w["name"].startswith("pods.")
    )
    assert hook["failurePolicy"] == "Fail"
    assert hook["rules"][0]["operations"] == ["CREATE", "UPDATE"]
    conditions = {c["name"]: c["expression"] for c in hook["matchConditions"]}
    carries = conditions["carries-allocation-annotation"]
    assert f"'{ALLOCATIONS}' in object.metadata.annotations" in carries
    assert f"'{ALLOCATIONS}' in oldObject.metadata.annotations" in carries
    users = re.findall(r"'(system:serviceaccount:[^']+)'", conditions["not-a-dynmig-controller"])
    assert users == controller_users(docs)
    assert "objectSelector" not in hook  # a label on the pod must not switch protection off
    configmaps = next(
        w
        for w in one(docs, "ValidatingWebhookConfiguration")["webhooks"]
        if w["name"].startswith("device-config")
    )
    device_config = one(docs, "ConfigMap", "-device-config")
    assert configmaps["objectSelector"]["matchLabels"].items() <= device_config["metadata"]["labels"].items()


def test_the_admission_policy_lets_only_the_two_controllers_touch_the_allocation_annotation():
    docs = render("1.30")
    policy = one(docs, "ValidatingAdmissionPolicy")
    binding = one(docs, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert policy["spec"]["failurePolicy"] == "Fail"
    rule = policy["spec"]["matchConstraints"]["resourceRules"][0]
    assert rule["operations"] == ["CREATE", "UPDATE"] and "pods" in rule["resources"]
    users = re.findall(r"'(system:serviceaccount:[^']+)'", policy["spec"]["matchConditions"][0]["expression"])
    assert users == controller_users(docs)
    validation = policy["spec"]["validations"][0]["expression"]
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert "oldObject != null" in variables["hasOld"]  # absent on CREATE
    assert (
        f"object.metadata.annotations['{ALLOCATIONS}'] == oldObject.metadata.annotations['{ALLOCATIONS}']"
        in validation
    )
    assert not of_kind(render("1.35", "admissionPolicy.enabled=false"), "ValidatingAdmissionPolicy")


@pytest.mark.parametrize("mode", MODES)
def test_the_extender_is_called_over_https_verified_with_the_webhook_ca(mode):
    docs = render("1.35", f"certs.mode={mode}")
    config = scheduler_config(docs)
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["profiles"] == [{"schedulerName": "dynmig-scheduler"}]
    assert config["leaderElection"]["leaderElect"] is True
    assert config["leaderElection"]["resourceNamespace"] == NAMESPACE
    (extender,) = config["extenders"]
    deployment = one(docs, "Deployment")
    server = container(deployment, "server")
    assert extender["urlPrefix"] == f"https://127.0.0.1:{arg(server, 'extender-port')}"  # loopback listener
    assert extender["enableHTTPS"] is True
    assert "insecure" not in extender["tlsConfig"]
    assert (extender["filterVerb"], extender["bindVerb"]) == ("filter", "bind")
    assert (
        extender["nodeCacheCapable"] is True and extender["weight"] == 1 and extender["httpTimeout"] == "5s"
    )
    assert extender["managedResources"] == [
        {"name": "nvidia.com/gpu", "ignoredByScheduler": True},
        {"name": "nvidia.com/gpumem", "ignoredByScheduler": True},
        {"name": "nvidia.com/gpumem-percentage", "ignoredByScheduler": True},
        {"name": "nvidia.com/gpucores", "ignoredByScheduler": True},
    ]
    # the caFile is the ca.crt of the serving Secret, mounted into the kube-scheduler container
    ca_dir, ca_name = extender["tlsConfig"]["caFile"].rsplit("/", 1)
    mount = next(
        m for m in container(deployment, "kube-scheduler")["volumeMounts"] if m["mountPath"] == ca_dir
    )
    volume = next(v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["secretName"] == env(server, "DYNMIG_TLS_SECRET")
    assert volume["secret"]["items"] == [{"key": "ca.crt", "path": ca_name}]


@pytest.mark.parametrize("mode", MODES)
def test_the_server_reads_its_certificate_from_the_secret_and_only_kube_scheduler_mounts_the_ca(
    mode, monkeypatch
):
    docs = render("1.35", f"certs.mode={mode}")
    deployment = one(docs, "Deployment")
    server, scheduler = container(deployment, "server"), container(deployment, "kube-scheduler")
    secrets = {
        v["name"]: v["secret"] for v in deployment["spec"]["template"]["spec"]["volumes"] if "secret" in v
    }
    assert [s["items"] for s in secrets.values()] == [[{"key": "ca.crt", "path": "ca.crt"}]]  # never the key
    assert not {m["name"] for m in server["volumeMounts"]} & set(secrets)
    assert {m["name"] for m in scheduler["volumeMounts"]} >= set(secrets)
    assert not [a for a in server["args"] if a.startswith(("--tls-cert", "--tls-key"))]
    # what `dynmig serve` makes of the rendered args and environment
    for item in server["env"]:
        if "value" in item:
            monkeypatch.setenv(item["name"], item["value"])
    assert server["args"][0] == "serve"
    cfg = parse_args(server["args"][1:])
    assert settings_problem(cfg) is None
    assert (cfg.cert_mode, cfg.tls_secret, cfg.tls_cert, cfg.tls_key) == (
        mode,
        env(server, "DYNMIG_TLS_SECRET"),
        "",
        "",
    )
    assert cfg.leader_elect is True and cfg.lease_name == arg(server, "lease-name")
    if mode == "self":
        assert (cfg.mutating_webhook, cfg.validating_webhook) == (
            one(docs, "MutatingWebhookConfiguration")["metadata"]["name"],
            one(docs, "ValidatingWebhookConfiguration")["metadata"]["name"],
        )


def rules_of(docs, kind):
    return [(d["metadata"]["name"], rule) for d in of_kind(docs, kind) for rule in d["rules"]]


@pytest.mark.parametrize("mode", MODES)
def test_rbac_grants_no_wildcards_and_no_secrets_cluster_wide(mode):
    docs = render("1.35", f"certs.mode={mode}")
    for kind in ("ClusterRole", "Role"):
        for name, rule in rules_of(docs, kind):
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule.get(field, []), f"{kind} {name}: wildcard {field}"
    for name, rule in rules_of(docs, "ClusterRole"):
        assert "secrets" not in rule["resources"], f"ClusterRole {name} grants secrets cluster-wide"
        if any(r.endswith("webhookconfigurations") for r in rule["resources"]):
            assert rule.get("resourceNames"), (
                f"ClusterRole {name}: webhook configurations without resourceNames"
            )
            assert set(rule["verbs"]) <= {"get", "patch"}
    for name, rule in rules_of(docs, "Role"):
        if "secrets" in rule["resources"] and rule["verbs"] != ["create"]:
            assert rule.get("resourceNames"), f"Role {name}: secrets without resourceNames"
    for binding in of_kind(docs, "ClusterRoleBinding"):
        assert binding["roleRef"]["name"] not in ("cluster-admin", "admin", "edit")


def cluster_grants(docs, role_suffix: str) -> dict[str, set[str]]:
    role = one(docs, "ClusterRole", role_suffix)
    grants: dict[str, set[str]] = {}
    for rule in role["rules"]:
        for resource in rule["resources"]:
            grants.setdefault(resource, set()).update(rule["verbs"])
    return grants


def test_each_component_gets_exactly_the_cluster_permissions_it_needs():
    docs = render()
    assert cluster_grants(docs, "-server") == {
        "pods": {"get", "list", "watch", "patch"},
        "pods/binding": {"create"},
        "nodes": {"get", "list", "watch", "patch"},
        "events": {"create", "patch"},
        "poddisruptionbudgets": {"list"},
        "mutatingwebhookconfigurations": {"get", "patch"},
        "validatingwebhookconfigurations": {"get", "patch"},
    }
    assert cluster_grants(docs, "-device-plugin") == {
        "pods": {"get", "list", "watch", "patch"},
        "nodes": {"get", "patch"},
        "events": {"create", "patch"},  # a repeated event is the same object, its count patched
    }
    scheduler_sa = one(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    upstream = {
        b["roleRef"]["name"]
        for b in of_kind(docs, "ClusterRoleBinding")
        if b["roleRef"]["name"].startswith("system:")
    }
    assert upstream == {"system:kube-scheduler", "system:volume-scheduler"}
    for b in of_kind(docs, "ClusterRoleBinding"):
        if b["roleRef"]["name"].startswith("system:"):
            assert b["subjects"] == [{"kind": "ServiceAccount", "name": scheduler_sa, "namespace": NAMESPACE}]


def test_defrag_eviction_is_off_by_default_and_turning_it_on_grants_only_the_eviction_subresource():
    docs = render()
    cfg = parse_args(
        [],
        {k["name"]: k["value"] for k in container(one(docs, "Deployment"), "server")["env"] if "value" in k},
    )
    assert cfg.defrag_evict is False and cfg.defrag_move_only is True
    assert "pods/eviction" not in cluster_grants(docs, "-server")
    on = render("1.35", "server.defrag.evict=true", "server.defrag.evictionsPerMinute=3")
    server = container(one(on, "Deployment"), "server")
    cfg = parse_args([], {k["name"]: k["value"] for k in server["env"] if "value" in k})
    assert (cfg.defrag_evict, cfg.defrag_evictions_per_minute, cfg.defrag_interval) == (True, 3, 10.0)
    assert cfg.defrag_move_only is True  # evicting moves pods; stranding one is asked for explicitly
    strands = render("1.35", "server.defrag.evict=true", "server.defrag.moveOnly=false")
    server = container(one(strands, "Deployment"), "server")
    assert (
        parse_args([], {k["name"]: k["value"] for k in server["env"] if "value" in k}).defrag_move_only
        is False
    )
    assert cluster_grants(on, "-server")["pods/eviction"] == {"create"}
    assert "delete" not in cluster_grants(on, "-server")["pods"]  # evictions only, never a plain delete


def test_the_server_may_touch_only_its_own_secrets_and_leases():
    docs = render()
    role = one(docs, "Role", "-server")
    server = container(one(docs, "Deployment"), "server")
    secrets = next(r for r in role["rules"] if r["resources"] == ["secrets"])
    assert set(secrets["resourceNames"]) == {
        env(server, "DYNMIG_TLS_SECRET"),
        env(server, "DYNMIG_CA_SECRET"),
    }
    assert "create" not in secrets["verbs"]
    leases = next(r for r in role["rules"] if r["resources"] == ["leases"] and "resourceNames" in r)
    config = scheduler_config(docs)
    assert set(leases["resourceNames"]) == {
        arg(server, "lease-name"),
        config["leaderElection"]["resourceName"],
    }
    cm_role = one(render("1.35", "certs.mode=cert-manager"), "Role", "-server")
    cm_secrets = next(r for r in cm_role["rules"] if r["resources"] == ["secrets"])
    assert set(cm_secrets["verbs"]) == {"get", "list", "watch"}


def test_every_workload_rolls_when_one_of_its_configmaps_changes():
    base = render()
    changed = render(
        "1.35", "deviceConfig.allowlist[0].models[0]=A30", "deviceConfig.allowlist[0].profiles[0]=1g.6gb"
    )
    for kind in ("Deployment", "DaemonSet"):
        workload = one(base, kind)
        annotations = workload["spec"]["template"]["metadata"]["annotations"]
        mounted = {
            v["configMap"]["name"]
            for v in workload["spec"]["template"]["spec"]["volumes"]
            if "configMap" in v
        }
        checksums = {k for k in annotations if k.startswith("checksum/")}
        assert len(checksums) == len(mounted) >= 2, (kind, checksums, mounted)
        after = one(changed, kind)["spec"]["template"]["metadata"]["annotations"]
        assert after["checksum/device-config"] != annotations["checksum/device-config"]
    assert (
        one(changed, "Deployment")["spec"]["template"]["metadata"]["annotations"]["checksum/scheduler-config"]
        == one(base, "Deployment")["spec"]["template"]["metadata"]["annotations"]["checksum/scheduler-config"]
    )


def test_a_user_allowlist_replaces_only_the_allowlist_of_the_default_device_config():
    docs = render(
        "1.35",
        "deviceConfig.allowlist[0].models[0]=H100",
        "deviceConfig.allowlist[0].profiles[0]=1g.10gb",
        "deviceConfig.allowlist[0].profiles[1]=7g.80gb",
    )
    config = yaml.safe_load(one(docs, "ConfigMap", "-device-config")["data"]["device-config.yaml"])
    assert config["nvidia"]["migProfileAllowlist"] == [
        {"models": ["H100"], "profiles": ["1g.10gb", "7g.80gb"]}
    ]
    default = yaml.safe_load((ROOT / "policies" / "default.yaml").read_text())
    assert config["nvidia"]["resourceMemoryName"] == default["nvidia"]["resourceMemoryName"]
    assert (
        yaml.safe_load(one(render(), "ConfigMap", "-device-config")["data"]["device-config.yaml"]) == default
    )


def test_an_allowlist_entry_may_switch_mig_off_on_its_models_only_by_saying_so():
    docs = render(
        "1.35",
        "deviceConfig.allowlist[0].models[0]=H100",
        "deviceConfig.allowlist[0].profiles[0]=1g.10gb",
        "deviceConfig.allowlist[1].models[0]=NVIDIA",
        "deviceConfig.allowlist[1].migOff=true",
    )
    config = yaml.safe_load(one(docs, "ConfigMap", "-device-config")["data"]["device-config.yaml"])
    assert config["nvidia"]["migProfileAllowlist"][1] == {"models": ["NVIDIA"], "migOff": True}
    for silent in ("deviceConfig.allowlist[0].migOff=false", "deviceConfig.allowlist[0].profiles=null"):
        done = helm(
            "template",
            "dynmig",
            str(CHART),
            "--set",
            "deviceConfig.allowlist[0].models[0]=H100",
            "--set",
            silent,
        )
        assert done.returncode != 0 and "/deviceConfig/allowlist/0" in done.stderr, (silent, done.stderr)


def test_the_device_plugin_reads_kubelets_pod_resources_unless_told_to_keep_hamis_lock():
    plugin = container(one(render(), "DaemonSet", "-device-plugin"), "device-plugin")
    socket = "/var/lib/kubelet/pod-resources/kubelet.sock"
    assert arg(plugin, "pod-resources-socket") == socket
    assert {
        "name": "pod-resources",
        "mountPath": "/var/lib/kubelet/pod-resources",
        "readOnly": True,
    } in plugin["volumeMounts"]
    off = container(
        one(render("1.35", "devicePlugin.podResources.enabled=false"), "DaemonSet", "-device-plugin"),
        "device-plugin",
    )
    assert not [a for a in off["args"] if a.startswith("--pod-resources-socket")]
    assert "pod-resources" not in {m["name"] for m in off["volumeMounts"]}


def test_the_install_first_checks_the_device_config_it_ships_as_serve_will():
    docs = render(
        "1.35", "deviceConfig.allowlist[0].models[0]=H100", "deviceConfig.allowlist[0].profiles[0]=1g.10gb"
    )
    job = one(docs, "Job", "-device-config-check")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    check = container(job, "check")
    assert check["args"] == ["policy", "check", "--from-env", "DYNMIG_DEVICE_CONFIG_TEXT"]
    strict = container(
        one(render("1.35", "deviceConfig.strict=true"), "Job", "-device-config-check"), "check"
    )
    assert strict["args"] == ["policy", "check", "--strict", "--from-env", "DYNMIG_DEVICE_CONFIG_TEXT"]
    shipped = one(docs, "ConfigMap", "-device-config")["data"]["device-config.yaml"]
    assert env(check, "DYNMIG_DEVICE_CONFIG_TEXT").strip() == shipped.strip()
    assert not [
        d
        for d in render("1.35", "deviceConfig.check=false")
        if d["kind"] == "Job" and "check" in d["metadata"]["name"]
    ]


def test_the_node_config_lists_mig_nodes_and_their_excluded_gpus():
    docs = render(
        "1.35", "devicePlugin.nodeConfig[0].name=gpu-1", "devicePlugin.nodeConfig[0].filterdevices.index[0]=3"
    )
    config = json.loads(one(docs, "ConfigMap", "-node-config")["data"]["config.json"])
    assert config == {
        "nodeconfig": [{"name": "gpu-1", "operatingmode": "mig", "filterdevices": {"uuid": [], "index": [3]}}]
    }


def test_the_device_plugin_runs_privileged_with_the_kubelet_socket_dir_and_its_node_name():
    daemonset = one(render(), "DaemonSet")
    spec = daemonset["spec"]["template"]["spec"]
    plugin = container(daemonset, "device-plugin")
    assert plugin["securityContext"]["privileged"] is True
    assert plugin["securityContext"]["runAsUser"] == 0  # the image's user is the server's non-root one
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in plugin["env"]
    host = next(v for v in spec["volumes"] if "hostPath" in v)
    assert host["hostPath"]["path"] == "/var/lib/kubelet/device-plugins"
    assert spec["nodeSelector"] == {"gpu": "on"}
    assert arg(plugin, "node-config").startswith("/etc/dynmig/node-config/")
    assert arg(plugin, "kubelet-dir") == "/var/lib/kubelet/device-plugins"


def test_the_server_is_told_who_may_write_allocations_and_which_scheduler_name_to_set():
    docs = render("1.35", "schedulerName=gpu-sched")
    server = container(one(docs, "Deployment"), "server")
    privileged = [a.split("=", 1)[1] for a in server["args"] if a.startswith("--privileged-user=")]
    assert privileged == controller_users(docs)
    assert arg(server, "scheduler-name") == "gpu-sched"
    assert scheduler_config(docs)["profiles"] == [{"schedulerName": "gpu-sched"}]
    ports = {p["name"]: p["containerPort"] for p in server["ports"]}
    assert ports == {"https": 8443, "metrics": 9395}
    assert (arg(server, "port"), arg(server, "metrics-port")) == ("8443", "9395")
    assert arg(server, "tls-name") == f"{one(docs, 'Service', 'dynmig')['metadata']['name']}.{NAMESPACE}.svc"


def test_self_managed_certificates_are_made_before_install_and_injected_after():
    docs = render()
    jobs = {
        j["metadata"]["annotations"]["helm.sh/hook"]: j
        for j in of_kind(docs, "Job")
        if j["metadata"]["labels"]["app.kubernetes.io/component"] == "certs"
    }
    assert set(jobs) == {"pre-install,pre-upgrade", "post-install,post-upgrade"}
    init = container(jobs["pre-install,pre-upgrade"], "certs")
    inject = container(jobs["post-install,post-upgrade"], "certs")
    assert init["args"][:2] == ["certs", "init"] and inject["args"][:2] == ["certs", "inject"]
    server = container(one(docs, "Deployment"), "server")
    assert arg(init, "secret") == env(server, "DYNMIG_TLS_SECRET")
    assert arg(init, "ca-secret") == env(server, "DYNMIG_CA_SECRET")
    assert arg(init, "mutating-webhook") == one(docs, "MutatingWebhookConfiguration")["metadata"]["name"]
    assert (
        arg(inject, "validating-webhook") == one(docs, "ValidatingWebhookConfiguration")["metadata"]["name"]
    )
    assert (
        arg(init, "service")
        == one(docs, "Service", "dynmig")["metadata"]["name"]
        == env(server, "DYNMIG_SERVICE")
    )


def test_optional_objects_appear_only_when_asked_for():
    assert not of_kind(render(), "ServiceMonitor") and not of_kind(render(), "NetworkPolicy")
    docs = render("1.35", "metrics.serviceMonitor.enabled=true", "networkPolicy.enabled=true")
    assert one(docs, "ServiceMonitor", "dynmig")["spec"]["endpoints"][0]["port"] == "metrics"
    ports = [p["port"] for rule in one(docs, "NetworkPolicy")["spec"]["ingress"] for p in rule["ports"]]
    assert sorted(ports) == [8443, 9395]
    assert one(render(), "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1


@pytest.mark.parametrize(
    "typo, named",
    [
        ("server.replica=2", "replica"),
        ("certs.mode=vault", "mode"),
        ("webhook.mutating.failurePolicy=ignore", "failurePolicy"),
        (
            "devicePlugin.nodeConfig[0].name=n1,devicePlugin.nodeConfig[0].operatingmode=hami-core",
            "operatingmode",
        ),
        ("schedulerNmae=x", "schedulerNmae"),
    ],
)
def test_the_values_schema_rejects_a_typo_and_names_it(typo, named):
    done = helm("template", "dynmig", str(CHART), "--set", typo)
    assert done.returncode != 0
    assert named in done.stderr


def test_the_server_and_the_device_plugin_accept_every_flag_the_chart_passes():
    from plugin.config import flags
    from webhooks.config import parse_args

    docs = render("1.35", "server.httpsPort=9443")
    server = container(one(docs, "Deployment"), "server")
    assert server["args"][0] == "serve"
    config = parse_args(server["args"][1:])
    assert config.port == 9443 and config.scheduler_name == "dynmig-scheduler"
    assert list(config.privileged_users) == controller_users(docs)
    assert config.device_config == "/etc/dynmig/device-config/device-config.yaml"
    plugin = container(one(docs, "DaemonSet"), "device-plugin")
    assert plugin["args"][0] == "device-plugin"
    parsed = flags().parser.parse_args(plugin["args"][1:])
    assert parsed.node_config == "/etc/dynmig/node-config/config.json"
    assert parsed.metrics_address == ":9394" and parsed.device_list_strategy == "envvar"


def test_the_device_plugin_gets_nvml_through_the_nvidia_runtime_class_with_mig_visibility():
    docs = render()
    daemonset = one(docs, "DaemonSet")
    spec = daemonset["spec"]["template"]["spec"]
    plugin = container(daemonset, "device-plugin")
    assert spec["runtimeClassName"] == "nvidia"
    assert not of_kind(docs, "RuntimeClass")  # GPU Operator made it; the chart only on request
    for name in ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_MIG_MONITOR_DEVICES"):
        assert env(plugin, name) == "all"
    assert "utility" in env(plugin, "NVIDIA_DRIVER_CAPABILITIES")
    assert "initContainers" not in spec and "LD_LIBRARY_PATH" not in {e["name"] for e in plugin["env"]}
    created = render(
        "1.35",
        "devicePlugin.runtimeClassName=nvidia-cdi",
        "devicePlugin.createRuntimeClass=true",
        "devicePlugin.runtimeClassHandler=nvidia-cdi",
    )
    runtime_class = one(created, "RuntimeClass")
    assert (runtime_class["metadata"]["name"], runtime_class["handler"]) == ("nvidia-cdi", "nvidia-cdi")
    assert one(created, "DaemonSet")["spec"]["template"]["spec"]["runtimeClassName"] == "nvidia-cdi"
    default_runtime = one(render("1.35", "devicePlugin.runtimeClassName="), "DaemonSet")
    assert "runtimeClassName" not in default_runtime["spec"]["template"]["spec"]


def test_the_device_plugin_serves_metrics_and_probes_on_one_port_with_a_service_monitor():
    docs = render("1.35", "metrics.serviceMonitor.enabled=true")
    daemonset = one(docs, "DaemonSet")
    plugin = container(daemonset, "device-plugin")
    assert plugin["ports"] == [{"name": "metrics", "containerPort": 9394, "protocol": "TCP"}]
    assert arg(plugin, "metrics-address") == ":9394"
    assert plugin["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert plugin["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    service = one(docs, "Service", "-device-plugin")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= daemonset["spec"]["template"]["metadata"]["labels"].items()
    monitor = one(docs, "ServiceMonitor", "-device-plugin")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"


def test_every_container_has_a_read_only_root_filesystem():
    docs = render("1.35", "devicePlugin.gpuOperatorToolkitReady.enabled=true")
    for workload in of_kind(docs, "Deployment") + of_kind(docs, "DaemonSet") + of_kind(docs, "Job"):
        spec = workload["spec"]["template"]["spec"]
        for c in spec.get("initContainers", []) + spec["containers"]:
            assert c["securityContext"]["readOnlyRootFilesystem"] is True, (
                workload["metadata"]["name"],
                c["name"],
            )


def test_on_gpu_operator_nodes_the_plugin_waits_for_the_toolkit_validation_marker():
    daemonset = one(render("1.35", "devicePlugin.gpuOperatorToolkitReady.enabled=true"), "DaemonSet")
    spec = daemonset["spec"]["template"]["spec"]
    (wait,) = spec["initContainers"]
    assert "/run/nvidia/validations/toolkit-ready" in wait["args"][0]
    (mount,) = wait["volumeMounts"]
    assert mount["mountPropagation"] == "HostToContainer"
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    assert volume["hostPath"] == {"path": "/run/nvidia/validations", "type": "DirectoryOrCreate"}


def test_without_a_runtime_class_the_plugin_loads_nvml_from_the_drivers_root():
    daemonset = one(
        render("1.35", "devicePlugin.runtimeClassName=", "devicePlugin.nvidiaDriverRoot=/run/nvidia/driver"),
        "DaemonSet",
    )
    plugin = container(daemonset, "device-plugin")
    mount = next(m for m in plugin["volumeMounts"] if m["mountPath"] == "/driver-root")
    assert mount["readOnly"] is True
    volume = next(v for v in daemonset["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"])
    assert volume["hostPath"]["path"] == "/run/nvidia/driver"
    assert "/driver-root/usr/lib/x86_64-linux-gnu" in env(plugin, "LD_LIBRARY_PATH").split(":")


def test_an_image_digest_pins_every_dynmig_container_and_kube_scheduler():
    digest = "sha256:" + "ab" * 32
    docs = render(
        "1.35",
        f"image.digest={digest}",
        f"kubeScheduler.image.digest={digest}",
        "devicePlugin.gpuOperatorToolkitReady.enabled=true",
    )
    images = {
        c["image"]
        for d in docs
        if d["kind"] in ("Deployment", "DaemonSet", "Job")
        for c in d["spec"]["template"]["spec"]["containers"]
        + d["spec"]["template"]["spec"].get("initContainers", [])
    }
    assert images == {f"ghcr.io/dynmig/dynmig@{digest}", f"registry.k8s.io/kube-scheduler@{digest}"}
    done = helm("template", "dynmig", str(CHART), "--set", "image.digest=latest")
    assert done.returncode != 0 and "digest" in done.stderr


def test_serve_follows_the_lease_of_kube_scheduler_in_its_own_pod():
    docs = render("1.35", "server.replicas=3")
    deployment = one(docs, "Deployment")
    server = container(deployment, "server")
    election = scheduler_config(docs)["leaderElection"]
    assert deployment["spec"]["replicas"] == 3
    assert (arg(server, "leader-elect"), arg(server, "lease-name")) == ("true", election["resourceName"])
    assert election["leaderElect"] is True and election["resourceNamespace"] == NAMESPACE
    # serve's identity is the pod's name, which is kube-scheduler's hostname
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in server["env"]
    assert "hostname" not in deployment["spec"]["template"]["spec"]
    spread = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    term = spread["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert (
        term["labelSelector"]["matchLabels"].items()
        <= deployment["spec"]["template"]["metadata"]["labels"].items()
    )
    assert (
        "affinity" not in one(render(), "Deployment")["spec"]["template"]["spec"]
    )  # one replica: nothing to spread
    single = container(
        one(render("1.35", "kubeScheduler.leaderElection.enabled=false"), "Deployment"), "server"
    )
    assert arg(single, "leader-elect") == "false"
    done = helm(
        "template",
        "dynmig",
        str(CHART),
        "--set",
        "server.replicas=2",
        "--set",
        "kubeScheduler.leaderElection.enabled=false",
    )
    assert done.returncode != 0 and "kubeScheduler.leaderElection.enabled" in done.stderr


HAMI_WRITERS = (
    "system:serviceaccount:kube-system:hami-scheduler",
    "system:serviceaccount:kube-system:hami-device-plugin",
)


def test_a_handover_lets_hamis_service_accounts_write_allocations_everywhere_the_rule_is_enforced():
    docs = render("1.35", f"allocationWriters={{{','.join(HAMI_WRITERS)}}}")
    expected = controller_users(docs) + list(HAMI_WRITERS)
    hook = next(
        w for w in one(docs, "ValidatingWebhookConfiguration")["webhooks"] if w["name"].startswith("pods.")
    )
    in_webhook = {c["name"]: c["expression"] for c in hook["matchConditions"]}["not-a-dynmig-controller"]
    in_policy = one(docs, "ValidatingAdmissionPolicy")["spec"]["matchConditions"][0]["expression"]
    for expression in (in_webhook, in_policy):
        assert re.findall(r"'(system:serviceaccount:[^']+)'", expression) == expected
    server = container(one(docs, "Deployment"), "server")
    assert list(parse_args(server["args"][1:]).privileged_users) == expected


@pytest.mark.parametrize("writer", ["x' || true || '", "alice bob", 'a"b', "back\\slash"])
def test_an_allocation_writer_that_could_break_out_of_the_cel_list_is_refused(writer):
    done = helm("template", "dynmig", str(CHART), "--set-json", f"allocationWriters={json.dumps([writer])}")
    assert done.returncode != 0 and "allocationWriters" in done.stderr


def test_node_pricing_is_off_by_default_and_the_chart_value_turns_it_on():
    def serve_config(docs):
        server = container(one(docs, "Deployment"), "server")
        return parse_args([], {k["name"]: k["value"] for k in server["env"] if "value" in k})

    assert serve_config(render()).node_pricing is False
    assert serve_config(render("1.35", "server.nodePricing=true")).node_pricing is True
