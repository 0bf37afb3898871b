"""charts/dynmig in DRA mode (`draPlugin`): what a cluster admin relies on, on the rendered manifests.

Extender mode stays the default and unchanged; DRA mode is per node pool, and one node never runs
both plugins.
"""

from __future__ import annotations

from chart_testkit import CHART, arg, container, helm, of_kind, one, render, scheduler_config

DRA = "draPlugin.enabled=true"


def _daemonsets(docs: list[dict]) -> dict[str, dict]:
    return {d["metadata"]["labels"]["app.kubernetes.io/component"]: d for d in of_kind(docs, "DaemonSet")}


def test_extender_mode_is_the_default_and_renders_nothing_of_dra():
    docs = render()
    assert set(_daemonsets(docs)) == {"device-plugin"}
    assert not of_kind(docs, "DeviceClass")
    assert not [r for r in of_kind(docs, "ClusterRole") if r["metadata"]["name"].endswith("-dra-plugin")]
    assert "affinity" not in _daemonsets(docs)["device-plugin"]["spec"]["template"]["spec"]


def test_a_node_labelled_for_dra_gets_the_dra_plugin_and_never_the_device_plugin():
    sets = _daemonsets(render("1.35", DRA))
    assert set(sets) == {"device-plugin", "dra-plugin"}
    dra = sets["dra-plugin"]["spec"]["template"]["spec"]
    assert dra["nodeSelector"] == {"dynmig.io/mig-mode": "dra"}
    terms = sets["device-plugin"]["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [
        {"matchExpressions": [{"key": "dynmig.io/mig-mode", "operator": "NotIn", "values": ["dra"]}]}
    ]


def test_a_custom_node_label_and_pool_selector_apply_to_both_daemonsets():
    sets = _daemonsets(
        render(
            "1.35",
            DRA,
            "draPlugin.nodeLabel.key=example.com/pool",
            "draPlugin.nodeLabel.value=claims",
            "draPlugin.nodeSelector.gpu=h100",
        )
    )
    assert sets["dra-plugin"]["spec"]["template"]["spec"]["nodeSelector"] == {
        "example.com/pool": "claims",
        "gpu": "h100",
    }
    expr = sets["device-plugin"]["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"][0]["matchExpressions"][0]
    assert (expr["key"], expr["values"]) == ("example.com/pool", ["claims"])


def test_the_dra_plugin_mounts_kubelets_plugin_dirs_the_cdi_root_and_a_state_dir_that_outlives_it():
    plugin = container(_daemonsets(render("1.35", DRA))["dra-plugin"], "dra-plugin")
    assert plugin["args"][0] == "dra-plugin"
    assert arg(plugin, "driver-name") == "mig.dynmig.io"
    assert arg(plugin, "registry-dir") == "/var/lib/kubelet/plugins_registry"
    assert arg(plugin, "plugin-dir") == "/var/lib/kubelet/plugins/mig.dynmig.io"
    assert arg(plugin, "cdi-dir") == "/var/run/cdi"
    mounts = {m["mountPath"] for m in plugin["volumeMounts"]}
    assert {
        "/var/lib/kubelet/plugins_registry",
        "/var/lib/kubelet/plugins/mig.dynmig.io",
        "/var/run/cdi",
    } <= mounts
    assert arg(plugin, "state-dir") in mounts
    assert plugin["securityContext"]["privileged"] is True
    assert plugin["securityContext"]["readOnlyRootFilesystem"] is True


def test_the_dra_plugin_may_write_only_resourceslices_and_its_own_device_status_of_claims():
    role = one(render("1.35", DRA), "ClusterRole", "-dra-plugin")
    grants: dict[str, set[str]] = {}
    for rule in role["rules"]:
        for resource in rule["resources"]:
            grants.setdefault(resource, set()).update(rule["verbs"])
    assert grants == {
        "resourceslices": {"get", "list", "watch", "create", "update", "patch", "delete"},
        "resourceclaims": {"get", "list", "watch"},
        "resourceclaims/status": {"update"},
        "resourceclaims/driver": {"associated-node:update"},
        "nodes": {"get"},
        "events": {"create", "patch"},
    }
    (driver_rule,) = [r for r in role["rules"] if r["resources"] == ["resourceclaims/driver"]]
    assert driver_rule["resourceNames"] == ["mig.dynmig.io"]  # this driver's entries only


def test_the_device_class_selects_this_drivers_mig_devices_by_its_name():
    docs = render("1.35", DRA, "draPlugin.driverName=mig.example.com", "draPlugin.deviceClass.name=mig")
    cls = one(docs, "DeviceClass")
    assert cls["apiVersion"] == "resource.k8s.io/v1" and cls["metadata"]["name"] == "mig"
    expression = cls["spec"]["selectors"][0]["cel"]["expression"]
    assert 'device.driver == "mig.example.com"' in expression
    assert 'device.attributes["mig.example.com"].type == "mig"' in expression
    assert not of_kind(render("1.35", DRA, "draPlugin.deviceClass.create=false"), "DeviceClass")


def test_a_driver_name_that_is_not_a_dns_subdomain_is_refused_by_the_values_schema():
    done = helm("template", "dynmig", str(CHART), "--set", DRA, "--set", "draPlugin.driverName=Mig_Driver")
    assert done.returncode != 0 and "driverName" in done.stderr


def test_with_the_page_on_serve_draws_dra_pools_and_may_only_read_their_slices_and_claims():
    docs = render("1.35", DRA, "server.page.enabled=true")
    server = container(one(docs, "Deployment"), "server")
    assert arg(server, "dra-driver") == "mig.dynmig.io"
    from webhooks.config import parse_args

    assert parse_args(server["args"][1:]).dra_driver == "mig.dynmig.io"
    rules = one(docs, "ClusterRole", "-server")["rules"]
    dra = [r for r in rules if r["apiGroups"] == ["resource.k8s.io"]]
    assert dra == [
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceslices", "resourceclaims"],
            "verbs": ["list", "watch"],
        }
    ]
    quiet = render("1.35")  # extender mode: serve reads nothing of resource.k8s.io
    assert not [
        a for a in container(one(quiet, "Deployment"), "server")["args"] if a.startswith("--dra-driver")
    ]
    assert not [
        r for r in one(quiet, "ClusterRole", "-server")["rules"] if r["apiGroups"] == ["resource.k8s.io"]
    ]


def test_the_dra_plugin_accepts_every_flag_the_chart_passes(tmp_path):
    from plugin.dra.config import load_config

    plugin = container(_daemonsets(render("1.35", DRA))["dra-plugin"], "dra-plugin")
    policy = CHART / "files" / "device-config.yaml"
    args = [
        a if not a.startswith("--config-file=") else f"--config-file={policy}" for a in plugin["args"][1:]
    ]
    config = load_config(args, environ={"NODE_NAME": "gpu-7"})
    assert (config.driver, config.node_name, config.metrics_address) == ("mig.dynmig.io", "gpu-7", ":9397")
    assert str(config.plugin_dir) == "/var/lib/kubelet/plugins/mig.dynmig.io"


def test_in_dra_mode_kube_scheduler_asks_dynmig_to_score_nodes_for_every_pod_and_never_waits_on_it():
    docs = render("1.35", DRA)

    extenders = scheduler_config(docs)["extenders"]
    assert len(extenders) == 2
    first, scoring = extenders
    assert first["filterVerb"] == "filter" and first["managedResources"]  # extender mode unchanged
    assert scoring["prioritizeVerb"] == "prioritize" and scoring["weight"] == 5
    assert scoring["ignorable"] is True
    assert "filterVerb" not in scoring and "bindVerb" not in scoring and "managedResources" not in scoring
    assert scoring["urlPrefix"] == first["urlPrefix"] and scoring["tlsConfig"] == first["tlsConfig"]
    assert arg(container(one(docs, "Deployment"), "server"), "dra-driver") == "mig.dynmig.io"
    assert len(scheduler_config(render("1.35"))["extenders"]) == 1  # extender mode: one entry


def test_the_simulated_kube_scheduler_accepts_the_dra_mode_configuration():
    from sim.scheduler.config import parse

    parsed = parse(scheduler_config(render("1.35", DRA, "draPlugin.prioritizeWeight=7")))
    scoring = parsed.extenders[1]
    assert (scoring.prioritize_verb, scoring.weight, scoring.ignorable) == ("prioritize", 7, True)
    assert not scoring.managed_resources and not scoring.filter_verb


def test_a_prioritize_weight_that_is_not_a_positive_integer_is_refused_by_the_values_schema():
    for bad in ("0", "-1", "101", "heavy"):
        done = helm(
            "template", "dynmig", str(CHART), "--set", DRA, "--set", f"draPlugin.prioritizeWeight={bad}"
        )
        assert done.returncode != 0 and "prioritizeWeight" in done.stderr, bad


def test_each_listed_profile_gets_a_device_class_serving_its_extended_resource():
    docs = render("1.37", DRA, "draPlugin.extendedResources.profiles={1g.10gb,2g.20gb}")
    by_resource = {c["spec"].get("extendedResourceName"): c for c in of_kind(docs, "DeviceClass")}
    assert set(by_resource) == {None, "nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb"}
    one_g = by_resource["nvidia.com/mig-1g.10gb"]
    assert one_g["metadata"]["name"] == "mig-1g-10gb.mig.dynmig.io"
    expression = one_g["spec"]["selectors"][0]["cel"]["expression"]
    assert 'device.driver == "mig.dynmig.io"' in expression
    assert 'device.attributes["mig.dynmig.io"].profile == "1g.10gb"' in expression
    assert len(of_kind(render("1.37", DRA), "DeviceClass")) == 1  # none unless asked


def test_serve_leaves_the_extended_resources_device_classes_map_to_kube_scheduler():
    docs = render("1.37", DRA, "draPlugin.extendedResources.profiles={1g.10gb,2g.20gb}")
    (deployment,) = [d for d in of_kind(docs, "Deployment") if d["metadata"]["name"].endswith("scheduler")]
    serve = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if "serve" in c["args"])
    listed = [a for a in serve["args"] if a.startswith("--dra-extended-resource=")]
    assert listed == [
        "--dra-extended-resource=nvidia.com/mig-1g.10gb",
        "--dra-extended-resource=nvidia.com/mig-2g.20gb",
    ]


def test_an_extended_resource_profile_that_is_not_a_mig_profile_is_refused_by_the_values_schema():
    done = helm(
        "template", "dynmig", str(CHART), "--set", DRA, "--set", "draPlugin.extendedResources.profiles={gpu}"
    )
    assert done.returncode != 0 and "extendedResources" in done.stderr


def test_the_dra_plugin_takes_the_same_per_gpu_lock_files_as_the_device_plugin():
    """A node relabelled between modes runs both for a moment (one pod terminating, the other
    starting): both lock a GPU through the same host directory (plugin/instances.py node_lock)."""
    sets = _daemonsets(render("1.35", DRA))
    dra = container(sets["dra-plugin"], "dra-plugin")
    device = sets["device-plugin"]["spec"]["template"]["spec"]
    state = {v["name"]: v for v in device["volumes"]}["state"]["hostPath"]["path"]
    locks = {v["name"]: v for v in sets["dra-plugin"]["spec"]["template"]["spec"]["volumes"]}["gpu-locks"]
    assert arg(dra, "gpu-lock-dir") == f"{state}/gpus" == locks["hostPath"]["path"]
    assert {"name": "gpu-locks", "mountPath": f"{state}/gpus"} in dra["volumeMounts"]
