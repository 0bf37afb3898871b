"""What a Job pod's container runs in the lab: a container of the dynmig image (the chart's
certificate hooks, `dynmig certs init` and `inject`) runs its args as a real `dynmig` process,
the way the lab runs the chart's other containers; any other container gets the simulated workload.

The one laptop difference: a pod authenticates as its service account through the token kubelet
mounts (`--in-cluster`); the process gets a kubeconfig with that service account's token instead
(`--in-cluster` becomes `--kubeconfig=<file>`, and KUBECONFIG names the same file, so a client that
looks for in-cluster credentials first never falls back to the user's own ~/.kube/config).
"""

from __future__ import annotations

from typing import Any

IMAGE_ENTRYPOINT = ("dynmig",)  # the image's ENTRYPOINT (Containerfile)
IMAGE_CMD = ("serve",)  # its CMD: the args of a container that gives none


def repository(image: str) -> str:
    """An image reference without its tag or digest: `ghcr.io/dynmig/dynmig:0.1.0` -> `ghcr.io/dynmig/dynmig`."""
    name = image.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def dynmig_args(pod: dict[str, Any], image_repository: str) -> list[str] | None:
    """The args the dynmig image's entrypoint gets in this pod's one container, or None when the
    pod does not run the dynmig image (several containers, another image, another command)."""
    containers = (pod.get("spec") or {}).get("containers") or []
    if len(containers) != 1 or not isinstance(containers[0], dict):
        return None
    container = containers[0]
    image = container.get("image")
    if not isinstance(image, str) or repository(image) != image_repository:
        return None
    command = container.get("command")
    if command and tuple(command) != IMAGE_ENTRYPOINT:
        return None
    args = container.get("args")
    if args is None:
        return list(IMAGE_CMD)
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        return None
    return list(args)


def laptop_args(args: list[str], kubeconfig: str) -> list[str]:
    """The container's args with the service account's kubeconfig in place of `--in-cluster`."""
    out: list[str] = []
    credentials = False
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == "--in-cluster" or arg.startswith("--kubeconfig="):
            credentials = True
        elif arg == "--kubeconfig":
            credentials = skip = True  # its value is the next arg
        else:
            out.append(arg)
    return [*out, f"--kubeconfig={kubeconfig}"] if credentials else out


def literal_env(pod: dict[str, Any]) -> dict[str, str]:
    """The container's environment with literal values (those from the downward API, Secrets or
    ConfigMaps are left out)."""
    container = ((pod.get("spec") or {}).get("containers") or [{}])[0]
    return {
        str(e["name"]): str(e["value"])
        for e in container.get("env") or []
        if isinstance(e, dict) and "name" in e and "value" in e
    }


def service_account(pod: dict[str, Any]) -> tuple[str, str]:
    """(namespace, service account) the pod runs as."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    return str(meta.get("namespace") or "default"), str(spec.get("serviceAccountName") or "default")
