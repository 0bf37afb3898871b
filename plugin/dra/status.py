"""What the plugin made of a claim's devices, written where users and `dynmig status` read it: the
claim's `status.devices` (ResourceClaim device status, `AllocatedDeviceStatus` of
k8s.io/api/resource/v1: entries owned by their driver, one per allocated device).

Per prepared device: condition `Ready` (reason `MigInstanceCreated`) and `data` with the MIG UUID, the
parent GPU's UUID and the GI/CI IDs. Written by read-modify-write through the `/status` subresource
(optimistic concurrency: a conflict is read again, at most `ATTEMPTS` times); only this driver's
entries are replaced. It is a report: a failure is logged and never fails the prepare (kubelet and
the container need nothing from it). The API server requires `update` on `resourceclaims/status`
and, where granular status authorization is on, `associated-node:update` on the synthetic
`resourceclaims/driver` subresource for this driver's name (`pkg/registry/resource/utils.go`
`AuthorizedForDeviceStatus`); the chart's ClusterRole grants both.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s

from kube.errors import Conflict, KubeError, NotFound, translated

log = logging.getLogger("dynmig.dra.status")
ATTEMPTS = 3
TIMEOUT = (5.0, 15.0)
JSON = dict[str, Any]


@dataclass(frozen=True)
class DeviceReport:
    pool: str
    device: str
    profile: str
    start: int
    gpu_uuid: str
    mig_uuid: str
    gpu_instance: int
    compute_instance: int


def entries(driver: str, reports: list[DeviceReport], now: str) -> list[JSON]:
    """The claim's `status.devices` entries for these devices."""
    return [
        {
            "driver": driver,
            "pool": r.pool,
            "device": r.device,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "MigInstanceCreated",
                    "message": f"{r.profile} at slice {r.start} of GPU {r.gpu_uuid}: {r.mig_uuid}",
                    "lastTransitionTime": now,
                }
            ],
            "data": {
                "migUUID": r.mig_uuid,
                "gpuUUID": r.gpu_uuid,
                "gpuInstanceID": r.gpu_instance,
                "computeInstanceID": r.compute_instance,
            },
        }
        for r in reports
    ]


def merged(status: Mapping[str, Any], driver: str, ours: list[JSON]) -> list[JSON]:
    """Other drivers' entries kept, this driver's replaced by `ours`."""
    kept = [e for e in status.get("devices") or [] if isinstance(e, dict) and e.get("driver") != driver]
    return kept + ours


class DeviceStatusWriter:
    def __init__(self, api: k8s.ApiClient, driver: str):
        self.api = k8s.ResourceV1Api(api)
        self.driver = driver

    def report(self, namespace: str, name: str, reports: list[DeviceReport]) -> bool:
        """Write the devices' entries on the claim; True when the API has them."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        ours = entries(self.driver, reports, now)
        for _ in range(ATTEMPTS):
            try:
                claim = self._read(namespace, name)
                status = claim.setdefault("status", {})
                if not isinstance(status, dict) or status.get("allocation") is None:
                    return False  # deallocated meanwhile: nothing to report on
                old = [
                    e
                    for e in status.get("devices") or []
                    if isinstance(e, dict) and e.get("driver") == self.driver
                ]
                if [_sans_time(e) for e in old] == [_sans_time(e) for e in ours]:
                    return True
                status["devices"] = merged(status, self.driver, ours)
                with translated("update resourceclaim status"):
                    self.api.replace_namespaced_resource_claim_status(
                        name, namespace, claim, _preload_content=False, _request_timeout=TIMEOUT
                    )
                return True
            except Conflict:
                continue
            except NotFound:
                return False
            except KubeError as error:
                log.warning("claim %s/%s: device status not written: %s", namespace, name, error)
                return False
        log.warning("claim %s/%s: device status not written: it kept changing", namespace, name)
        return False

    def _read(self, namespace: str, name: str) -> JSON:
        with translated("read resourceclaim"):
            response = self.api.read_namespaced_resource_claim(
                name, namespace, _preload_content=False, _request_timeout=TIMEOUT
            )
            body = json.loads(response.data)
        if not isinstance(body, dict):
            raise KubeError(f"claim {namespace}/{name}: the API's answer is not an object")
        return body


def _sans_time(entry: Mapping[str, Any]) -> JSON:
    out = dict(entry)
    out["conditions"] = [
        {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in entry.get("conditions") or []
    ]
    return out
