"""Server-side apply on the simulated API server, through kubectl 1.35 (default settings) and the
official Python client, as on a real cluster: apply creates, owns and prunes fields, conflicts are
409s until forced, managers share lists by their keys, dry runs change nothing, and hostile apply
bodies are 4xx answers naming the problem."""

from __future__ import annotations

import json
import os
import re

import kubernetes
import pytest
import yaml
from kubernetes.client.rest import ApiException
from sim.apiserver import fieldtypes, schemas
from sim.apiserver.resources import RESOURCES

APPLY = "application/apply-patch+yaml"


def _deployment(containers: list[dict], replicas: int | None = 2, labels: dict | None = None) -> dict:
    spec: dict = {
        "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": containers}},
    }
    if replicas is not None:
        spec["replicas"] = replicas
    meta = {"name": "web", "namespace": "default", "labels": labels or {"app": "web"}}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": spec}


WEB = {
    "name": "web",
    "image": "nginx:1",
    "env": [{"name": "MODE", "value": "a"}],
    "ports": [{"containerPort": 80}],
}


def _entries(obj: dict) -> dict[tuple[str, str], dict]:
    return {(e["manager"], e["operation"]): e for e in obj["metadata"].get("managedFields") or []}


def _apps(apiserver):
    return kubernetes.client.AppsV1Api(apiserver.api_client("admin"))


def _apply_json(apiserver, obj: dict, manager: str) -> None:
    """An apply through the official client (its generated patch call, the apply content type)."""
    _apps(apiserver).patch_namespaced_deployment(
        obj["metadata"]["name"], "default", obj, field_manager=manager, _content_type=APPLY
    )


def test_kubectl_apply_server_side_creates_the_object_and_records_kubectl_as_its_applier(run, apiserver):
    out = run("apply", "--server-side", "-f", "-", stdin=json.dumps(_deployment([WEB])))
    assert "deployment.apps/web serverside-applied" in out
    stored = apiserver.get("deployments", "web", "default")
    entry = _entries(stored)[("kubectl", "Apply")]
    assert entry["apiVersion"] == "apps/v1" and entry["fieldsType"] == "FieldsV1" and entry["time"]
    container = entry["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]['k:{"name":"web"}']
    assert container["."] == {} and container["f:image"] == {}
    assert 'k:{"containerPort":80,"protocol":"TCP"}' in container["f:ports"]
    assert entry["fieldsV1"]["f:spec"]["f:selector"] == {}  # a LabelSelector is owned whole
    shown = yaml.safe_load(run("get", "deployment", "web", "-o", "yaml"))
    assert "managedFields" not in shown["metadata"]  # kubectl hides them unless asked
    full = yaml.safe_load(run("get", "deployment", "web", "-o", "yaml", "--show-managed-fields"))
    assert full["metadata"]["managedFields"] == stored["metadata"]["managedFields"]


def test_reapplying_without_a_field_the_applier_owned_removes_it_and_keeps_the_rest(run, apiserver):
    run(
        "apply",
        "--server-side",
        "-f",
        "-",
        stdin=json.dumps(_deployment([WEB], labels={"app": "web", "t": "x"})),
    )
    slim = {k: v for k, v in WEB.items() if k != "env"}
    run("apply", "--server-side", "-f", "-", stdin=json.dumps(_deployment([slim], replicas=None)))
    stored = apiserver.get("deployments", "web", "default")
    (container,) = stored["spec"]["template"]["spec"]["containers"]
    assert "env" not in container
    assert (container["name"], container["image"], container["ports"]) == (
        "web",
        slim["image"],
        [{"containerPort": 80, "protocol": "TCP"}],  # the port's protocol defaulted
    )
    # the released replicas go, and defaulting puts back the Deployment's default, as on a cluster
    assert stored["spec"]["replicas"] == 1 and stored["metadata"]["labels"] == {"app": "web"}


def test_an_apply_changing_a_field_another_manager_set_is_a_conflict_until_forced(run, apiserver):
    run("apply", "--server-side", "-f", "-", stdin=json.dumps(_deployment([WEB])))
    run("patch", "deployment", "web", "-p", '{"spec":{"replicas":5}}')
    assert _entries(apiserver.get("deployments", "web", "default"))[("kubectl-patch", "Update")]
    refused = run("apply", "--server-side", "-f", "-", stdin=json.dumps(_deployment([WEB])), ok=False)
    assert (
        'Apply failed with 1 conflict: conflict with "kubectl-patch" using apps/v1: .spec.replicas' in refused
    )
    with pytest.raises(ApiException) as err:
        _apply_json(apiserver, _deployment([WEB]), "kubectl")
    status = json.loads(err.value.body)
    assert err.value.status == 409 and status["reason"] == "Conflict"
    assert status["details"]["causes"] == [
        {
            "type": "FieldManagerConflict",
            "message": 'conflict with "kubectl-patch" using apps/v1',
            "field": ".spec.replicas",
        }
    ]
    run("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=json.dumps(_deployment([WEB])))
    stored = apiserver.get("deployments", "web", "default")
    assert stored["spec"]["replicas"] == 2
    assert ("kubectl-patch", "Update") not in _entries(stored)  # its only field moved to the applier


def test_two_appliers_share_the_container_list_by_name_and_each_removes_only_its_own(apiserver):
    _apply_json(apiserver, _deployment([WEB]), "team-a")
    sidecar = {"name": "log", "image": "fluent:2"}
    _apply_json(apiserver, _deployment([sidecar], replicas=None), "team-b")
    names = [
        c["name"]
        for c in apiserver.get("deployments", "web", "default")["spec"]["template"]["spec"]["containers"]
    ]
    assert names == ["web", "log"]
    _apply_json(apiserver, _deployment([sidecar], replicas=None), "team-a")  # team-a drops "web"
    containers = apiserver.get("deployments", "web", "default")["spec"]["template"]["spec"]["containers"]
    assert [(c["name"], c["image"]) for c in containers] == [("log", "fluent:2")]
    # A merge patch by the client records its default manager, the User-Agent's product
    _apps(apiserver).patch_namespaced_deployment("web", "default", {"metadata": {"annotations": {"n": "1"}}})
    assert ("OpenAPI-Generator", "Update") in _entries(apiserver.get("deployments", "web", "default"))


def test_kubectl_writes_are_recorded_under_the_managers_kubectl_names(run, apiserver):
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "default"},
        "data": {"a": "1"},
    }
    run("apply", "-f", "-", stdin=json.dumps(cm))  # client-side apply
    run("label", "configmap", "c", "team=ml")
    entries = _entries(apiserver.get("configmaps", "c", "default"))
    assert entries[("kubectl-client-side-apply", "Update")]["fieldsV1"]["f:data"] == {".": {}, "f:a": {}}
    assert entries[("kubectl-label", "Update")]["fieldsV1"] == {
        "f:metadata": {"f:labels": {".": {}, "f:team": {}}}
    }


def test_many_updating_managers_are_capped_at_ten_entries_the_oldest_merged(apiserver):
    core = kubernetes.client.CoreV1Api(apiserver.api_client("admin"))
    core.create_namespaced_config_map("default", {"metadata": {"name": "c"}, "data": {}}, field_manager="m00")
    for i in range(1, 13):
        core.patch_namespaced_config_map("c", "default", {"data": {f"k{i}": "v"}}, field_manager=f"m{i:02}")
    entries = _entries(apiserver.get("configmaps", "c", "default"))
    assert len(entries) == 10 and ("ancient-changes", "Update") in entries
    owned = {k for e in entries.values() for k in e["fieldsV1"].get("f:data", {}) if k != "."}
    assert owned == {f"f:k{i}" for i in range(1, 13)}  # every field still has an owner


def test_a_server_dry_run_apply_creates_and_changes_nothing(run, apiserver):
    out = run("apply", "--server-side", "--dry-run=server", "-f", "-", stdin=json.dumps(_deployment([WEB])))
    assert "serverside-applied (server dry run)" in out
    assert apiserver.get("deployments", "web", "default") is None
    run("apply", "--server-side", "-f", "-", stdin=json.dumps(_deployment([WEB])))
    before = apiserver.get("deployments", "web", "default")
    run(
        "apply",
        "--server-side",
        "--dry-run=server",
        "-f",
        "-",
        stdin=json.dumps(_deployment([WEB], replicas=7)),
    )
    assert apiserver.get("deployments", "web", "default") == before


def _deep(levels: int) -> str:
    return "a:\n" + "".join("  " * i + "b:\n" for i in range(1, levels)) + "  " * levels + "c: 1\n"


def _raw_apply(apiserver, body: str, manager: str | None = "t") -> tuple[int, dict]:
    """PATCH a raw apply body through the official client's own request path."""
    api = apiserver.api_client("admin")
    request = api.param_serialize(
        "PATCH",
        "/apis/apps/v1/namespaces/default/deployments/web",
        query_params=[("fieldManager", manager)] if manager else [],
        header_params={"Content-Type": APPLY, "Accept": "application/json"},
        body=body,
        auth_settings=["BearerToken"],
    )
    resp = api.call_api(*request)
    return resp.status, json.loads(resp.read() or b"{}")


@pytest.mark.parametrize(
    ("body", "code", "says"),
    [
        ("kind: [unclosed", 400, "error decoding YAML"),
        ("- a list\n- not an object\n", 400, "not an object"),
        ("apiVersion: apps/v1\nkind: Deployment\n---\nkind: Pod\n", 400, "error decoding YAML"),
        (_deep(150), 400, "nests deeper than 100 levels"),
        (
            "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
            + "".join(
                f"{n}: &{n} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
                for p, n in zip("abcde", "bcdef", strict=True)
            ),
            400,
            "more than 200000 values",
        ),
        (
            "apiVersion: v1\nkind: Deployment\nmetadata: {name: web}\n",
            400,
            "Incorrect version specified in apply patch",
        ),
        (
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: other}\n",
            400,
            "does not match the name on the URL",
        ),
        ("x: " + "y" * (3 * 1024 * 1024 + 1), 413, "Request entity too large"),
        (
            "apiVersion: apps/v1\nkind: Deployment\nspec: {replicaz: 2}\n",
            422,
            "failed to create typed patch object (/; apps/v1, Kind=Deployment): .spec.replicaz: field not declared",
        ),
        (
            "apiVersion: apps/v1\nkind: Deployment\nspec: {template: {spec: {containers: [{image: x}]}}}\n",
            422,
            'omits key field "name"',
        ),
    ],
    ids=[
        "malformed",
        "list",
        "two-documents",
        "deep",
        "alias-bomb",
        "version",
        "name",
        "huge",
        "unknown",
        "no-key",
    ],
)
def test_a_hostile_apply_body_gets_a_4xx_naming_the_problem(apiserver, body, code, says):
    status, answer = _raw_apply(apiserver, body)
    assert status == code and says in answer["message"]
    assert apiserver.get("deployments", "web", "default") is None


def test_an_apply_without_a_field_manager_is_refused_as_the_real_server_does(apiserver):
    status, answer = _raw_apply(apiserver, json.dumps(_deployment([WEB])), manager=None)
    assert status == 422
    assert answer["message"] == (
        'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch'
    )


def _definitions() -> dict:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    path = os.path.join(
        os.path.dirname(kubernetes_validate.__file__),
        "kubernetes-json-schema",
        "v1.35.0-local",
        "_definitions.json",
    )
    with open(path) as f:
        return json.load(f)["$defs"]


def test_the_list_and_map_types_apply_merges_by_are_kubernetes_1_35s():
    """Every model the served kinds reach, against the 1.35 OpenAPI markers kube-apiserver uses."""
    defs = _definitions()
    lists, atomic_maps, atomic_structs = {}, set(), set()

    def ref(p: dict) -> str | None:
        target = p.get("$ref") or (p.get("allOf") or [{}])[0].get("$ref")
        return target.rsplit("/", 1)[-1] if target else None

    seen: set[str] = set()

    def walk(model: str, name: str) -> None:
        if model in seen or name not in defs:
            return
        seen.add(model)
        d = defs[name]
        if d.get("x-kubernetes-map-type") == "atomic":
            atomic_structs.add(model)
        for field, kind in schemas.fields_of(model).items():
            p = d.get("properties", {}).get(field, {})
            if p.get("x-kubernetes-list-type") in ("map", "set"):
                lists[(model, field)] = (
                    p["x-kubernetes-list-type"],
                    tuple(p.get("x-kubernetes-list-map-keys") or ()),
                )
            if p.get("x-kubernetes-map-type") == "atomic" and "additionalProperties" in p:
                atomic_maps.add((model, field))
            inner = re.sub(r"^(List|Dict)\[(str, )?(.+)\]$", r"\3", kind)
            sub = p.get("items") or p.get("additionalProperties") or p
            target = ref(sub) if isinstance(sub, dict) else None
            if target and schemas.is_model(inner):
                walk(inner, target)

    for rt in RESOURCES:
        model = schemas.model_of(rt)
        if model is None:
            continue
        group = rt.group.split(".")[0] if rt.group else "core"
        walk(model, f"io.k8s.api.{group}.{rt.version}.{rt.kind}")
    assert len(seen) > 100
    assert {k: v for k, v in fieldtypes.LISTS.items() if k[0] in seen} == lists
    assert {k for k in fieldtypes.ATOMIC_MAPS if k[0] in seen} == atomic_maps
    assert {m for m in fieldtypes.ATOMIC_STRUCTS if m in seen} == atomic_structs


RBAC_AND_JOB = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: reader}
rules: [{apiGroups: [""], resources: [pods], verbs: [get, list]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: read, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: reader}
subjects: [{kind: ServiceAccount, name: sa, namespace: default}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: once, namespace: default}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: busybox}]
"""


def test_the_rbac_kinds_and_jobs_a_chart_installs_are_applied_and_printed_as_kubectl_shows_them(
    run, apiserver
):
    out = run("apply", "--server-side", "-f", "-", stdin=RBAC_AND_JOB)
    assert out.count("serverside-applied") == 3
    job = apiserver.get("jobs", "once", "default")
    uid = job["metadata"]["uid"]
    assert job["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    assert job["spec"]["completions"] == 1 and job["spec"]["backoffLimit"] == 6
    rows = run("get", "clusterrole/reader", "rolebinding/read", "job/once", "-o", "wide").split("\n")
    assert rows[0].split() == ["NAME", "CREATED", "AT"]
    assert rows[3].split()[:5] == ["NAME", "ROLE", "AGE", "USERS", "GROUPS"]
    assert "ClusterRole/reader" in rows[4] and "default/sa" in rows[4]
    assert rows[6].split()[:5] == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    assert rows[7].split()[1:3] == ["Running", "0/1"]


def test_an_apply_to_the_status_subresource_owns_only_status_under_its_own_entry(run, apiserver):
    run("apply", "--server-side", "-f", "-", stdin=RBAC_AND_JOB.split("---")[2])
    status = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "once", "namespace": "default"}}
    stdin = json.dumps({**job, "spec": {"parallelism": 3}, "status": status})
    run(
        "apply",
        "--server-side",
        "--subresource=status",
        "--field-manager=job-controller",
        "-f",
        "-",
        stdin=stdin,
    )
    stored = apiserver.get("jobs", "once", "default")
    assert (
        stored["status"] == status and stored["spec"]["parallelism"] == 1
    )  # spec is not the status's to change
    entry = _entries(stored)[("job-controller", "Apply")]
    assert entry["subresource"] == "status"
    assert entry["fieldsV1"] == {
        "f:status": {"f:conditions": {}, "f:succeeded": {}}
    }  # conditions: atomic in 1.35
    assert run("get", "job", "once").split("\n")[1].split()[1] == "Complete"
