"""Regenerate protobuf_schema.json, the field numbers the simulated API server decodes protobuf
bodies with, from Kubernetes' own `generated.proto` files (k8s.io/api and k8s.io/apimachinery):

    python -m sim.apiserver.protobuf_schema_gen [--add] OUT.json core/v1/generated.proto apps/v1/generated.proto \\
        batch/v1/generated.proto rbac/v1/generated.proto meta/v1/generated.proto runtime/generated.proto \\
        resource/generated.proto intstr/generated.proto

Only the messages reachable from the kinds in ROOTS are kept. The Job, RBAC and DeleteOptions
messages, then the authorization/v1 and authentication/v1 reviews, were added from the
kubernetes-1.35.7 tags of k8s.io/api and apimachinery, keeping the messages already recorded
(`--add` merges into OUT). The wire format is Kubernetes' interface; this file records field
numbers, names and types, nothing else of those files.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOTS = {
    "v1/Namespace": "k8s.io.api.core.v1.Namespace",
    "v1/ConfigMap": "k8s.io.api.core.v1.ConfigMap",
    "v1/Secret": "k8s.io.api.core.v1.Secret",
    "v1/ServiceAccount": "k8s.io.api.core.v1.ServiceAccount",
    "v1/Pod": "k8s.io.api.core.v1.Pod",
    "v1/Service": "k8s.io.api.core.v1.Service",
    "apps/v1/Deployment": "k8s.io.api.apps.v1.Deployment",
    "apps/v1/DaemonSet": "k8s.io.api.apps.v1.DaemonSet",
    "batch/v1/Job": "k8s.io.api.batch.v1.Job",
    "rbac.authorization.k8s.io/v1/ClusterRole": "k8s.io.api.rbac.v1.ClusterRole",
    "rbac.authorization.k8s.io/v1/ClusterRoleBinding": "k8s.io.api.rbac.v1.ClusterRoleBinding",
    "rbac.authorization.k8s.io/v1/Role": "k8s.io.api.rbac.v1.Role",
    "rbac.authorization.k8s.io/v1/RoleBinding": "k8s.io.api.rbac.v1.RoleBinding",
    # the body of a DELETE from a typed client (helm uninstall purging its release Secret)
    "meta.k8s.io/v1/DeleteOptions": "k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions",
    "v1/DeleteOptions": "k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions",
    # what `kubectl auth can-i` and `kubectl auth whoami` send
    "authorization.k8s.io/v1/SelfSubjectAccessReview": "k8s.io.api.authorization.v1.SelfSubjectAccessReview",
    "authorization.k8s.io/v1/SubjectAccessReview": "k8s.io.api.authorization.v1.SubjectAccessReview",
    "authorization.k8s.io/v1/LocalSubjectAccessReview": "k8s.io.api.authorization.v1.LocalSubjectAccessReview",
    "authorization.k8s.io/v1/SelfSubjectRulesReview": "k8s.io.api.authorization.v1.SelfSubjectRulesReview",
    "authentication.k8s.io/v1/SelfSubjectReview": "k8s.io.api.authentication.v1.SelfSubjectReview",
}
META = "k8s.io.apimachinery.pkg.apis.meta.v1"
# Messages whose JSON form is not their fields (custom marshallers in Go).
SPECIAL = {
    f"{META}.Time": "time",
    f"{META}.MicroTime": "time",
    f"{META}.Duration": "duration",
    f"{META}.FieldsV1": "json",
    "k8s.io.apimachinery.pkg.runtime.RawExtension": "json",
    "k8s.io.apimachinery.pkg.api.resource.Quantity": "quantity",
    "k8s.io.apimachinery.pkg.util.intstr.IntOrString": "intorstring",
    "k8s.io.api.authorization.v1.ExtraValue": "stringlist",
    "k8s.io.api.authentication.v1.ExtraValue": "stringlist",
}
SCALARS = ("string", "bool", "int32", "int64", "bytes")
_FIELD = re.compile(
    r"^\s*(optional|repeated)?\s*(map<\s*([\w.]+)\s*,\s*([\w.]+)\s*>|[\w.]+)\s+(\w+)\s*=\s*(\d+)\s*;"
)


def _resolve(name: str, package: str) -> str:
    if name in SCALARS:
        return name
    full = name.lstrip(".") if name.startswith(".") else f"{package}.{name}"
    return SPECIAL.get(full, full)


def parse(text: str) -> dict[str, dict[str, list[str]]]:
    package = re.search(r"^package\s+([\w.]+);", text, re.MULTILINE).group(1)
    out: dict[str, dict[str, list[str]]] = {}
    current = None
    for line in text.splitlines():
        if line.strip().startswith("//"):
            continue
        if m := re.match(r"^message\s+(\w+)\s*{", line):
            current = out.setdefault(f"{package}.{m.group(1)}", {})
        elif line.startswith("}"):
            current = None
        elif current is not None and (m := _FIELD.match(line)):
            label, kind, key, value, name, number = m.groups()
            if key:
                current[number] = [name, "map", _resolve(value, package)]
            else:
                current[number] = [name, label or "optional", _resolve(kind, package)]
    return out


def reachable(messages: dict[str, dict[str, list[str]]]) -> dict[str, dict[str, list[str]]]:
    keep: dict[str, dict[str, list[str]]] = {}
    todo = list(ROOTS.values())
    while todo:
        name = todo.pop()
        if name in keep or name not in messages:
            continue
        keep[name] = messages[name]
        todo += [kind for _, _, kind in messages[name].values() if kind in messages]
    return keep


def main(argv: list[str]) -> int:
    add = argv[:1] == ["--add"]
    out, *protos = argv[1:] if add else argv
    recorded: dict[str, dict[str, list[str]]] = json.loads(Path(out).read_text())["messages"] if add else {}
    messages = dict(recorded)
    for path in protos:
        messages.update(parse(Path(path).read_text()))
    # --add keeps every message already recorded, reachable from the roots or not
    doc = {"kinds": ROOTS, "messages": dict(sorted({**recorded, **reachable(messages)}.items()))}
    Path(out).write_text(json.dumps(doc, separators=(",", ":"), sort_keys=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
