"""A lab pod's ConfigMap volumes, as kubelet makes them: each key of the ConfigMap (or the volume's
`items`) a file under the container's mountPath. On a laptop the mountPath cannot be the chart's
(/etc/dynmig/...), so each volume is written under the pod's own directory, and `localize` points a
container's `--flag=<path under a mount>` arguments there.

Why: the lab runs what the pod says (its args, its ConfigMaps as the API holds them when the
container starts), so a `helm install` or `helm upgrade` on the lab takes effect as on a cluster.
kubelet waits while a ConfigMap a volume names does not exist (the pod stays ContainerCreating,
FailedMount); `MountError` is that wait here: the kubelet tries the pod again on its next pass.
The files are written once per pod, as a restarted container finds its volumes as they were.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kubernetes import client


class MountError(RuntimeError):
    pass


def container_of(pod: Mapping[str, Any], name: str) -> dict[str, Any]:
    for c in (pod.get("spec") or {}).get("containers") or []:
        if c.get("name") == name:
            return dict(c)
    raise MountError(f"pod {pod['metadata'].get('name')} has no container {name!r}")


def literal_env(container: Mapping[str, Any]) -> dict[str, str]:
    """The container's environment with literal values (the downward API's are the lab's to give)."""
    return {e["name"]: str(e["value"]) for e in container.get("env") or [] if "value" in e}


def mount_configmaps(
    core: client.CoreV1Api, pod: Mapping[str, Any], container: str, root: Path
) -> dict[str, Path]:
    """Write the container's ConfigMap volumes under `root` (one directory per volume); returns
    mountPath -> that directory. A missing ConfigMap (not `optional`) or key raises MountError."""
    meta = pod["metadata"]
    volumes = {
        v["name"]: v["configMap"] for v in (pod.get("spec") or {}).get("volumes") or [] if "configMap" in v
    }
    mounts: dict[str, Path] = {}
    for mount in container_of(pod, container).get("volumeMounts") or []:
        source = volumes.get(mount["name"])
        if source is None:
            continue
        data = _configmap_data(core, meta["namespace"], source)
        target = root / mount["name"]
        target.mkdir(parents=True, exist_ok=True)
        items = source.get("items") or [{"key": k, "path": k} for k in data]
        for item in items:
            if item["key"] not in data:
                if source.get("optional"):
                    continue
                raise MountError(
                    f'MountVolume.SetUp failed for volume "{mount["name"]}": configmap references '
                    f"non-existent config key: {item['key']}"
                )
            path = target / item["path"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(data[item["key"]])
        mounts[mount["mountPath"].rstrip("/")] = target
    return mounts


def _configmap_data(core: client.CoreV1Api, namespace: str, source: Mapping[str, Any]) -> dict[str, str]:
    try:
        cm = core.read_namespaced_config_map(source["name"], namespace, _request_timeout=5)
    except client.ApiException as error:
        if error.status == 404 and source.get("optional"):
            return {}
        if error.status == 404:
            raise MountError(
                f'MountVolume.SetUp failed: configmap "{source["name"]}" not found in {namespace}'
            ) from None
        raise
    return dict(cm.data or {})


def localize(args: list[str], mounts: Mapping[str, Path]) -> list[str]:
    """`--flag=/mount/path/file` -> `--flag=<the lab's directory of that volume>/file`."""
    out = []
    for arg in args:
        flag, sep, value = arg.partition("=")
        for mount_path, local in mounts.items():
            if sep and (value == mount_path or value.startswith(mount_path + "/")):
                arg = f"{flag}={local}{value[len(mount_path) :]}"
                break
        out.append(arg)
    return out
