"""Who is calling: bearer tokens mapped to Kubernetes user info, and kubeconfig files per identity.

Why: admission webhooks decide by `userInfo` (only the scheduler's and the device plugin's service
accounts may write the allocation annotation), so each client must authenticate as someone real.
"""

from __future__ import annotations

import base64
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True)
class Identity:
    name: str  # short handle used by tests and kubeconfig contexts, e.g. "scheduler"
    username: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    token: str = field(default_factory=lambda: secrets.token_hex(16))

    def user_info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"username": self.username, "groups": list(self.groups)}
        if self.uid:
            info["uid"] = self.uid
        return info


def service_account(name: str, namespace: str, sa: str) -> Identity:
    """The identity of a pod running as service account `namespace/sa`."""
    return Identity(
        name=name,
        username=f"system:serviceaccount:{namespace}:{sa}",
        groups=("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"),
        uid=f"sa-{namespace}-{sa}",
    )


def default_identities() -> list[Identity]:
    """admin (cluster admin), the dynmig service accounts, kube-scheduler, a kubelet and a plain user."""
    return [
        Identity("admin", "kubernetes-admin", ("system:masters", "system:authenticated")),
        service_account("scheduler", "dynmig", "dynmig-scheduler"),
        service_account("device-plugin", "dynmig", "dynmig-device-plugin"),
        service_account("certs", "dynmig", "dynmig-certs"),
        Identity("kube-scheduler", "system:kube-scheduler", ("system:authenticated",)),
        Identity("kubelet", "system:node:node-1", ("system:nodes", "system:authenticated")),
        Identity("alice", "alice", ("developers", "system:authenticated")),
    ]


ANONYMOUS = Identity("anonymous", "system:anonymous", ("system:unauthenticated",), token="")


def kubeconfig(
    server_url: str, identity: Identity, ca_pem: bytes | None = None, namespace: str = "default"
) -> dict[str, Any]:
    cluster: dict[str, Any] = {"server": server_url}
    if ca_pem:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "sim", "cluster": cluster}],
        "users": [{"name": identity.name, "user": {"token": identity.token}}],
        "contexts": [
            {
                "name": identity.name,
                "context": {"cluster": "sim", "user": identity.name, "namespace": namespace},
            }
        ],
        "current-context": identity.name,
        "preferences": {},
    }


def write_kubeconfig(
    path: str | Path, server_url: str, identity: Identity, ca_pem: bytes | None = None
) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(kubeconfig(server_url, identity, ca_pem), sort_keys=False))
    path.chmod(0o600)
    return path
