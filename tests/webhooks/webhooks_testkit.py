"""Builders for admission requests and pods used across the webhooks tests."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

SCHEDULER = "system:serviceaccount:dynmig:dynmig-scheduler"
PLUGIN = "system:serviceaccount:dynmig:dynmig-device-plugin"


def pod(name: str = "p", limits: dict[str, str] | None = None, requests: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
        **spec: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    container = {"name": "main", "image": "cuda", "resources": resources}
    meta: dict[str, Any] = {"name": name, "namespace": "team"}
    if annotations is not None:
        meta["annotations"] = annotations
    if labels is not None:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"schedulerName": "default-scheduler", "containers": [container], **spec}}


def review(obj: dict[str, Any] | None, old: dict[str, Any] | None = None, op: str = "CREATE",
           user: str = "alice", version: str = "v1", kind: str = "Pod", resource: str = "pods") -> dict[str, Any]:
    return {
        "apiVersion": f"admission.k8s.io/{version}",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": resource},
            "namespace": "team",
            "name": (obj or old or {}).get("metadata", {}).get("name", ""),
            "operation": op,
            "userInfo": {"username": user, "groups": ["system:authenticated"]},
            "object": obj,
            "oldObject": old,
            "dryRun": False,
        },
    }


def decode_patch(response: dict[str, Any]) -> list[dict[str, Any]]:
    if "patch" not in response:
        return []
    assert response["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(response["patch"]))


def apply_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """A minimal RFC 6902 add/replace/remove applier (enough to check our patches land where meant)."""
    out = json.loads(json.dumps(doc))
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent = out
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        last = parts[-1]
        if op["op"] in ("add", "replace"):
            if isinstance(parent, list):
                parent.insert(len(parent) if last == "-" else int(last), op["value"])
            else:
                assert op["op"] == "add" or last in parent
                parent[last] = op["value"]
        elif op["op"] == "remove":
            del parent[int(last) if isinstance(parent, list) else last]
    return out


# ---------------------------------------------------------------- nodes publishing MIG GPUs

def registration(node: str, model_key: str, gpus: int, health: bool = True) -> str:
    """`hami.io/node-nvidia-register` as a device plugin publishes it for `gpus` GPUs of a model."""
    from mig import catalog
    from mig.allowlist import default_allowlist
    from mig.annotations import DeviceInfo, MigProfile, encode_node_register

    model = catalog.find_model(model_key)
    names = default_allowlist().profiles_for(model.nvml_name)
    profiles = []
    for name in names:
        spec = model.profile(name)
        if spec is None:
            continue
        profiles.append(MigProfile(name=spec.name, memoryMB=spec.memory_mib, core=catalog.core_percent(model, spec),
                                   sliceCount=spec.slice_count,
                                   placements=tuple({"start": p.start, "size": p.size} for p in spec.placements)))
    devices = [DeviceInfo(id=f"GPU-{node}-{i}", index=i, count=7, devmem=model.memory_mib, devcore=100,
                          type=model.nvml_name, health=health, mode="mig", migProfiles=tuple(profiles))
               for i in range(gpus)]
    return encode_node_register(devices)


def node(name: str, model_key: str = "A100-SXM4-80GB", gpus: int = 1, **kw) -> dict:
    from mig.annotations import NODE_REGISTER

    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {NODE_REGISTER: registration(name, model_key, gpus, **kw)}},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"}}}


def gpu_pod(name: str, memory: int | None = 8000, devices: int = 1, namespace: str = "team",
            annotations: dict | None = None) -> dict:
    limits = {"nvidia.com/gpu": str(devices)}
    if memory is not None:
        limits["nvidia.com/gpumem"] = str(memory)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
            "spec": {"schedulerName": "dynmig-scheduler",
                     "containers": [{"name": "main", "image": "cuda", "resources": {"limits": limits}}]}}
